"""Scheduling: TaskGraph -> Schedule (per-worker queues, predicted times, kernel plan).

``schedule(tg, target)`` is the entry point; ``mkc.schedule.inspect`` draws the result.
"""

from mkc.schedule.build import METHODS, schedule, schedule_with_report
from mkc.schedule.cost import CostModel
from mkc.schedule.ir import KernelPlan, Schedule

__all__ = ["METHODS", "CostModel", "KernelPlan", "Schedule", "schedule", "schedule_with_report"]
