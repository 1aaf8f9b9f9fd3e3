"""Optimus and Tiresias speed: one Optimus round at scale, and Pollux workload-6 end to end.

    python benchmarks/bench_optimus.py [--jobs 4000] [--nodes 16000] [--no-write]

Goals (issue "Optimus, Tiresias and the Pollux fidelity check"):
- one Optimus allocation and placement round for 4,000 jobs / 100,000 tasks on 16,000 nodes:
  the seed reports 5 s, our goal is <= 1 s on this machine;
- Pollux workload-6 end to end (load + simulate, in a fresh process) with Tiresias <= 1 s (the
  peer takes 26 s here) and Optimus <= 3 s (the peer takes 209 s).

The round: 4,000 parameter-server jobs (resnet50 / resnet101 / inception3, global batch 16384 or
32768, 1-GPU workers with 4 CPUs, 4-CPU parameter servers) all waiting on an empty cluster of
16,000 nodes x 8 GPUs; each job is capped at 24 workers, so the allocation lands near 100,000
tasks. Timed: `Scheduler.round` (the Optimus allocation and the placement of every task) alone,
with the oracle speed estimates (the speed model on a packed placement, computed once per job
shape).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from results import measured, update_results

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import dlsched
from dlsched.workload.io import load_workload
jobs = load_workload("pollux-6")
t1 = time.perf_counter()
res = dlsched.simulate("pollux", jobs, sys.argv[1], start_delay_s=30.0, record_rates=False)
t2 = time.perf_counter()
print(json.dumps({"import_load_s": t1 - t0, "sim_s": t2 - t1, "mean_jct_s": res.summary["mean_jct_s"],
                  "rounds": len(res.rounds) if res.rounds is not None else 0}))
"""


def round_case(jobs: int, nodes: int, speed: str) -> dict:
    import dlsched.policies  # noqa: F401
    from dlsched.cluster import cluster_from_dict
    from dlsched.scheduler.core import Scheduler, build_profile
    from dlsched.scheduler.events import JobArrival
    from dlsched.sim.backend import SimBackend
    from dlsched.workload.schema import job_from_row
    cl = cluster_from_dict({"name": f"bench-{nodes}", "node_groups": [
        {"count": nodes, "gpus": 8, "gpu_type": "V100", "gpu_mem_gb": 32, "cpus": 64, "mem_gb": 512,
         "nodes_per_rack": 40}]})
    rng = np.random.default_rng(0)
    specs = [job_from_row(dict(job_id=f"j{j:05d}", submit_time_s=0.0, workers=4, ps=2, comm="ps",
                               model=str(rng.choice(["resnet50", "resnet101", "inception3"])),
                               batch_size=int(rng.choice([16384, 32768])),
                               iterations=float(rng.integers(1_000, 100_000)),
                               cpus_per_worker=4.0, ps_cpus=4.0))
             for j in range(jobs)]
    backend = SimBackend(cl, [])
    prof = build_profile("optimus", {"params": {"optimus": {"speed": speed, "max_workers": 24}}})
    sched = Scheduler(prof, check_scores=False)
    for s in specs:
        sched.handle(JobArrival(0.0, s), backend)
    sched._stats = backend.job_stats
    t0 = time.perf_counter()
    plan = sched.round(backend.snapshot())
    dt = time.perf_counter() - t0
    placed = sum(len(d.placements) for d in plan.decisions)
    return {"jobs": jobs, "nodes": nodes, "speed": speed, "tasks": placed, "round_s": dt,
            "jobs_started": len(plan.decisions)}


def e2e_case(policy: str) -> dict:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, policy], check=True, capture_output=True, text=True)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d["wall_s"] = time.perf_counter() - t
    d["policy"] = policy
    return d


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--nodes", type=int, default=16000)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    r = round_case(a.jobs, a.nodes, "oracle")
    print(f"optimus round: {r['jobs']:,} jobs, {r['tasks']:,} tasks placed on {r['nodes']:,} nodes "
          f"in {r['round_s']:.2f} s")
    e2e = [e2e_case(p) for p in ("tiresias", "optimus")]
    for d in e2e:
        print(f"pollux-6 {d['policy']}: import + load {d['import_load_s']:.2f} s, simulate {d['sim_s']:.2f} s, "
              f"process wall {d['wall_s']:.2f} s, mean JCT {d['mean_jct_s']:,.0f} s")
    if a.no_write:
        return
    stamp = measured(f"python benchmarks/bench_optimus.py --jobs {a.jobs} --nodes {a.nodes}") + "."
    lines = ["## Optimus and Tiresias (`benchmarks/bench_optimus.py`)", "",
             "Goals: one Optimus round for 4,000 jobs / 100,000 tasks on 16,000 nodes <= 1 s (seed 001: 5 s);",
             "Pollux workload-6 end to end with Tiresias <= 1 s (peer: 26 s) and Optimus <= 3 s (peer: 209 s).",
             "", stamp, "",
             "| case | jobs | nodes | tasks placed | round (s) |", "| --- | --- | --- | --- | --- |",
             f"| Optimus round (speed: {r['speed']}) | {r['jobs']:,} | {r['nodes']:,} | {r['tasks']:,} | {r['round_s']:.2f} |",
             "",
             "| Pollux workload-6 | import + load (s) | simulate (s) | process wall (s) | mean JCT (s) |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {d['policy']} | {d['import_load_s']:.2f} | {d['sim_s']:.2f} | {d['wall_s']:.2f} | {d['mean_jct_s']:,.0f} |"
              for d in e2e]
    lines += ["",
              "Where the round's time goes (profile): about 35 % in the marginal-gain loop (a heap of",
              "~100,000 increments in Python; each entry carries the time after its step, so a job's",
              "gains cost one lookup of the shape's iteration time per step), the rest in placement (a",
              "bucket of nodes per free-GPU count, block reservations whose GPU fractions are summed in",
              "Python floats and written once per node, 100,000 TaskPlacement objects; task lists shared",
              "per shape). From 1.95 s to about 0.9 s on 2026-11-23, with the same allocations and",
              "placements (tests/golden, tests/unit/test_optimus*.py). The process wall time includes",
              "Python, numpy, pandas and scipy imports (about 0.4 s) that no simulator run can avoid."]
    f = update_results("optimus", lines)
    print(f"updated {f}")


if __name__ == "__main__":
    main()
