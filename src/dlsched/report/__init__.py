"""Reports on simulation results: HTML pages with PNG charts, and summary tables.

Public API::

    write_compare_report(results, out_dir, title="dlsched comparison", extra_html="") -> Path
    write_run_report(result, out_dir) -> Path
    summary_table(results) -> list[dict]
    rich_table(rows, title) -> rich.table.Table
    format_seconds(x) -> str

Results are duck-typed (``policy``, ``jobs``, ``summary``, ``timeline``, ``total_gpus``, as
``dlsched.metrics.SimResult``). Importing this package does not import matplotlib or rich;
they are loaded only when a chart or terminal table is actually produced.
"""
import sys
import types

from dlsched.report.html import write_compare_report, write_run_report
from dlsched.report.tables import format_seconds, rich_table, summary_table


class _Callable(types.ModuleType):
    """`dlsched.report(step=..., loss=...)`, the call issue 37 names for a script of your own:
    the same as dlsched.reporting.report (a no-op outside a dlsched job, never raises). The
    package keeps its name for the HTML reports; being callable costs it nothing."""

    def __call__(self, step: int, **metrics: float) -> None:
        from dlsched.reporting import report
        report(step, **metrics)


sys.modules[__name__].__class__ = _Callable

__all__ = [
    "write_compare_report",
    "write_run_report",
    "summary_table",
    "rich_table",
    "format_seconds",
]
