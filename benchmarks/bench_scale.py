"""How simulation cost grows with the number of jobs and with how many run at once: FIFO on
Poisson workloads (`poisson:jobs=N,rate=R`, Philly-like sizes and durations) at low concurrency
(rate 0.005 on `v100-150`: about 300 jobs at once) and high (rate 0.05 on `v100-1500`: about
3,000), for 10k and 100k jobs (and 1M with --million), on two networks: the presets' non-blocking
fabric (rack uplinks of 32 x 100 Gbps) and the same clusters with rack uplinks oversubscribed
k:1 (3,200 / k Gbps; `--networks`, default 1:1 and 8:1; 2:1 and 4:1 on request), where every
start and finish re-shares the uplinks it crosses (issue "Scale on a real network and under deep
queues"). Each case runs in a fresh subprocess so that its peak RSS is its own, and is stopped
after --case-timeout seconds (reported as such); the table goes into benchmarks/RESULTS.md
("scale").

    python benchmarks/bench_scale.py [--jobs 10000,100000] [--million] [--networks 1,2,4,8]
                                     [--case-timeout S] [--no-write]

Goals (issue "Scale"): 1M jobs at rate 0.05 on 1,500 nodes in <= 300 s with RSS <= 3 GB, and jobs/s
at 300 and at 3,000 concurrent jobs within 2x of each other. Oversubscribed 8:1 (issue "Scale on a
real network"): 100k jobs in <= 60 s and <= 1.5 GB, 1M in <= 600 s and <= 3 GB.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
        "20,000 jobs at rate 0.05 on 1,500 nodes ran at under 50 jobs/s. Oversubscribed rack uplinks (issue "
        "\"Scale on a real network and under deep queues\"; `uplinks k:1` = 3,200 / k Gbps a rack): 100k jobs "
        "at 8:1 in <= 60 s and <= 1.5 GB, 1M in <= 600 s and <= 3 GB, the same 2x spread.")

CASES = {"low": ("0.005", "v100-150"), "high": ("0.05", "v100-1500")}


def cluster_file(preset: str, k: int, folder: Path) -> str:
    """The preset `v100-N` with its rack uplinks oversubscribed k:1, as a cluster file (k = 1:
    the preset itself)."""
    if k == 1:
        return preset
    from dlsched.cluster.topology import preset_spec
    import yaml
    spec = preset_spec(preset)
    spec["name"] = f"{preset}-os{k}"
    spec["rack_uplink_gbps"] = spec["rack_uplink_gbps"] / k
    path = folder / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return str(path)


def run_case(jobs: int, level: str, k: int, folder: Path, timeout: float) -> dict:
    rate, preset = CASES[level]
    workload = f"poisson:jobs={jobs},rate={rate}"
    cluster = cluster_file(preset, k, folder)
    base = dict(workload=workload, cluster=preset if k == 1 else f"{preset}, uplinks {k}:1",
                level=level, k=k, jobs=jobs)
    t = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, workload, cluster],
                             check=True, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**base, "stopped": timeout}
    except subprocess.CalledProcessError as e:
        sys.exit(f"{workload} on {base['cluster']} failed:\n{e.stderr[-3000:]}")
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d.update(base, wall_s=time.perf_counter() - t, jobs_per_s=d["jobs"] / d["sim_s"],
             jobs_per_cpu_s=d["jobs"] / d["cpu_s"])
    return d


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", default="10000,100000", help="comma-separated job counts")
    ap.add_argument("--million", action="store_true", help="add the 1M-job high-concurrency cases")
    ap.add_argument("--networks", default="1,8",
                    help="comma-separated oversubscription ratios k of the rack uplinks (1: non-blocking)")
    ap.add_argument("--case-timeout", type=float, default=1800.0, help="seconds before a case is stopped")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    sizes = [int(x) for x in args.jobs.split(",") if x]
    nets = [int(x) for x in args.networks.split(",") if x]
    if any(k < 1 for k in nets):
        ap.error("--networks: each ratio must be an integer >= 1")
    plan = [(n, level, k) for k in nets for n in sizes for level in ("low", "high")]
    if args.million:
        plan += [(1_000_000, "high", k) for k in nets]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, level, k in plan:
            d = run_case(n, level, k, Path(tmp), args.case_timeout)
            rows.append(d)
            if "stopped" in d:
                print(f"{d['workload']} on {d['cluster']}: stopped after {d['stopped']:.0f} s", flush=True)
                continue
            print(f"{d['workload']} on {d['cluster']}: {d['sim_s']:.1f} s ({d['cpu_s']:.1f} s CPU), "
                  f"{d['jobs_per_s']:,.0f} jobs/s ({d['jobs_per_cpu_s']:,.0f} per CPU-second), "
                  f"about {d['concurrency']:,.0f} at once, RSS {d['rss_mb']:,.0f} MB", flush=True)
    table = ["| workload | cluster | jobs at once (mean) | jobs | simulate (s) | jobs/s | simulate CPU (s) | jobs/CPU-s "
             "| process wall (s) | peak RSS (MiB) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for d in rows:
        if "stopped" in d:
            table.append(f"| `{d['workload']}` | {d['cluster']} | | {d['jobs']:,} | > {d['stopped']:.0f} (stopped) "
                         "| | | | | |")
            continue
        table.append(f"| `{d['workload']}` | {d['cluster']} | {d['concurrency']:,.0f} | {d['jobs']:,} | "
                     f"{d['sim_s']:.1f} | {d['jobs_per_s']:,.0f} | {d['cpu_s']:.1f} | {d['jobs_per_cpu_s']:,.0f} | "
                     f"{d['wall_s']:.1f} | {d['rss_mb']:,.1f} |")
    growth, goals = [], []
    done = [d for d in rows if "stopped" not in d]
    for k in nets:
        net = "non-blocking" if k == 1 else f"uplinks {k}:1"
        for n in sizes:
            lo = next((d for d in done if d["jobs"] == n and d["level"] == "low" and d["k"] == k), None)
            hi = next((d for d in done if d["jobs"] == n and d["level"] == "high" and d["k"] == k), None)
            if lo and hi:
                x = lo["jobs_per_s"] / hi["jobs_per_s"]
                growth.append(f"{net}, {n:,} jobs: low / high concurrency jobs/s = {x:.2f}x "
                              f"(per CPU-second: {lo['jobs_per_cpu_s'] / hi['jobs_per_cpu_s']:.2f}x)")
                goals.append(f"{net}: spread at {n:,} jobs (about {lo['concurrency']:,.0f} against "
                             f"{hi['concurrency']:,.0f} at once): {x:.3f}x, goal < 2x: {'met' if x < 2 else 'not met'}")
        limits = {100_000: (60, 1.5e9), 1_000_000: (600, 3e9)} if k == 8 else \
            {1_000_000: (300, 3e9)} if k == 1 else {}
        for n, (goal_s, goal_b) in limits.items():
            d = next((d for d in rows if d["jobs"] == n and d["level"] == "high" and d["k"] == k), None)
            if d is None:
                continue
            if "stopped" in d:
                goals.append(f"{net}, {n:,} jobs: stopped after {d['stopped']:.0f} s, goal <= {goal_s} s: not met")
                continue
            rss_b = d["rss_mb"] * 1024 * 1024
            goals.append(f"{net}, {n:,} jobs: simulate {d['sim_s']:.1f} s, goal <= {goal_s} s: "
                         f"{'met' if d['sim_s'] <= goal_s else 'not met'}")
            goals.append(f"{net}, {n:,} jobs: peak RSS {d['rss_mb']:,.1f} MiB = {rss_b / 1e9:.4f} x 10^9 bytes, "
                         f"goal <= {goal_b / 1e9:g} GB (10^9 bytes): {'met' if rss_b <= goal_b else 'not met'}")
    for line in growth + goals:
        print(line)
    if args.no_write:
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    stamp = (measured(f"python benchmarks/bench_scale.py{' --jobs ' + args.jobs if args.jobs != '10000,100000' else ''}"
                      f"{' --million' if args.million else ''}"
                      f"{' --networks ' + args.networks if args.networks != '1,8' else ''}") + f" (fifo); load average {load:.1f} at the end. Simulate CPU is "
             f"the process's user + system time in `simulate`: on a shared machine it is the steadier figure.")
    res_file = update_results("scale", ["## Cost growth with jobs and concurrency (`benchmarks/bench_scale.py`)", "",
                                        GOAL, "", stamp, "", *table, "", *(f"- {g}" for g in growth), "",
                                        "Against the goals (computed from the rows above; RSS is the kernel's peak in KiB / 1024, so MiB):",
                                        *(f"- {g}" for g in goals)])
    print(f"updated {res_file}")


if __name__ == "__main__":
    main()
