"""PNG charts comparing simulation results: CDFs, utilisation timelines and metric bars.

Results are duck-typed (see ``dlsched.report.tables``). matplotlib is imported lazily inside
the functions so that ``import dlsched.report`` stays cheap and works without a display.
We build ``Figure`` objects directly on an Agg canvas instead of going through ``pyplot``:
this never touches the process-wide backend or pyplot's global figure registry, so it is
safe in notebooks/servers that use another backend, and figures are freed as soon as they
go out of scope.

Every function writes its PNG atomically (temp file in the target directory, then
``os.replace``) and returns the ``Path`` written. Empty or all-NaN data produce a
placeholder chart ("no finished jobs" / "no data") rather than an exception.
"""
from __future__ import annotations

import contextlib
import math
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_cdf", "plot_timeline", "plot_bars", "atomic_open", "DPI"]

DPI = 110

# Display settings for summary keys in ``plot_bars``: (label, kind). Unknown keys are
# plotted raw with the key as label.
_BAR_META: dict[str, tuple[str, str]] = {
    "mean_jct_s": ("Mean JCT", "seconds"),
    "median_jct_s": ("Median JCT", "seconds"),
    "p95_jct_s": ("p95 JCT", "seconds"),
    "p99_jct_s": ("p99 JCT", "seconds"),
    "makespan_s": ("Makespan", "seconds"),
    "mean_wait_s": ("Mean wait", "seconds"),
    "gpu_util": ("GPU utilisation", "fraction"),
    "effective_gpu_util": ("Effective GPU utilisation", "fraction"),
    "deadline_hit_rate": ("Deadline hit rate", "fraction"),
    "nic_bytes": ("NIC traffic", "bytes"),
    "cross_rack_bytes": ("Cross-rack traffic", "bytes"),
    "sched_time_s": ("Scheduler time", "raw_s"),
    "partial_hold_gpu_s": ("Partial-hold GPU time", "gpu_s"),
}


# --------------------------------------------------------------------------- helpers

def _new_figure(width: float, height: float):
    """A Figure attached to an Agg canvas (no pyplot, no global backend switch)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", **kwargs):
    """Open a temp file next to ``path`` for writing; on success ``os.replace`` it onto
    ``path``, on error remove it. Readers (e.g. a browser refreshing the report) never see
    a half-written file.

    The temp file is created with ``open(..., "x")`` rather than ``mkstemp`` so it gets the
    usual umask-derived permissions (mkstemp's 0600 would make reports unreadable when
    served by another user).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    fh = open(tmp, mode.replace("w", "x"), **kwargs)
    try:
        with fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _save(fig, path: str | os.PathLike) -> Path:
    """Write ``fig`` as PNG to ``path`` atomically and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=DPI)
    return path


def _label(text: Any) -> str:
    """Make a string safe for matplotlib text: '$' would otherwise start mathtext and an
    unbalanced one (a policy named "cost$") raises at draw time."""
    return str(text).replace("$", r"\$")


def _placeholder(ax, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=12, color="0.4",
            transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _color(i: int) -> str:
    # The default property cycle ("C0".."C9"), indexed by result position, so a policy
    # keeps the same colour in every chart of a report.
    return f"C{i % 10}"


def _finite(values: Any) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    return arr[np.isfinite(arr)]


def _finished_values(result: Any, column: str) -> np.ndarray:
    """Finite values of ``column`` over the finished jobs (``finish_s`` not NaN)."""
    jobs = getattr(result, "jobs", None)
    if jobs is None or len(jobs) == 0 or column not in jobs:
        return np.empty(0)
    if "finish_s" in jobs:
        jobs = jobs[jobs["finish_s"].notna()]
    import pandas as pd  # pandas is a core dependency; coerce odd dtypes (object/None)

    return _finite(pd.to_numeric(jobs[column], errors="coerce"))


def _num(value: Any) -> float:
    """float(value), or NaN for None / non-numeric values."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


# --------------------------------------------------------------------------- charts

