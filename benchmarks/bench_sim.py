"""Simulator speed benchmark: FIFO on the whole Philly trace (82,247 jobs, `philly` preset) and on
Pollux workload-6 (`pollux` preset). Each case runs in a fresh subprocess so that its peak RSS is
its own; results are written to benchmarks/RESULTS.md (the table between the BENCH markers).

    python benchmarks/bench_sim.py [--policy fifo] [--cases philly,pollux] [--no-write]

The inputs are bundled with the package (`philly`: the whole Philly per-job trace; `pollux-6`),
so it runs on any clone.

Goal (issue "The simulation core"): Philly in <= 60 s on a 2-core machine with RSS <= 2 GB;
later <= 20 s for every non-optimising policy. The fastest peer simulator does about 385 jobs/s.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from results import measured, update_results

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from dlsched.workload.io import load_workload
import dlsched
jobs = load_workload(sys.argv[1])
t1 = time.perf_counter()
res = dlsched.simulate(sys.argv[2], jobs, sys.argv[3], record_rates=False)
t2 = time.perf_counter()
print(json.dumps({"jobs": len(jobs), "load_s": t1 - t0, "sim_s": t2 - t1,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "finished": res.summary["finished"], "mean_jct_s": res.summary["mean_jct_s"],
                  "sched_time_s": res.summary["sched_time_s"]}))
"""


CASES = {"philly": ("Philly (whole trace)", "philly", "philly"), "pollux": ("Pollux workload-6", "pollux-6", "pollux")}


def run_case(workload: str, cluster: str, policy: str) -> dict:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, str(workload), cluster, policy],
                         check=True, capture_output=True, text=True)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d["wall_s"] = time.perf_counter() - t
    d["jobs_per_s"] = d["jobs"] / d["sim_s"]
    return d


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    keys = [c for c in args.cases.split(",") if c]
    bad = [c for c in keys if c not in CASES]
    if bad or not keys:
        ap.error(f"--cases: give some of {', '.join(CASES)}")
    cases = [CASES[c] for c in keys]
    # The FIFO family's compiled loop (dlsched/sim/fastloop.py) compiles at its first use after an
    # install (about 4 s, once: numba caches it on disk) or loads from the cache: warmed up in a
    # process of its own, untimed, and reported.
    warm = subprocess.run([sys.executable, "-c", "from dlsched.sim import fastloop; print(fastloop.warm())"],
                          check=True, capture_output=True, text=True)
    warm_s = float(warm.stdout.strip().splitlines()[-1])
    print(f"warm-up (compile or load the compiled FIFO loop): {warm_s:.2f} s")
    rows = []
    for name, path, cluster in cases:
        d = run_case(path, cluster, args.policy)
        rows.append((name, cluster, d))
        print(f"{name}: {d['jobs']} jobs, simulate {d['sim_s']:.2f} s ({d['jobs_per_s']:,.0f} jobs/s), "
              f"load {d['load_s']:.2f} s, wall {d['wall_s']:.2f} s, peak RSS {d['rss_mb']:.0f} MB")
    if args.no_write:
        return
    table = ["| case | policy | cluster | jobs | simulate (s) | jobs/s | load (s) | process wall (s) | peak RSS (MB) | mean JCT (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, cluster, d in rows:
        table.append(f"| {name} | {args.policy} | {cluster} | {d['jobs']:,} | {d['sim_s']:.2f} | {d['jobs_per_s']:,.0f} | "
                     f"{d['load_s']:.2f} | {d['wall_s']:.2f} | {d['rss_mb']:.0f} | {d['mean_jct_s']:,.1f} |")
    stamp = measured(f"python benchmarks/bench_sim.py --policy {args.policy}"
                     + (f" --cases {','.join(keys)}" if keys != list(CASES) else "")) + "."
    note = ["", "The FIFO family (fifo, fifo-gang, fifo-backfill) runs a trace of 5,000 jobs or more whose speed does",
            "not depend on placement in one compiled call (src/dlsched/sim/fastloop.py), with the same records",
            "as the Python loop (tests/unit/test_fastloop.py). The first run after an install compiles it",
            f"(numba, cached on disk): warmed up untimed, {warm_s:.2f} s this time. Before it (2026-11-25):",
            "Philly 9.37 s of process wall, 8.14 s of simulate."]
    res_file = update_results(args.policy, [stamp, "", *table, *(note if args.policy.startswith("fifo") else [])])
    print(f"updated {res_file}")


if __name__ == "__main__":
    main()
