"""Scheduling: TaskGraph -> Schedule (per-worker queues, predicted times, kernel plan).

``schedule(tg, target)`` is the entry point; ``mkc.schedule.inspect`` draws the result.
"""

from __future__ import annotations

import importlib

# Loaded on first use, so that ``mkc.schedule.ir`` (the IR and its constants, which the command
# line's choices come from) imports without the scheduler, numpy and networkx.
_LAZY = {"METHODS": "ir", "KernelPlan": "ir", "Schedule": "ir", "CostModel": "cost", "schedule": "stage",
         "schedule_with_report": "stage"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"mkc.schedule.{_LAZY[name]}"), name)


__all__ = ["METHODS", "CostModel", "KernelPlan", "Schedule", "schedule", "schedule_with_report"]