def plot_cdf(results: Sequence[Any], column: str, path: str | os.PathLike,
             title: str = "", xlabel: str = "") -> Path:
    """Empirical CDF of ``jobs[column]`` over finished jobs, one line per result.

    The legend shows the policy names. The x axis turns logarithmic when the positive
    values span more than two decades; if zeros are present (common for waiting times)
    a symmetric-log axis is used so they remain visible.
    """
    fig = _new_figure(7.0, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    series = [(r, _finished_values(r, column)) for r in results]
    if title:
        ax.set_title(_label(title))

    if not any(len(v) for _r, v in series):
        _placeholder(ax, "no finished jobs")
        return _save(fig, path)

    for i, (result, values) in enumerate(series):
        label = _label(getattr(result, "policy", f"run {i}"))
        if len(values) == 0:
            # Keep the policy in the legend so its absence is explained, not silent.
            ax.plot([], [], color=_color(i), label=f"{label} (no finished jobs)")
            continue
        xs = np.sort(values)
        ys = np.arange(1, len(xs) + 1) / len(xs)
        # Start the curve at y=0 so the first step is drawn.
        ax.step(np.concatenate([[xs[0]], xs]), np.concatenate([[0.0], ys]), where="post",
                color=_color(i), label=label, linewidth=1.6)

    everything = np.concatenate([v for _r, v in series if len(v)])
    positive = everything[everything > 0]
    if len(positive) and positive.max() / positive.min() > 100:
        if (everything <= 0).any():
            ax.set_xscale("symlog", linthresh=float(positive.min()))
        else:
            ax.set_xscale("log")

    ax.set_ylim(0.0, 1.02)
    ax.set_ylabel("fraction of finished jobs")
    ax.set_xlabel(_label(xlabel or column))
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def plot_timeline(results: Sequence[Any], path: str | os.PathLike) -> Path:
    """Allocated and effective GPU utilisation (fraction of ``total_gpus``) vs time (h).

    One subplot per result, all on the same time and utilisation ranges; the timeline is a step function
    (each sample holds until the next one).
    """
    results = list(results)
    n = max(1, len(results))
    fig = _new_figure(8.0, 1.2 + 2.0 * n)
    # Axes are deliberately not shared (sharex/sharey): a "no data" placeholder clears its
    # ticks, which would clear them on every shared axis. Common limits are set below.
    axes = [fig.add_subplot(n, 1, k + 1) for k in range(n)]

    if not results:
        _placeholder(axes[0], "no data")
        return _save(fig, path)

    plotted = []
    t_max = 0.0
    for i, (ax, result) in enumerate(zip(axes, results)):
        policy = _label(getattr(result, "policy", f"run {i}"))
        ax.set_title(policy, fontsize=10, loc="left")
        tl = getattr(result, "timeline", None)
        total = _num(getattr(result, "total_gpus", math.nan))
        if tl is None or len(tl) == 0 or "time_s" not in tl or not (total > 0):
            _placeholder(ax, "no data")
            continue
        tl = tl.sort_values("time_s")
        hours = tl["time_s"].to_numpy(dtype=float) / 3600.0
        for col, name, style in (("allocated_gpus", "allocated", "-"),
                                 ("effective_gpus", "effective", "--")):
            if col in tl:
                frac = tl[col].to_numpy(dtype=float) / total
                ax.step(hours, frac, where="post", linestyle=style, color=_color(i),
                        alpha=1.0 if style == "-" else 0.8, label=name, linewidth=1.4)
        finite_h = hours[np.isfinite(hours)]
        if len(finite_h):
            t_max = max(t_max, float(finite_h.max()))
        ax.set_ylabel("GPU fraction")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
        plotted.append(ax)

    for ax in plotted:
        ax.set_ylim(0.0, 1.05)
        ax.set_xlim(0.0, t_max if t_max > 0 else 1.0)
        ax.set_xlabel("time (h)")
    fig.tight_layout()
    return _save(fig, path)


def _bar_scale(kind: str, values: list[float]) -> tuple[float, str]:
    """(multiplier, unit) to present ``values`` of a given kind readably."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    peak = max(finite) if finite else 0.0
    if kind == "seconds":
        if peak >= 2 * 86400:
            return 1 / 86400, "d"
        if peak >= 2 * 3600:
            return 1 / 3600, "h"
        if peak >= 120:
            return 1 / 60, "min"
        return 1.0, "s"
    if kind == "fraction":
        return 100.0, "%"
    if kind == "bytes":
        return 1e-9, "GB"
    if kind == "gpu_s":
        return 1 / 3600, "GPU-h"
    if kind == "raw_s":
        return 1.0, "s"
    return 1.0, ""


def plot_bars(results: Sequence[Any], keys: Sequence[str], path: str | os.PathLike) -> Path:
    """Bars of summary metrics: one panel per key, one bar per result (policy).

    Metrics have unrelated units and scales, so each gets its own panel and axis rather
    than sharing one axis; bars keep the same colour per policy across panels.
    Missing values (None/NaN) are marked "n/a" instead of drawn.
    """
    results = list(results)
    keys = list(keys)
    if not keys or not results:
        fig = _new_figure(6.0, 3.0)
        _placeholder(fig.add_subplot(1, 1, 1), "no data")
        return _save(fig, path)

    ncols = min(3, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    width = max(3.2, 0.55 * len(results) + 1.6)
    fig = _new_figure(width * ncols, 2.9 * nrows + 0.4)
    policies = [_label(getattr(r, "policy", f"run {i}")) for i, r in enumerate(results)]
    xs = np.arange(len(results))

    for k, key in enumerate(keys):
        ax = fig.add_subplot(nrows, ncols, k + 1)
        label, kind = _BAR_META.get(key, (key, "raw"))
        raw = [_num((getattr(r, "summary", None) or {}).get(key)) for r in results]
        factor, unit = _bar_scale(kind, raw)
        vals = [v * factor for v in raw]
        heights = [v if math.isfinite(v) else 0.0 for v in vals]
        bars = ax.bar(xs, heights, color=[_color(i) for i in range(len(results))])
        ax.bar_label(bars, labels=[f"{v:.3g}" if math.isfinite(v) else "n/a" for v in vals],
                     fontsize=8, padding=2)
        ax.set_title(_label(f"{label} ({unit})" if unit else label), fontsize=10)
        rotate = len(results) > 3 or max(len(p) for p in policies) > 10
        ax.set_xticks(xs, policies, rotation=30 if rotate else 0,
                      ha="right" if rotate else "center", fontsize=8)
        ax.margins(y=0.18)  # headroom for the value labels
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)
