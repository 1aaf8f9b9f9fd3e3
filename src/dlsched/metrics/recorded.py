"""What really happened, beside what was simulated (`--against-trace`).

A trace that records when each job started and ended (raw Philly, Helios, PAI, Slurm, SWF, a
`--map` with start / end) gives every job a recorded wait (start - submit) and a recorded JCT
(end - submit), on the submit clock. The jobs table keeps them as `recorded_wait_s` and
`recorded_jct_s` (NaN where a job has none), and only when at least one job has a recorded start:
a run on a workload without recorded times keeps the table it had.

`against_trace(jobs)` compares a run's jobs table with those columns: per queue (and over all
jobs) the median and p95 wait, simulated and recorded side by side, and over the jobs that have
both, the Spearman rank correlation of wait and of JCT (scipy.stats.spearmanr): 1 when the replay
orders the jobs as the real cluster did, 0 when it bears no relation to it.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

RECORDED_COLUMNS = ("recorded_wait_s", "recorded_jct_s")


def has_recorded(jobs) -> bool:
    """Whether any JobSpec of `jobs` has a recorded start time."""
    return any(j.recorded_start_s is not None for j in jobs)


def recorded_columns(specs) -> dict[str, np.ndarray]:
    """The jobs table's recorded columns for these JobSpecs (in table order), or {} when none of
    them has a recorded start (the table then keeps the columns it had)."""
    if not has_recorded(specs):
        return {}
    nan = math.nan
    sub = np.fromiter((s.submit_time_s for s in specs), dtype=np.float64, count=len(specs))
    start = np.fromiter((nan if s.recorded_start_s is None else s.recorded_start_s for s in specs),
                        dtype=np.float64, count=len(specs))
    end = np.fromiter((nan if s.recorded_end_s is None else s.recorded_end_s for s in specs),
                      dtype=np.float64, count=len(specs))
    return {"recorded_wait_s": start - sub, "recorded_jct_s": end - sub}


def _q(a: np.ndarray, q: float) -> float:
    a = a[np.isfinite(a)]
    return float(np.quantile(a, q)) if a.size else math.nan


def _spearman(x: np.ndarray, y: np.ndarray) -> tuple[float, int, str]:
    """(rho, jobs, why rho is NaN) over the jobs where both are finite; NaN under 3 jobs or when
    one side is constant (no ranking to compare)."""
    from scipy.stats import spearmanr
    ok = np.isfinite(x) & np.isfinite(y)
    n = int(ok.sum())
    if n < 3:
        return math.nan, n, "fewer than 3 jobs have both"
    for side, a in (("simulated", x), ("recorded", y)):
        if np.ptp(a[ok]) == 0:
            return math.nan, n, f"every {side} value is {a[ok][0]:g} s: no ranking"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rho = spearmanr(x[ok], y[ok]).statistic
    return float(rho), n, ""


def _row(queue: str, sim_w: np.ndarray, rec_w: np.ndarray) -> dict[str, Any]:
    return {"queue": queue, "jobs": int(sim_w.size), "recorded_jobs": int(np.isfinite(rec_w).sum()),
            "sim_median_wait_s": _q(sim_w, 0.5), "rec_median_wait_s": _q(rec_w, 0.5),
            "sim_p95_wait_s": _q(sim_w, 0.95), "rec_p95_wait_s": _q(rec_w, 0.95)}


def against_trace(jobs) -> dict[str, Any]:
    """Simulated against recorded, from a run's jobs table (a DataFrame with queue, wait_s,
    jct_s, recorded_wait_s, recorded_jct_s): {queues: [rows], all: row, spearman_wait,
    spearman_jct, jobs_compared_wait, jobs_compared_jct, and a note where a
    correlation is NaN}. A simulated job that never started
    counts in `jobs` but not in the simulated quantiles (its wait is NaN)."""
    q = jobs["queue"].astype(str).to_numpy()
    sw, sj = jobs["wait_s"].to_numpy(dtype=float), jobs["jct_s"].to_numpy(dtype=float)
    rw, rj = jobs["recorded_wait_s"].to_numpy(dtype=float), jobs["recorded_jct_s"].to_numpy(dtype=float)
    rows = [_row(name, sw[q == name], rw[q == name]) for name in sorted(set(q.tolist()))]
    rho_w, n_w, why_w = _spearman(sw, rw)
    rho_j, n_j, why_j = _spearman(sj, rj)
    return {"queues": rows, "all": _row("(all)", sw, rw), "spearman_wait": rho_w, "jobs_compared_wait": n_w,
            "spearman_wait_note": why_w, "spearman_jct": rho_j, "jobs_compared_jct": n_j,
            "spearman_jct_note": why_j}


def _num(v: float) -> str:
    return "n/a" if not math.isfinite(v) else f"{v:,.0f}"


def report_lines(policy: str, rep: dict[str, Any]) -> tuple[list[str], list[list[str]], str]:
    """(header, rows, footer) of the terminal table for one policy."""
    head = ["queue", "jobs", "with recorded", "median wait sim", "median wait rec", "p95 wait sim", "p95 wait rec"]
    rows = [[r["queue"], str(r["jobs"]), str(r["recorded_jobs"]), _num(r["sim_median_wait_s"]),
             _num(r["rec_median_wait_s"]), _num(r["sim_p95_wait_s"]), _num(r["rec_p95_wait_s"])]
            for r in [*rep["queues"], rep["all"]]]

    def rho(what: str) -> str:
        v, n, why = rep[f"spearman_{what}"], rep[f"jobs_compared_{what}"], rep[f"spearman_{what}_note"]
        return f"{v:+.3f} over {n} jobs" if math.isfinite(v) else f"n/a over {n} jobs ({why})"
    foot = f"{policy}: Spearman rank correlation, simulated against recorded: wait {rho('wait')}; JCT {rho('jct')}"
    return head, rows, foot


def jsonable(x):
    """`x` with every NaN (a figure with nothing to compute it from) as None, for JSON."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
