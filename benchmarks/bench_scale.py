"""How simulation cost grows with the number of jobs and with how many run at once: FIFO on
Poisson workloads (`poisson:jobs=N,rate=R`, Philly-like sizes and durations) at low concurrency
(rate 0.005 on `v100-150`: about 300 jobs at once) and high (rate 0.05 on `v100-1500`: about
3,000), for 10k and 100k jobs (and 1M with --million). Each case runs in a fresh subprocess so
that its peak RSS is its own; the table goes into benchmarks/RESULTS.md ("scale").

    python benchmarks/bench_scale.py [--jobs 10000,100000] [--million] [--no-write]

Goal (issue "Scale"): 1M jobs at rate 0.05 on 1,500 nodes in <= 300 s with RSS <= 3 GB, and jobs/s
at 300 and at 3,000 concurrent jobs within 2x of each other.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from results import measured, update_results

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import dlsched
from dlsched.workload.io import load_workload
jobs = load_workload(sys.argv[1])
t1, c1 = time.perf_counter(), time.process_time()
res = dlsched.simulate(sys.argv[2], jobs, "fifo", record_rates=False)
t2, c2 = time.perf_counter(), time.process_time()
j = res.jobs
run = (j["finish_s"] - j["first_start_s"]).clip(lower=0).sum()
print(json.dumps({"jobs": len(jobs), "load_s": t1 - t0, "sim_s": t2 - t1, "cpu_s": c2 - c1,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "finished": int(res.summary["finished"]),
                  "concurrency": float(run / max(res.summary["makespan_s"], 1e-9))}))
"""

GOAL = ("Goals (issue \"Scale\"): 1M jobs at rate 0.05 on `v100-1500` in <= 300 s with RSS <= 3 GB; jobs/s "
        "at about 300 and about 3,000 jobs at once within 2x. Before the region solve (docs/decisions/0028) "
        "20,000 jobs at rate 0.05 on 1,500 nodes ran at under 50 jobs/s.")

CASES = {"low": ("0.005", "v100-150"), "high": ("0.05", "v100-1500")}


def run_case(jobs: int, level: str) -> dict:
    rate, cluster = CASES[level]
    workload = f"poisson:jobs={jobs},rate={rate}"
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, workload, cluster],
                         check=True, capture_output=True, text=True)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d.update(wall_s=time.perf_counter() - t, jobs_per_s=d["jobs"] / d["sim_s"],
             jobs_per_cpu_s=d["jobs"] / d["cpu_s"], workload=workload,
             cluster=cluster, level=level)
    return d


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", default="10000,100000", help="comma-separated job counts")
    ap.add_argument("--million", action="store_true", help="add the 1M-job high-concurrency case")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    sizes = [int(x) for x in args.jobs.split(",") if x]
    plan = [(n, level) for n in sizes for level in ("low", "high")]
    if args.million:
        plan.append((1_000_000, "high"))
    rows = []
    for n, level in plan:
        d = run_case(n, level)
        rows.append(d)
        print(f"{d['workload']} on {d['cluster']}: {d['sim_s']:.1f} s ({d['cpu_s']:.1f} s CPU), "
              f"{d['jobs_per_s']:,.0f} jobs/s ({d['jobs_per_cpu_s']:,.0f} per CPU-second), "
              f"about {d['concurrency']:,.0f} at once, RSS {d['rss_mb']:,.0f} MB", flush=True)
    table = ["| workload | cluster | jobs at once (mean) | jobs | simulate (s) | jobs/s | simulate CPU (s) | jobs/CPU-s "
             "| process wall (s) | peak RSS (MiB) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for d in rows:
        table.append(f"| `{d['workload']}` | {d['cluster']} | {d['concurrency']:,.0f} | {d['jobs']:,} | "
                     f"{d['sim_s']:.1f} | {d['jobs_per_s']:,.0f} | {d['cpu_s']:.1f} | {d['jobs_per_cpu_s']:,.0f} | "
                     f"{d['wall_s']:.1f} | {d['rss_mb']:,.1f} |")
    growth, goals = [], []
    for n in sizes:
        lo = next((d for d in rows if d["jobs"] == n and d["level"] == "low"), None)
        hi = next((d for d in rows if d["jobs"] == n and d["level"] == "high"), None)
        if lo and hi:
            x = lo["jobs_per_s"] / hi["jobs_per_s"]
            growth.append(f"{n:,} jobs: low / high concurrency jobs/s = {x:.2f}x "
                          f"(per CPU-second: {lo['jobs_per_cpu_s'] / hi['jobs_per_cpu_s']:.2f}x)")
            goals.append(f"spread at {n:,} jobs (about {lo['concurrency']:,.0f} against {hi['concurrency']:,.0f} at once): "
                         f"{x:.3f}x, goal < 2x: {'met' if x < 2 else 'not met'}")
    big = next((d for d in rows if d["jobs"] == 1_000_000), None)
    if big is not None:
        rss_b = big["rss_mb"] * 1024 * 1024
        goals.append(f"1M jobs: simulate {big['sim_s']:.1f} s, goal <= 300 s: {'met' if big['sim_s'] <= 300 else 'not met'}")
        goals.append(f"1M jobs: peak RSS {big['rss_mb']:,.1f} MiB = {rss_b / 1e9:.4f} x 10^9 bytes, goal <= 3 GB "
                     f"(10^9 bytes): {'met' if rss_b <= 3e9 else 'not met'}")
    for line in growth + goals:
        print(line)
    if args.no_write:
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    stamp = (measured(f"python benchmarks/bench_scale.py{' --jobs ' + args.jobs if args.jobs != '10000,100000' else ''}"
                      f"{' --million' if args.million else ''}") + f" (fifo); load average {load:.1f} at the end. Simulate CPU is "
             f"the process's user + system time in `simulate`: on a shared machine it is the steadier figure.")
    res_file = update_results("scale", ["## Cost growth with jobs and concurrency (`benchmarks/bench_scale.py`)", "",
                                        GOAL, "", stamp, "", *table, "", *(f"- {g}" for g in growth), "",
                                        "Against the goals (computed from the rows above; RSS is the kernel's peak in KiB / 1024, so MiB):",
                                        *(f"- {g}" for g in goals)])
    print(f"updated {res_file}")


if __name__ == "__main__":
    main()
