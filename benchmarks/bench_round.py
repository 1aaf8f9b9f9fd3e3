"""Scale benchmark of one scheduling round: place 100,000 tasks on 5,000 nodes with one policy.

    python benchmarks/bench_round.py [--policies tetris,k8s-binpack] [--tasks 100000] [--nodes 5000] [--no-write]

Reference (issue "Optimus, Tiresias and the Pollux fidelity check"): kube-scheduler places
150,000 pods on 5,000 nodes in 5 s. The round is timed alone (arrivals are handed to the
scheduler first); the workload is bags of tasks with mixed CPU / memory / GPU demands that fit
the cluster about 1.5 times over, so late tasks search a fuller cluster.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from results import measured, update_results

HERE = Path(__file__).resolve().parent


def build(nodes: int, tasks: int, seed: int = 0):
    from dlsched.cluster import cluster_from_dict
    from dlsched.workload.schema import job_from_row
    cl = cluster_from_dict({"name": f"bench-{nodes}", "node_groups": [
        {"count": nodes, "gpus": 8, "gpu_type": "V100", "gpu_mem_gb": 32, "cpus": 64, "mem_gb": 512,
         "nodes_per_rack": 40}]})
    rng = np.random.default_rng(seed)
    per_job = 10
    jobs = []
    for j in range(tasks // per_job):
        jobs.append(job_from_row(dict(
            job_id=f"j{j:06d}", submit_time_s=0.0, kind="tasks", workers=per_job,
            gpus_per_worker=float(rng.choice([0, 1], p=[0.6, 0.4])),
            cpus_per_worker=float(rng.integers(1, 9)), mem_gb_per_worker=float(rng.integers(4, 65)),
            duration_s=100.0)))
    return cl, jobs


def run(policy: str, nodes: int, tasks: int) -> dict:
    import dlsched.policies  # noqa: F401
    from dlsched.scheduler.core import Scheduler, build_profile
    from dlsched.scheduler.events import JobArrival
    from dlsched.sim.backend import SimBackend
    cl, jobs = build(nodes, tasks)
    backend = SimBackend(cl, [])
    sched = Scheduler(build_profile(policy), check_scores=False)
    for j in jobs:
        sched.handle(JobArrival(0.0, j), backend)
    t0 = time.perf_counter()
    plan = sched.round(backend.snapshot())
    dt = time.perf_counter() - t0
    placed = sum(len(d.placements) for d in plan.decisions)
    return {"policy": policy, "nodes": nodes, "tasks": tasks, "placed": placed, "round_s": dt,
            "tasks_per_s": placed / dt}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="tetris,k8s-binpack")
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=5_000)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    rows = []
    # The compiled placement (scheduler/fastplace.py) is compiled at its first use, or loaded
    # from numba's cache: a first small round pays for that, untimed, and is reported.
    t0 = time.perf_counter()
    for p in a.policies.split(","):
        run(p, 300, 300)
    print(f"warm-up (compile or load the compiled placement): {time.perf_counter() - t0:.2f} s")
    for p in a.policies.split(","):
        r = run(p, a.nodes, a.tasks)
        rows.append(r)
        print(f"{p}: {r['placed']:,} of {r['tasks']:,} tasks placed on {r['nodes']:,} nodes in "
              f"{r['round_s']:.2f} s ({r['tasks_per_s']:,.0f} tasks/s)")
    if a.no_write:
        return
    table = ["| policy | nodes | tasks asked | tasks placed | round (s) | tasks/s |", "| --- | --- | --- | --- | --- | --- |"]
    table += [f"| {r['policy']} | {r['nodes']:,} | {r['tasks']:,} | {r['placed']:,} | {r['round_s']:.2f} | "
              f"{r['tasks_per_s']:,.0f} |" for r in rows]
    stamp = measured(f"python benchmarks/bench_round.py --tasks {a.tasks} --nodes {a.nodes}") + "."
    note = ["", "The workload asks about 1.5x what the cluster holds, so every job that no longer fits is still",
            "tried. Both profiles (the fits filter with node-local scorers) run the compiled placement",
            "loop (src/dlsched/scheduler/fastplace.py, numba): one pass over the nodes per run of identical",
            "tasks, keeping its best L nodes, then one re-score per task; the same placements as the numpy",
            "path, bit for bit (tests/unit/test_fastplace.py). Before it (2026-11-21): tetris 13.4 s,",
            "k8s-binpack 8.6 s. The first use in a process compiles the loop (about 3 s) or loads it from",
            "numba's cache (under 1 s): the warm-up line, untimed in the table."]
    f = update_results("round", ["## One round at scale (`benchmarks/bench_round.py`)", "",
                                 "Reference: kube-scheduler places 150,000 pods on 5,000 nodes in 5 s.", "",
                                 stamp, "", *table, *note])
    print(f"updated {f}")


if __name__ == "__main__":
    main()
