"""seed000-tetris: Tetris against FIFO on seed 000's workload (40 jobs x 30 tasks, 20 nodes,
arrivals uniform over the first 3000 s).

Published (seed 000): makespan 5519 s (Tetris) vs 7083 s (FIFO), -22.1 %; mean JCT 2230 s vs
2415 s. Expected: Tetris's makespan at least 20 % below FIFO's and its mean JCT lower.
`fifo-backfill` (first fit that lets later jobs pass a blocked head) is shown too, to separate
what alignment gains from what not blocking the queue gains.
"""
from __future__ import annotations

from dlsched.experiments.base import (Check, Experiment, ExperimentResult, mean_std, register_experiment,
                                      run_seeds, summarise)

PUBLISHED = {"fifo": {"makespan_s": 7083.0, "mean_jct_s": 2415.0},
             "tetris": {"makespan_s": 5519.0, "mean_jct_s": 2230.0}}
KEYS = ("makespan_s", "mean_jct_s", "median_jct_s", "p95_jct_s", "mean_wait_s", "gpu_util", "sched_time_s")


def run(seeds: int = 5) -> ExperimentResult:
    runs = run_seeds("seed000", "seed000", ["fifo", "tetris", "fifo-backfill"], seeds)
    rows = summarise(runs, KEYS)
    ms = {p: mean_std([r.summary["makespan_s"] for r in rs])[0] for p, rs in runs.items()}
    jct = {p: mean_std([r.summary["mean_jct_s"] for r in rs])[0] for p, rs in runs.items()}
    cut = 1 - ms["tetris"] / ms["fifo"]
    published = [
        {"figure": "makespan FIFO (s)", "published": 7083.0, "ours": ms["fifo"]},
        {"figure": "makespan Tetris (s)", "published": 5519.0, "ours": ms["tetris"]},
        {"figure": "makespan reduction", "published": "22.1 %", "ours": f"{100 * cut:.1f} %"},
        {"figure": "mean JCT FIFO (s)", "published": 2415.0, "ours": jct["fifo"]},
        {"figure": "mean JCT Tetris (s)", "published": 2230.0, "ours": jct["tetris"]},
        {"figure": "makespan first-fit backfill (s)", "published": "-", "ours": ms["fifo-backfill"]},
    ]
    per_seed = [1 - t.summary["makespan_s"] / f.summary["makespan_s"] for t, f in zip(runs["tetris"], runs["fifo"])]
    checks = [
        Check("Tetris's makespan at least 20 % below FIFO's (mean over seeds)", cut >= 0.20,
              f"{100 * cut:.1f} % (per seed: {', '.join(f'{100 * x:.0f}%' for x in per_seed)})"),
        Check("Tetris's mean JCT below FIFO's", jct["tetris"] < jct["fifo"],
              f"{jct['tetris']:,.0f} s vs {jct['fifo']:,.0f} s"),
    ]
    return ExperimentResult("seed000-tetris", "Tetris vs FIFO (seed 000)", rows, published, checks,
                            results={"": runs})


register_experiment(Experiment("seed000-tetris", "Tetris vs FIFO (seed 000)", "seed 000", run, default_seeds=5))
