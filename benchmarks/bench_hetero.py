"""Solve time of the hetero (Gavel) policies on n active jobs over 3 GPU types.

    python benchmarks/bench_hetero.py [--jobs 100 1000] [--trials 1] [--policies NAME ...]
                                      [--pair-gain G]

The case follows Gavel's `scheduler/scripts/microbenchmarks/sweep_policy_runtimes.py`: n jobs
drawn as Gavel's generator draws them (job type uniform over the table's 26, scale factor
1/2/4/8 with p = 0.70/0.10/0.15/0.05 redrawn until the type has it, duration 60 x 10^U(1.5, 3) s
with p = 0.8 else 60 x 10^U(3, 4) s, remaining steps = duration x V100 steps/s), priority 1, on
n/4 GPUs of each of K80, P100, V100, Gavel's table. Times since arrival U(0, 1 day); SLOs for
`max_sum_throughput_perf` on 20 % of the jobs at 2 x their V100 duration. Prints one line per
(policy, n): seconds per call, mean over trials (seeds 2, 3, ...). Packed policies build every
equal-scale pair unless `--pair-gain` prunes them (see `packed_problem`).
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dlsched.policies import hetero
from dlsched.workload.throughputs import load_throughputs

POLICIES = ["isolated", "max_min_fairness", "max_min_fairness_perf", "max_min_fairness_packed",
            "max_min_fairness_water_filling", "max_min_fairness_water_filling_perf",
            "max_min_fairness_water_filling_packed", "finish_time_fairness",
            "finish_time_fairness_perf", "min_total_duration", "min_total_duration_perf",
            "max_sum_throughput_perf", "fifo", "gandiva", "allox"]


def make_jobs(n: int, seed: int, table, *, single_gpu: bool = False) -> list[hetero.HeteroJob]:
    rng = random.Random(seed)
    types = table.job_types()
    jobs = []
    for i in range(n):
        while True:
            jt = rng.choice(types)
            sf = 1 if single_gpu else rng.choices([1, 2, 4, 8], [0.70, 0.10, 0.15, 0.05])[0]
            if sf in table.gpu_counts(jt):
                break
        duration = 60 * 10 ** rng.uniform(1.5, 3) if rng.random() < 0.8 else 60 * 10 ** rng.uniform(3, 4)
        steps = duration * table.steps_per_s(jt, sf, "V100")
        slo = 2 * duration if rng.random() < 0.2 else None
        jobs.append(hetero.HeteroJob(str(i), jt, sf, 1.0, steps, rng.uniform(0, 86400), 0.0, slo))
    return jobs


def run(name: str, jobs, cluster, table, pair_gain):
    if name.endswith("_packed"):
        return getattr(hetero, name)(jobs, cluster, table, min_pair_gain=pair_gain)
    if name in ("fifo", "gandiva"):
        return getattr(hetero, name)(jobs, cluster, table, rng=random.Random(0))
    return getattr(hetero, name)(jobs, cluster, table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--policies", nargs="+", default=POLICIES)
    ap.add_argument("--pair-gain", type=float, default=None)
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = ap.parse_args()
    rows: dict[str, dict[int, float]] = {}
    table = load_throughputs("gavel")
    import scipy.optimize  # noqa: F401  (loaded lazily by the policies: not timed)
    for n in args.jobs:
        cluster = {"K80": n // 4, "P100": n // 4, "V100": n // 4}
        for name in args.policies:
            times = []
            for trial in range(args.trials):
                jobs = make_jobs(n, trial + 2, table, single_gpu=(name == "allox"))
                t0 = time.perf_counter()
                run(name, jobs, cluster, table, args.pair_gain)
                times.append(time.perf_counter() - t0)
            print(f"{name:40s} n={n:5d}  {statistics.mean(times):8.3f} s", flush=True)
            rows.setdefault(name, {})[n] = statistics.mean(times)
    if args.no_write:
        return
    from results import measured, update_results
    cmd = "python benchmarks/bench_hetero.py --jobs " + " ".join(map(str, args.jobs)) + \
        ("" if args.policies == POLICIES else " --policies " + " ".join(args.policies)) + \
        ("" if args.pair_gain is None else f" --pair-gain {args.pair_gain:g}")
    lines = ["## Gavel's policies: one solve on n active jobs over 3 GPU types (`benchmarks/bench_hetero.py`)", "",
             measured(cmd) + ", Gavel's table and job mix, n/4 GPUs of each of K80, P100, V100; seconds per call.", "",
             "| policy | " + " | ".join(f"n = {n:,}" for n in args.jobs) + " |",
             "| --- | " + " | ".join("---" for _ in args.jobs) + " |"]
    for name, by in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{by[n]:.3f}" if n in by else "-" for n in args.jobs) + " |")
    print("\n".join(lines[4:]))
    print(f"updated {update_results('hetero', lines)}")


if __name__ == "__main__":
    main()
