"""Policies on the contended per-VC Philly replay against a floor measured in the same run;
writes the "tenancy" block of benchmarks/RESULTS.md.

    python benchmarks/bench_tenancy.py [--queues philly-isolated] [--policies fifo,tiresias]
                                       [--limit N] [--limit-s 900] [--no-write]

The floor is a bare loop with no framework: a heap of arrivals and finishes and numpy arrays of
the same jobs' submit times, durations, GPUs and queues, FIFO within each queue, a job starting
when its queue stays within nominal + borrowing limit and the cluster's quotas in all (Kueue's
invariant on a flat tree without lending limits) and its GPUs are free (GPUs counted, no
placement). Each policy runs `dlsched.simulate` with the same queue file (mode kueue) in a
fresh subprocess, after an untimed warm-up that compiles (or loads from numba's cache) the compiled
loop (sim/fastloop.py); the table says which loop ran each replay. Goal (issue "Many tenants"):
every policy within 15x of the floor.
"""
from __future__ import annotations

import argparse
import heapq
import json
import subprocess
import sys
import time
from collections import deque

import numpy as np

from results import measured, update_results

CHILD = r"""
import json, sys, time
import dlsched
from dlsched.sim import fastloop
from dlsched.workload.io import load_workload
ran = []                                  # whether the compiled loop ran the replay (sim/fastloop.py)
_run = fastloop.run
fastloop.run = lambda *a, **k: ran.append(_run(*a, **k)) or ran[-1]
jobs = sorted(load_workload("philly"), key=lambda j: j.submit_time_s)
n = int(sys.argv[3])
jobs = jobs[:n] if n > 0 else jobs
t = time.perf_counter()
res = dlsched.simulate("philly", jobs, sys.argv[1], queues=sys.argv[2], record_rates=False)
print(json.dumps({"jobs": len(jobs), "sim_s": time.perf_counter() - t, "mean_wait_s": res.summary["mean_wait_s"],
                  "compiled": any(ran)}))
"""


def floor(jobs, tree, capacity: float) -> tuple[float, float]:
    """(seconds, mean wait) of the bare FIFO loop with quotas over `jobs`."""
    leaves = sorted(tree.leaves)
    index = {q: i for i, q in enumerate(leaves)}
    nominal = np.array([tree.nodes[q].quotas["gpu"].nominal if "gpu" in tree.nodes[q].quotas else 0.0
                        for q in leaves])
    bl = np.array([(tree.nodes[q].quotas["gpu"].borrowing_limit if "gpu" in tree.nodes[q].quotas else None)
                   for q in leaves], dtype=object)
    cap_q = nominal + np.array([np.inf if b is None else b for b in bl], dtype=float)
    total = float(nominal.sum())
    t0 = time.perf_counter()
    submit = np.array([j.submit_time_s for j in jobs])
    dur = np.array([j.duration_s for j in jobs])
    gpus = np.array([sum(t.demand[0] for t in j.tasks) for j in jobs])
    vc = np.array([index.get(j.queue or "default", 0) for j in jobs])
    used = np.zeros(len(leaves))
    free = capacity
    start = np.full(len(jobs), np.nan)
    lanes = [deque() for _ in leaves]
    heap = [(float(s), 0, i) for i, s in enumerate(submit)]
    heapq.heapify(heap)
    while heap:
        now, kind, i = heapq.heappop(heap)
        if kind == 0:
            lanes[vc[i]].append(i)
        else:
            used[vc[i]] -= gpus[i]
            free += gpus[i]
        for q, lane in enumerate(lanes):
            while lane:
                j = lane[0]
                g = gpus[j]
                if used[q] + g > cap_q[q] or used.sum() + g > total or g > free:
                    break
                lane.popleft()
                used[q] += g
                free -= g
                start[j] = now
                heapq.heappush(heap, (now + dur[j], 1, j))
    return time.perf_counter() - t0, float(np.nanmean(start - submit))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queues", default="philly-isolated")
    ap.add_argument("--policies", default="fifo,tiresias")
    ap.add_argument("--limit", type=int, default=0, help="the first N jobs only (0: the whole trace)")
    ap.add_argument("--limit-s", type=float, default=900.0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    from dlsched.cluster import load_cluster
    from dlsched.tenancy import load_queues
    from dlsched.workload.io import load_workload
    jobs = sorted(load_workload("philly"), key=lambda j: j.submit_time_s)
    jobs = jobs[:args.limit] if args.limit > 0 else jobs
    tree = load_queues(args.queues)
    floor_s, floor_wait = floor(jobs, tree, float(load_cluster("philly").total_gpus))
    print(f"floor: {len(jobs):,} jobs in {floor_s:.2f} s (mean wait {floor_wait:,.0f} s)", flush=True)
    warm = subprocess.run([sys.executable, "-c", "from dlsched.sim import fastloop; print(fastloop.warm())"],
                          capture_output=True, text=True, check=True)
    warm_s = float(warm.stdout.split()[-1])
    print(f"warm-up (compile or load the compiled loop, untimed): {warm_s:.2f} s", flush=True)
    rows = []
    for p in [x for x in args.policies.split(",") if x]:
        try:
            out = subprocess.run([sys.executable, "-c", CHILD, p, args.queues, str(args.limit)], capture_output=True,
                                 text=True, timeout=args.limit_s, check=True)
            d = json.loads(out.stdout.strip().splitlines()[-1])
        except subprocess.TimeoutExpired:
            d = {"sim_s": None}
        rows.append((p, d))
        print(f"{p}: " + ("stopped" if d["sim_s"] is None else f"{d['sim_s']:.1f} s, {d['sim_s'] / floor_s:.0f}x the floor"),
              flush=True)
    table = ["| policy | simulate (s) | x the floor | mean wait (s) | loop |", "| --- | --- | --- | --- | --- |",
             f"| floor (bare FIFO loop) | {floor_s:.2f} | 1x | {floor_wait:,.0f} | |"]
    for p, d in rows:
        table.append(f"| {p} | > {args.limit_s:.0f} (stopped) | - | - | |" if d["sim_s"] is None else
                     f"| {p} | {d['sim_s']:.1f} | {d['sim_s'] / floor_s:.0f}x | {d['mean_wait_s']:,.0f} | "
                     + ("compiled" if d["compiled"] else "Python") + " |")
    met = [p for p, d in rows if d["sim_s"] is not None and d["sim_s"] <= 15 * floor_s]
    unmet = [p for p, _ in rows if p not in met]
    verdict = (f"Met by {len(met)} of {len(rows)} policies" + (": " + ", ".join(unmet) + (" is" if len(unmet) == 1 else " are")
                                                               + " not within 15x." if unmet else "."))
    print("\n".join(table))
    if args.no_write:
        return
    cmd = (f"python benchmarks/bench_tenancy.py --queues {args.queues} --policies {args.policies}"
           + (f" --limit {args.limit}" if args.limit else ""))
    lines = ["## Policies on the per-VC Philly replay against a bare loop (`benchmarks/bench_tenancy.py`)", "",
             measured(cmd) + f", {len(jobs):,} jobs, queues `{args.queues}` (mode kueue). Goal: every policy "
             f"within 15x of the floor. {verdict} The compiled loop's warm-up (numba: compiled at the first "
             f"run after an install, then loaded from its cache) took {warm_s:.2f} s, untimed.", "", *table]
    print(f"updated {update_results('tenancy', lines)}")


if __name__ == "__main__":
    main()
