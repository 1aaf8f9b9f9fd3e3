"""liquid-gpu-sharing: Liquid's fine-grained GPU sharing (seed 003).

Seed 003: GPUs are used exclusively, but tasks for development and testing have low GPU needs,
so they share GPUs. Its figures (JCT on CNN-MNIST and NeuMF, then on K80 and T4 GPUs) give no
numbers in the slides; the claim is that sharing lets such jobs run sooner on fewer GPUs.

Workload (per seed, Poisson arrivals over about an hour, on liquid-5: 10 T4 GPUs):
- PROD production jobs: 1 or 2 workers of one GPU each, a model of the `liquid` generator,
  30-90 min of training;
- DEV development / test jobs: one worker asking for 0.25 or 0.5 GPU, a light model (vae, dcgan,
  superresolution, mobilenet), 5-20 min.
It runs under `liquid-immediate` twice: sharing (fractions honoured: best-fit GPU slots,
dlsched.scheduler.transaction.pick_gpus, never beside a task that holds a whole GPU) and
exclusive (every fraction rounded up to one GPU). Jobs on one GPU slow each other by the speed
model's interference factor (dlsched.workload.speed: 0.9 x min(1, 1 / (u_a + u_b)) from the
models' solo GPU utilisations).

Figures per mode: the dev jobs' mean queueing time, GPUs held (mean GPUs per dev job, and their
GPU-hours), their slowdown (run time / the run time alone, the interference they suffer), their
JCT, and the production jobs' mean JCT.

Expected direction: with sharing the dev jobs wait less and hold fewer GPUs; they run slower
(interference) but finish sooner (JCT); the production jobs are not held back.
"""
from __future__ import annotations

import numpy as np

from dlsched.experiments.base import (Check, Experiment, ExperimentResult, mean_std, register_experiment)

CLUSTER = "liquid-5"
POLICY = "liquid-immediate"
PROD, DEV = 16, 80
SPAN_S = 3600.0
DEV_MODELS = ("vae", "dcgan", "superresolution", "mobilenet")
DEV_GPUS = (0.25, 0.5)
MODES = (("sharing", False), ("exclusive", True))
KEYS = ("dev_wait_s", "dev_gpus", "dev_gpu_h", "dev_slowdown", "dev_jct_s", "prod_jct_s", "makespan_s")


def workload(seed: int, prod: int = PROD, dev: int = DEV, exclusive: bool = False) -> list:
    """The jobs (module docstring); `exclusive`: every fraction of a GPU rounded up to one."""
    from dlsched.workload.generators import LIQUID_MODELS
    from dlsched.workload.schema import job_from_row
    rng = np.random.default_rng(seed)
    rows = []
    for j in range(prod + dev):
        is_dev = j >= prod
        gpw = float(rng.choice(DEV_GPUS)) if is_dev else 1.0
        models = DEV_MODELS if is_dev else LIQUID_MODELS
        minutes = rng.uniform(5.0, 20.0) if is_dev else rng.uniform(30.0, 90.0)
        rows.append({"job_id": f"{'dev' if is_dev else 'prod'}-{j:03d}",
                     "submit_time_s": round(float(rng.uniform(0.0, SPAN_S)), 1),
                     "workers": 1 if is_dev else int(rng.integers(1, 3)),
                     "gpus_per_worker": float(np.ceil(gpw)) if exclusive else gpw,
                     "cpus_per_worker": 2.0, "mem_gb_per_worker": 4.0,
                     "model": str(models[rng.integers(len(models))]),
                     "duration_s": round(60.0 * minutes, 1)})
    return [job_from_row(r) for r in sorted(rows, key=lambda r: (r["submit_time_s"], r["job_id"]))]


def _simulate(seed: int, mode: str, exclusive: bool, prod: int, dev: int):
    from dlsched.api import simulate
    jobs = workload(seed, prod, dev, exclusive)
    res = simulate(CLUSTER, jobs, POLICY, seed=seed)
    j = res.jobs
    d, p = j[j.job_id.str.startswith("dev")], j[j.job_id.str.startswith("prod")]
    alone = {x.job_id: x.duration_s for x in jobs}
    res.policy = res.summary["policy"] = mode
    res.workload = res.summary["workload"] = f"production + dev/test jobs (seed {seed})"
    res.summary.update({
        "dev_wait_s": float(d.wait_s.mean()), "dev_gpus": float((d.gpu_s / d.run_s).mean()),
        "dev_gpu_h": float(d.gpu_s.sum() / 3600.0),
        "dev_slowdown": float(np.mean([r / alone[i] for i, r in zip(d.job_id, d.run_s)])),
        "dev_jct_s": float(d.jct_s.mean()), "prod_jct_s": float(p.jct_s.mean())})
    return res


def run(seeds: int = 3, prod: int = PROD, dev: int = DEV) -> ExperimentResult:
    runs = {mode: [_simulate(seed, mode, ex, prod, dev) for seed in range(seeds)] for mode, ex in MODES}
    rows = []
    for mode, results in runs.items():
        row = {"group": "", "policy": mode, "seeds": len(results)}
        for k in KEYS:
            row[k], row[f"{k}_std"] = mean_std([r.summary[k] for r in results])
        rows.append(row)
    m = {row["policy"]: row for row in rows}
    share, excl = m["sharing"], m["exclusive"]
    checks = [
        Check("dev/test jobs wait less for GPUs when they share them", share["dev_wait_s"] < excl["dev_wait_s"],
              f"{excl['dev_wait_s']:,.0f} s exclusive, {share['dev_wait_s']:,.0f} s sharing"),
        Check("dev/test jobs hold fewer GPUs when they share them",
              share["dev_gpus"] < excl["dev_gpus"] and share["dev_gpu_h"] < excl["dev_gpu_h"],
              f"{excl['dev_gpus']:.2f} vs {share['dev_gpus']:.2f} GPUs per job; "
              f"{excl['dev_gpu_h']:,.1f} vs {share['dev_gpu_h']:,.1f} GPU-hours"),
        Check("sharing slows dev/test jobs down (interference), but they finish sooner",
              share["dev_slowdown"] > excl["dev_slowdown"] and share["dev_jct_s"] < excl["dev_jct_s"],
              f"run time {excl['dev_slowdown']:.2f}x vs {share['dev_slowdown']:.2f}x alone; JCT "
              f"{excl['dev_jct_s']:,.0f} s vs {share['dev_jct_s']:,.0f} s"),
        Check("production jobs are not held back by sharing", share["prod_jct_s"] <= excl["prod_jct_s"],
              f"mean JCT {excl['prod_jct_s']:,.0f} s exclusive, {share['prod_jct_s']:,.0f} s sharing"),
    ]
    published = [{"figure": "fine-grained GPU sharing for development and test jobs",
                  "published (seed 003)": "shared GPUs: jobs run sooner (figures, no numbers)",
                  "ours: dev wait exclusive -> sharing": f"{excl['dev_wait_s']:,.0f} s -> {share['dev_wait_s']:,.0f} s",
                  "ours: dev GPUs per job": f"{excl['dev_gpus']:.2f} -> {share['dev_gpus']:.2f}",
                  "ours: dev slowdown": f"{excl['dev_slowdown']:.2f}x -> {share['dev_slowdown']:.2f}x"}]
    return ExperimentResult("liquid-gpu-sharing", "Liquid fine-grained GPU sharing (seed 003)", rows, published,
                            checks, results={"": runs})


register_experiment(Experiment("liquid-gpu-sharing", "Liquid fine-grained GPU sharing (seed 003)",
                               "seed 003", run, default_seeds=3))
