"""Every registered policy on the whole Philly trace (82,247 jobs, `philly` preset), each in a fresh
subprocess with a time limit; writes the "policies" block of benchmarks/RESULTS.md.

    python benchmarks/bench_policies.py [--limit-s 150] [--policies a,b] [--workload philly --cluster philly]
                                        [--seed 0] [--no-write]
    python benchmarks/bench_policies.py --deep      # the deep queue: 5,000 Poisson jobs on 16 x 8 V100
    python benchmarks/bench_policies.py --deep --jobs 2000 --queues 8 [--tenancy kueue]
                                                    # the same under 8 queues of 16 GPUs (queue = user)

Goal (issue "Scale"): every policy in <= 20 s of process wall time, fifo in <= 5 s. With --deep
(issue "Scale on a real network and under deep queues": `poisson:jobs=5000,rate=0.01`, seed 1,
on `v100-16`, a mean wait of hundreds of hours): every policy within 5x of fifo, tiresias <= 30 s;
block `deep-queue` of RESULTS.md. With --queues N the jobs go to N queues (one per user, of
equal nominal quota summing to the cluster) under --tenancy; block `deep-queue-tenancy`.
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
t0 = time.perf_counter()
import dlsched
from dlsched.workload.io import load_workload
jobs = load_workload(sys.argv[2], seed=int(sys.argv[4]))
ten = {}
if sys.argv[5]:                  # N:mode: N queues of equal nominal quota, one per user
    import dataclasses, os, tempfile
    from dlsched.cluster.topology import load_cluster
    n, mode = sys.argv[5].split(":")
    gpus = sum(nd.gpus for nd in load_cluster(sys.argv[3]).nodes) // int(n)
    q = os.path.join(tempfile.mkdtemp(), "queues.yaml")
    with open(q, "w") as f:
        f.write("queues:\n" + "".join(f"  - {{name: u{i}, quotas: {{gpu: {{nominal: {gpus}}}}}}}\n" for i in range(int(n))))
    jobs = [dataclasses.replace(j, queue=j.user) for j in jobs]
    ten = {"queues": q, "tenancy": mode}
t1 = time.perf_counter()
res = dlsched.simulate(sys.argv[3], jobs, sys.argv[1], record_rates=False, seed=int(sys.argv[4]), **ten)
t2 = time.perf_counter()
print(json.dumps({"jobs": len(jobs), "load_s": t1 - t0, "sim_s": t2 - t1, "finished": int(res.summary["finished"]),
                  "mean_jct_s": res.summary["mean_jct_s"]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit-s", type=float, default=150.0)
    ap.add_argument("--policies", default="")
    ap.add_argument("--workload", default="philly", help="a workload reference (default: the whole Philly trace)")
    ap.add_argument("--cluster", default="philly")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deep", action="store_true", help="the deep-queue case (see the module docstring)")
    ap.add_argument("--jobs", type=int, default=5000, help="with --deep: the jobs generated")
    ap.add_argument("--queues", type=int, default=0, help="with --deep: that many queues (queue = user)")
    ap.add_argument("--tenancy", default="kueue", help="with --queues: the tenancy mode")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.deep:
        args.workload, args.cluster, args.seed = f"poisson:jobs={args.jobs},rate=0.01", "v100-16", 1
        if args.queues:
            args.workload += f",users={args.queues}"
    elif args.queues:
        ap.error("--queues goes with --deep")
    ten = f"{args.queues}:{args.tenancy}" if args.queues else ""
    import dlsched.policies  # noqa: F401
    from dlsched.scheduler.framework import REGISTRY
    names = [p for p in args.policies.split(",") if p] or REGISTRY.names("profile")
    rows = []
    # the FIFO family's compiled loop compiles at its first use after an install: untimed here
    warm = subprocess.run([sys.executable, "-c", "from dlsched.sim import fastloop; print(fastloop.warm())"],
                          check=True, capture_output=True, text=True)
    print(f"warm-up (compile or load the compiled FIFO loop): {float(warm.stdout.split()[-1]):.2f} s")
    for p in names:
        t = time.perf_counter()
        try:
            out = subprocess.run([sys.executable, "-c", CHILD, p, args.workload, args.cluster, str(args.seed), ten], capture_output=True, text=True,
                                 timeout=args.limit_s, check=True)
            d = json.loads(out.stdout.strip().splitlines()[-1])
            d["wall_s"] = time.perf_counter() - t
        except subprocess.TimeoutExpired:
            d = {"wall_s": None}
        rows.append((p, d))
        w = "> %.0f s (stopped)" % args.limit_s if d["wall_s"] is None else f"{d['wall_s']:.1f} s"
        print(f"{p}: {w}", flush=True)
    table = ["| policy | process wall (s) | simulate (s) | jobs/s | mean JCT (s) |", "| --- | --- | --- | --- | --- |"]
    for p, d in sorted(rows, key=lambda r: (r[1]["wall_s"] is None, r[1]["wall_s"] or 0)):
        if d["wall_s"] is None:
            table.append(f"| {p} | > {args.limit_s:.0f} (stopped) | - | - | - |")
        else:
            table.append(f"| {p} | {d['wall_s']:.1f} | {d['sim_s']:.1f} | {d['jobs'] / d['sim_s']:,.0f} | "
                         f"{d['mean_jct_s']:,.0f} |")
    print("\n".join(table))
    if args.no_write:
        return
    whole = (args.workload, args.cluster) == ("philly", "philly")
    cmd = (f"python benchmarks/bench_policies.py --limit-s {args.limit_s:.0f}"
           + (f" --policies {args.policies}" if args.policies else "")
           + (" --deep" + (f" --jobs {args.jobs}" if args.jobs != 5000 else "")
              + (f" --queues {args.queues} --tenancy {args.tenancy}" if args.queues else "") if args.deep
              else "" if whole else f" --workload {args.workload} --cluster {args.cluster}"
              + (f" --seed {args.seed}" if args.seed else "")))
    if args.deep:
        fifo = dict(rows).get("fifo", {}).get("wall_s")
        slow = [p for p, d in rows if fifo and (d["wall_s"] is None or d["wall_s"] > 5 * fifo)]
        tir = dict(rows).get("tiresias", {}).get("wall_s")
        tir = "not run" if "tiresias" not in dict(rows) else "stopped: not met" if tir is None else \
            f"{tir:.1f} s: {'met' if tir <= 30 else 'not met'}"
        goal = (f"Goal: every policy within 5x of fifo ({'all are' if not slow else 'over: ' + ', '.join(slow)}), "
                f"tiresias <= 30 s ({tir}).")
        under = f" in {args.queues} queues under {args.tenancy} (queue = user)" if args.queues else ""
        lines = [f"## The deep queue: every policy on `{args.workload}` (seed 1) over `{args.cluster}`{under} "
                 "(`benchmarks/bench_policies.py --deep`)", "", measured(cmd) + ". " + goal, "", *table]
        print(f"updated {update_results('deep-queue-tenancy' if args.queues else 'deep-queue', lines)}")
        return
    lines = ["## Every policy on the whole Philly trace (`benchmarks/bench_policies.py`)" if whole else
             f"## Policies on `{args.workload}` over `{args.cluster}` (`benchmarks/bench_policies.py`)", "",
             measured(cmd) + ". Goal: every policy <= 20 s of process wall time, fifo <= 5 s.", "", *table]
    print(f"updated {update_results('policies', lines)}")


if __name__ == "__main__":
    main()
