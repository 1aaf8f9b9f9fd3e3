"""Summary tables of simulation results, for the terminal (rich) and the HTML report.

A *result* here is any object with the attributes of ``dlsched.metrics.SimResult``
(``policy``, ``jobs``, ``summary``, ``timeline``, ``total_gpus``); only ``policy`` and
``summary`` are read by this module. It is deliberately duck-typed so that reports can be
built from results loaded from disk or fabricated in tests without importing the simulator.

``summary_table`` returns *raw numbers* (converted to display units: %, GB, GPU-hours, but
not rounded or stringified), so callers can sort, compare or serialise them; formatting into
strings happens only at the edges (``format_cell``, ``rich_table``, the HTML writer).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "COLUMNS",
    "format_seconds",
    "format_cell",
    "summary_table",
    "rich_table",
]

#: Placeholder shown for missing values (None / NaN) in every formatted table.
MISSING = "–"

# Column specification shared by the terminal and HTML tables: (row key, header, kind).
# ``kind`` selects the formatter in ``format_cell``.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("policy", "Policy", "text"),
    ("jobs", "Jobs", "int"),
    ("finished", "Finished", "int"),
    ("mean_jct_s", "Mean JCT", "seconds"),
    ("median_jct_s", "Median JCT", "seconds"),
    ("p95_jct_s", "p95 JCT", "seconds"),
    ("p99_jct_s", "p99 JCT", "seconds"),
    ("makespan_s", "Makespan", "seconds"),
    ("mean_wait_s", "Mean wait", "seconds"),
    ("gpu_util_pct", "GPU util %", "pct"),
    ("effective_util_pct", "Effective util %", "pct"),
    ("nic_gb", "NIC GB", "float"),
    ("cross_rack_gb", "Cross-rack GB", "float"),
    ("sched_time_s", "Sched time s", "float3"),
    ("partial_hold_gpu_h", "Partial-hold GPU-h", "float"),
    ("deadline_hit_pct", "Deadline hit %", "pct"),
)
_KIND = {key: kind for key, _label, kind in COLUMNS}


def _num(value: Any) -> float | None:
    """Coerce a summary value to float, mapping None / NaN / non-numbers to None."""
    if value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def _scaled(value: Any, factor: float) -> float | None:
    num = _num(value)
    return None if num is None else num * factor


def _int(value: Any) -> int | None:
    num = _num(value)
    return None if num is None or math.isinf(num) else int(round(num))


def format_seconds(x: Any) -> str:
    """Human-readable duration: ``"45.3 s"``, ``"12m 05s"``, ``"1h 02m"``, ``"2d 03h"``.

    The unit is picked *after* rounding to that unit's precision, so e.g. 3599.7 s reads
    "1h 00m" rather than "59m 60s". None/NaN give ``"–"``; infinities give ``"∞"``.
    """
    num = _num(x)
    if num is None:
        return MISSING
    if math.isinf(num):
        return "∞" if num > 0 else "-∞"
    if num < 0:
        return "-" + format_seconds(-num)
    if round(num, 1) < 60:
        return f"{num:.1f} s"
    secs = round(num)
    if secs < 3600:
        return f"{secs // 60}m {secs % 60:02d}s"
    mins = round(num / 60)
    if mins < 24 * 60:
        return f"{mins // 60}h {mins % 60:02d}m"
    hours = round(num / 3600)
    return f"{hours // 24}d {hours % 24:02d}h"


def format_cell(key: str, value: Any) -> str:
    """Format one ``summary_table`` cell for display according to its column kind.

    Unknown keys are formatted generically (numbers with 2 decimals, others via ``str``).
    """
    kind = _KIND.get(key)
    if kind == "text":
        return MISSING if value is None else str(value)
    if kind is None and not isinstance(value, (int, float)) and value is not None:
        return str(value)
    num = _num(value)
    if num is None:
        return MISSING
    if kind == "seconds":
        return format_seconds(num)
    if kind == "int":
        return f"{int(round(num)):,}" if math.isfinite(num) else str(num)
    if kind == "pct":
        return f"{num:.1f}"
    if kind == "float3":
        return f"{num:.3f}"
    return f"{num:,.2f}"


def summary_row(result: Any) -> dict[str, Any]:
    """One ``summary_table`` row for a single result (see ``summary_table``)."""
    s: Mapping[str, Any] = getattr(result, "summary", None) or {}
    return {
        "policy": str(getattr(result, "policy", None) or s.get("policy") or "?"),
        "jobs": _int(s.get("jobs")),
        "finished": _int(s.get("finished")),
        "mean_jct_s": _num(s.get("mean_jct_s")),
        "median_jct_s": _num(s.get("median_jct_s")),
        "p95_jct_s": _num(s.get("p95_jct_s")),
        "p99_jct_s": _num(s.get("p99_jct_s")),
        "makespan_s": _num(s.get("makespan_s")),
        "mean_wait_s": _num(s.get("mean_wait_s")),
        # Utilisations and the deadline hit rate are fractions in the summary.
        "gpu_util_pct": _scaled(s.get("gpu_util"), 100.0),
        "effective_util_pct": _scaled(s.get("effective_gpu_util"), 100.0),
        "nic_gb": _scaled(s.get("nic_bytes"), 1e-9),
        "cross_rack_gb": _scaled(s.get("cross_rack_bytes"), 1e-9),
        "sched_time_s": _num(s.get("sched_time_s")),
        "partial_hold_gpu_h": _scaled(s.get("partial_hold_gpu_s"), 1 / 3600.0),
        "deadline_hit_pct": _scaled(s.get("deadline_hit_rate"), 100.0),
    }


def summary_table(results: Iterable[Any]) -> list[dict[str, Any]]:
    """Key figures per result, one dict per result in input order.

    Keys are those of ``COLUMNS``. Values are numbers in display units (seconds, %, GB,
    GPU-hours), or None where the summary lacks the figure (e.g. no deadlines).
    """
    return [summary_row(r) for r in results]


def rich_table(rows: Sequence[Mapping[str, Any]], title: str = "dlsched summary"):
    """Render ``summary_table`` rows as a ``rich.table.Table`` for the terminal.

    Known columns appear in ``COLUMNS`` order; any extra keys present in the rows follow.
    """
    # Imported lazily: rich is only needed for terminal output.
    from rich.table import Table
    from rich.text import Text

    labels = {key: label for key, label, _kind in COLUMNS}
    keys = [key for key, _label, _kind in COLUMNS if any(key in r for r in rows)]
    for row in rows:
        keys.extend(k for k in row if k not in keys)

    table = Table(title=title)
    for key in keys:
        text_col = _KIND.get(key) == "text"
        table.add_column(labels.get(key, key), justify="left" if text_col else "right",
                         no_wrap=text_col)
    for row in rows:
        # Text(...) rather than str so policy names like "[red]x" are not parsed as markup.
        table.add_row(*(Text(format_cell(k, row.get(k))) for k in keys))
    return table
