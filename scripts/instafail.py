"""A pytest plugin for device calls: print each test's outcome, duration and, for a failure, the end of
its report as soon as it ends, so a call cut short by its time limit still shows why tests failed.

    PYTHONPATH=scripts python -m pytest -p instafail ...
"""

from __future__ import annotations


def pytest_runtest_logreport(report):
    if report.when == "call" or report.failed:
        print(f"\n[{report.outcome} {report.duration:.1f}s] {report.nodeid} ({report.when})", flush=True)
    if report.failed:
        print(str(report.longreprtext)[-2500:], flush=True)
