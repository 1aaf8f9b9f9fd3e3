"""seed000-deadlines: seed 000's Figure 3 on the real runtime, the share of jobs that finish
before their deadline as the number of jobs grows, under fifo and gandiva, and whether an
earliest-deadline-first order (`edf`) lifts the curve.

Seed 000 gave each job a deadline equal to its non-distributed training time (one machine, no
parameter server): distributed training was to beat it. As the workload grew, fewer jobs did
(Figure 3; the text gives the trend, not the numbers).

Here: an embedded Ray cluster of 4 nodes x 2 virtual GPUs, a real `dlsched server` per policy
and workload size, the program examples/timed_steps.py (real gloo all-reduce and checkpoints,
each step padded to a set time: STEP_S with one worker, shrinking with more by the `serial`
share and growing by `comm_s` per extra worker). N jobs (N in SIZES) are submitted half a second
apart, 2 workers and 20 to 40 steps each (seeded), every one with `deadline_s` = its
non-distributed training time, steps x STEP_S: alone, a job beats it by about a third (2 to 3.5
s, against about 1 s of starting and finishing). The first four fill the cluster; more queue. A
job meets its deadline when it finishes within that time of its submission (the store's submit
and finish times).

Checks: the share falls as N grows under fifo and under gandiva (the seed's shape), and edf's is
never below fifo's. Takes about 6 minutes.

Does edf lift the curve? Measured (2026-11-23, 2 cores): no. Under all three policies exactly
the first four jobs meet their deadlines (4 of 4, 8, 16 and 32 jobs: 100, 50, 25, 12.5 %). A
job's slack is a third of its non-distributed time (2 to 3.5 s here), and the first wave holds
the GPUs for 4 to 7.5 s, so every job that queues has missed its deadline before a GPU frees,
whatever the order. EDF then starts the hopeless job whose deadline came first. What would lift
it is an order that knows the run times and puts jobs that can no longer make it last (Moore and
Hodgson's rule, least laxity); on the runtime that needs a queued job's step time before it ever
ran, which dlsched does not have yet.
"""
from __future__ import annotations

import sys

import numpy as np

from dlsched.experiments.base import Check, Experiment, ExperimentResult, register_experiment, summarise

NODES, GPUS_PER_NODE, GPU_TYPE = 4, 2, "fake-gpu"
SIZES = (4, 8, 16, 32)
POLICIES = ("fifo", "gandiva", "edf")
STEP_S, SERIAL, COMM_S = 0.25, 0.25, 0.01
WORKERS = 2                      # every job 2 x 1 GPU: the first four fill the 8 GPUs
ITERATIONS = (20, 40)
GAP_S = 0.5
ROUND_S = 5.0
SEED = 0
TIMEOUT_S = 400.0
KEYS = ("mean_jct_s", "makespan_s", "mean_wait_s", "gpu_util")


def alone_s(workers: int, iterations: int) -> float:
    """The step-time target of examples/timed_steps.py, times the steps (no start or finish)."""
    return iterations * (STEP_S * (SERIAL + (1 - SERIAL) / workers) + COMM_S * (workers - 1))


def workload(n: int, seed: int = SEED) -> list[tuple[float, dict]]:
    from dlsched.experiments.runtime_fidelity import program
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        w = WORKERS
        it = int(rng.integers(ITERATIONS[0], ITERATIONS[1] + 1))
        out.append((i * GAP_S, {
            "name": f"d{n}-{i:02d}", "entry": str(program()),
            "args": {"step_s": {GPU_TYPE: STEP_S}, "serial": SERIAL, "comm_s": COMM_S, "seed": i},
            "workers": w, "gpus_per_worker": 1, "batch_size": 64, "iterations": it,
            "checkpoint_every": 50, "deadline_s": round(it * STEP_S, 3)}))
    return out


