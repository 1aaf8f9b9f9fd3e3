"""What re-share windows cost in accuracy and buy in time (docs/simulator.md, "Re-share windows"):
each case run with exact max-min shares at every event (window 0) and with windows of W seconds,
FIFO, the same seed, against the exact run: the relative error of the mean JCT, of the JCT
distribution's median and 99th percentile, and of the makespan. A job's own JCT is not compared:
which nodes a job gets depends on who finished first, so one finish a few seconds earlier can put
a later job on other racks, behind other uplinks, at another speed, and the makespan is one such
job.

Cases:
- `random`: small oversubscribed clusters (`v100-N` with rack uplinks k:1) under Poisson loads,
  seeds 1..S, with the region threshold lowered to 16 flows so that windows are used on a
  cluster this small (at the default, 256, they never are);
- `large`: `poisson:jobs=J,rate=0.05` on `v100-1500` at 8:1, the default threshold (the
  benchmarks/bench_scale.py case).

    python benchmarks/reshare_error.py [--windows 60,300,600] [--seeds 5] [--large-jobs 20000]
                                       [--cases random,large]

Prints one table row per case and window: the errors, and CPU seconds against the exact run's.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import cluster_file  # noqa: E402

import dlsched  # noqa: E402
from dlsched.sim.backend import SimBackend  # noqa: E402
from dlsched.workload.io import load_workload  # noqa: E402
from dlsched.workload.speed import SpeedParams  # noqa: E402


def run(cluster: str, jobs: list, seed: int, window: float) -> tuple[np.ndarray, float, float]:
    t = time.process_time()
    res = dlsched.simulate(cluster, jobs, "fifo", seed=seed, record_rates=False,
                           speed=SpeedParams(reshare_window_s=window))
    cpu = time.process_time() - t
    j = res.jobs
    return (j["finish_s"] - j["submit_s"]).to_numpy(dtype=float), float(res.summary["makespan_s"]), cpu


def compare(exact, approx) -> dict:
    (e, me, ce), (a, ma, ca) = exact, approx

    def rel(x, y):
        return abs(x - y) / max(abs(y), 1e-9)
    return {"mean_jct": rel(a.mean(), e.mean()), "median": rel(np.median(a), np.median(e)),
            "p99": rel(np.percentile(a, 99), np.percentile(e, 99)), "makespan": rel(ma, me), "cpu": ca,
            "cpu_exact": ce}


def case(rows: list, name: str, cluster: str, workload: str, seed: int, windows) -> None:
    jobs = load_workload(workload, seed=seed)
    exact = run(cluster, jobs, seed, 0.0)
    for w in windows:
        rows.append((name, f"{w:g}", compare(exact, run(cluster, jobs, seed, w))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--windows", default="60,300,600", help="comma-separated windows in seconds (> 0)")
    ap.add_argument("--seeds", type=int, default=5, help="seeds of the random case (>= 1)")
    ap.add_argument("--large-jobs", type=int, default=20000, help="jobs of the large case (>= 1)")
    ap.add_argument("--cases", default="random,large", help="random, large or both (comma-separated)")
    a = ap.parse_args(argv)
    try:
        windows = [float(w) for w in a.windows.split(",") if w]
    except ValueError:
        ap.error(f"--windows: numbers expected, got {a.windows!r}")
    cases = [c for c in a.cases.split(",") if c]
    if not windows or min(windows) <= 0 or a.seeds < 1 or a.large_jobs < 1 or set(cases) - {"random", "large"}:
        ap.error("--windows must be > 0, --seeds and --large-jobs >= 1, --cases random and/or large")
    folder = Path("out/reshare_error")
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    if "random" in cases:
        SimBackend.reshare_region = 16
        for seed in range(1, a.seeds + 1):
            rng = np.random.default_rng(seed)
            nodes = int(rng.choice([32, 64, 96]))
            k = int(rng.choice([2, 4, 8]))
            rate = float(rng.choice([0.01, 0.02]))
            case(rows, f"random {seed}: v100-{nodes} {k}:1, rate {rate}", cluster_file(f"v100-{nodes}", k, folder),
                 f"poisson:jobs=1500,rate={rate}", seed, windows)
        SimBackend.reshare_region = 256
    if "large" in cases:
        case(rows, f"large: {a.large_jobs:,} jobs, v100-1500 8:1", cluster_file("v100-1500", 8, folder),
             f"poisson:jobs={a.large_jobs},rate=0.05", 1, windows)
    print("| case | window (s) | mean JCT | median JCT | p99 JCT | makespan | CPU s (exact) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, w, c in rows:
        print(f"| {name} | {w} | {c['mean_jct']:.2%} | {c['median']:.2%} | {c['p99']:.2%} | {c['makespan']:.2%} "
              f"| {c['cpu']:.1f} ({c['cpu_exact']:.1f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
