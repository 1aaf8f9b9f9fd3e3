"""Pollux's own policy on Pollux's workloads: time per workload, end to end.

    python benchmarks/bench_pollux.py [--workloads 1 2 ... 8] [--jobs N] [--no-write]

Goal (issue "Pollux", Speed): one workload at 1.0x job load in <= 60 s on the 2-core
development machine (Pollux's own simulator takes up to 30 minutes per workload). Each workload
runs in a fresh process (import, load, simulate) with the settings of `dlsched experiment
pollux-fidelity` (dlsched.experiments.pollux_fidelity.POLLUX_CONFIG: Pollux's NSGA-II search at
population 32 x 20 generations, 60 s rounds, 30 s (re)start cost), seed 0. `--jobs N` runs the
first N jobs of each workload only (the smoke test's size).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from results import measured, update_results

CHILD = r"""
import json, sys, time
t0 = time.perf_counter(); c0 = time.process_time()
from dlsched.api import simulate
from dlsched.experiments.pollux_fidelity import POLLUX_CONFIG, RESTART_DELAY_S, START_DELAY_S
from dlsched.workload.io import load_workload
jobs = load_workload(f"pollux-{sys.argv[1]}")
n = int(sys.argv[2])
jobs = jobs[:n] if n > 0 else jobs
res = simulate("pollux", jobs, "pollux", seed=0, start_delay_s=START_DELAY_S, restart_delay_s=RESTART_DELAY_S,
               policy_config=POLLUX_CONFIG, record_rates=False)
print(json.dumps({"jobs": len(jobs), "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                  "rounds": len(res.rounds) if res.rounds is not None else 0,
                  "mean_jct_s": res.summary["mean_jct_s"]}))
"""


def case(workload: int, jobs: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(workload), str(jobs)], check=True,
                         capture_output=True, text=True)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d["workload"] = workload
    return d


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", type=int, nargs="+", default=list(range(1, 9)), choices=range(1, 9))
    ap.add_argument("--jobs", type=int, default=0, help="the first N jobs of each workload (0: all)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    t = time.perf_counter()
    rows = []
    for w in a.workloads:
        d = case(w, a.jobs)
        rows.append(d)
        print(f"pollux-{w}: {d['jobs']} jobs, {d['rounds']} rounds, wall {d['wall_s']:.1f} s, "
              f"CPU {d['cpu_s']:.1f} s, mean JCT {d['mean_jct_s']:,.0f} s", flush=True)
    print(f"all: {time.perf_counter() - t:.1f} s")
    if a.no_write:
        return
    args = " ".join(["--workloads", *map(str, a.workloads)] + (["--jobs", str(a.jobs)] if a.jobs else []))
    lines = ["## Pollux's policy on Pollux's workloads (`benchmarks/bench_pollux.py`)", "",
             "Goal: one workload at 1.0x in <= 60 s on the 2-core machine (Pollux's simulator: up to 30 min).", "",
             measured(f"python benchmarks/bench_pollux.py {args}") + ": each workload in a fresh process "
             "(import + load + simulate), the pollux-fidelity settings (NSGA-II search 32 x 20), seed 0.", "",
             "| workload | jobs | rounds | wall (s) | CPU (s) | mean JCT (s) |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| pollux-{d['workload']} | {d['jobs']} | {d['rounds']} | {d['wall_s']:.1f} | {d['cpu_s']:.1f} | "
              f"{d['mean_jct_s']:,.0f} |" for d in rows]
    print(f"updated {update_results('pollux', lines)}")


if __name__ == "__main__":
    main()