def deadline_figures(store, epoch: float) -> dict:
    """Per job: deadline (s after submission), JCT, met; and the share that met theirs."""
    jobs = {}
    for j in store.jobs():
        d = (j["spec"] or {}).get("deadline_s")
        jct = None if j["finish_time"] is None or j["state"] != "done" else j["finish_time"] - j["submit_time"]
        jobs[j["spec"]["name"]] = {"deadline_s": d, "jct_s": jct, "met": jct is not None and d is not None and jct <= d}
    met = sum(x["met"] for x in jobs.values())
    return {"jobs": jobs, "met": met, "share": met / len(jobs) if jobs else 0.0}


def run(seeds: int = 1, log=None, policies: tuple[str, ...] = POLICIES, sizes: tuple[int, ...] = SIZES) -> ExperimentResult:
    from dlsched.experiments.runtime_fidelity import run_real, warm_up
    from dlsched.runtime.cluster import LocalRay
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    outs: dict = {}
    with LocalRay(NODES, GPUS_PER_NODE, gpu_type=GPU_TYPE) as rc:
        warm_up(rc.address, namespace="deadlines", gpus=NODES * GPUS_PER_NODE, log=log)
        for n in sizes:
            for p in policies:
                o = run_real(rc.address, p, workload(n), round_s=ROUND_S, namespace="deadlines",
                             timeout_s=TIMEOUT_S, log=log, collect=deadline_figures)
                if "refused" in o:
                    raise RuntimeError(f"the runtime refused {p}: {o['refused']}")
                outs[(n, p)] = o
                log(f"{n} jobs, {p}: {o['collected']['met']} of {n} met their deadline")
    return compare(outs, sizes, policies)


def compare(outs: dict, sizes, policies) -> ExperimentResult:
    share = {(n, p): outs[(n, p)]["collected"]["share"] for n in sizes for p in policies if (n, p) in outs}
    published = [{"jobs": n, "published (seed 000, Figure 3)": "falls as jobs grow" if i else "highest",
                  **{p: f"{share[(n, p)]:.0%}" for p in policies if (n, p) in share}}
                 for i, n in enumerate(sizes)]
    checks = []
    lo, hi = sizes[0], sizes[-1]
    for p in ("fifo", "gandiva"):
        if (lo, p) in share and (hi, p) in share:
            checks.append(Check(f"{p}: fewer jobs meet their deadline as the workload grows ({lo} -> {hi} jobs)",
                                share[(hi, p)] < share[(lo, p)],
                                " -> ".join(f"{share[(n, p)]:.0%}" for n in sizes if (n, p) in share)))
    if "edf" in policies and "fifo" in policies:
        pairs = [(n, share[(n, "edf")], share[(n, "fifo")]) for n in sizes if (n, "edf") in share and (n, "fifo") in share]
        checks.append(Check("edf: never a lower share than fifo (whether it lifts the curve: see the table)",
                            all(e >= f for _, e, f in pairs),
                            ", ".join(f"{n}: {e:.0%} vs {f:.0%}" for n, e, f in pairs)))
    runs = {f"{n} jobs": {p: [outs[(n, p)]["result"]] for p in policies if (n, p) in outs} for n in sizes}
    rows = [r for n in sizes for r in summarise(runs[f"{n} jobs"], KEYS, group=f"{n} jobs")]
    return ExperimentResult("seed000-deadlines", "Jobs meeting their deadline as the workload grows (seed 000, Figure 3)",
                            rows, published, checks, results=runs,
                            extra={"share": {f"{n}/{p}": s for (n, p), s in share.items()},
                                   "figures": {f"{n}/{p}": outs[(n, p)]["collected"] for n in sizes for p in policies
                                               if (n, p) in outs}})


register_experiment(Experiment("seed000-deadlines", "Jobs meeting their deadline as the workload grows (seed 000, Figure 3)",
                               "seed 000 Figure 3 on an embedded Ray cluster (issue 13)", run, default_seeds=1))
