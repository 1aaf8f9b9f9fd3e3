"""liquid-prescheduling: Liquid's pre-scheduling data transmission (seed 003).

Seed 003 splits a job's run into launching, training and saving (T_e = T_l + N(T_t + T_sy) +
T_sa) and lets the following job be scheduled onto the GPUs "ahead for preparation" when a job
comes to the end of its training. Its figures ("(a) CNN-MNIST", "(b) NeuMF") show JCT with and
without it, no numbers in the slides; the claim is that JCT falls.

Two workloads in the roles of the seed's two jobs, each JOBS one-GPU jobs arriving (Poisson) a
little faster than liquid-5's 10 T4 GPUs serve them, so jobs queue for GPUs:
- cnn-mnist: a small CNN (the zoo's mobilenet) with short training (2-6 min of iterations) and a
  large data set next to it (20-60 GB to load);
- neumf: NeuMF (the zoo's ncf), longer training (10-30 min) and a smaller data set (2-8 GB).
Every job saves for 20-60 s (writing the model and its outputs). Launch times are not typed in:
the simulator computes them from data_gb and the model's size over the node's 10 Gbps NIC
(dlsched.sim.phases). Each workload runs under `liquid-immediate` with pre-scheduling off and on
(`liquid: {prescheduling: true}`), same jobs, same seed.

Expected direction: JCT falls with pre-scheduling on both workloads, more on cnn-mnist (short
jobs, large data) than on neumf, and, over all jobs, more for the jobs whose launch is the
largest part of their run than for those whose launch is the smallest.
"""
from __future__ import annotations

import numpy as np

from dlsched.experiments.base import (Check, Experiment, ExperimentResult, mean_std, register_experiment,
                                      summarise)

CLUSTER = "liquid-5"
POLICY = "liquid-immediate"
JOBS = 80
LOAD = 1.1                      # arrival rate / service rate of the cluster's GPUs
SAVE_S = (20.0, 60.0)
# role -> (zoo model, minutes of training, data GB)
WORKLOADS = {"cnn-mnist": ("mobilenet", (2.0, 6.0), (20.0, 60.0)),
             "neumf": ("ncf", (10.0, 30.0), (2.0, 8.0))}
RUNS = (("pre-scheduling off", False), ("pre-scheduling on", True))
KEYS = ("mean_jct_s", "median_jct_s", "mean_wait_s", "makespan_s", "gpu_util", "finished")
GPUS = 10
NIC_GBPS = 10.0


def workload(role: str, seed: int, jobs: int = JOBS) -> list:
    """The role's jobs (module docstring) for `seed`."""
    from dlsched.workload.schema import job_from_row
    model, minutes, data = WORKLOADS[role]
    rng = np.random.default_rng(seed)
    train_s = 60.0 * rng.uniform(*minutes, jobs)
    data_gb = rng.uniform(*data, jobs)
    save_s = rng.uniform(*SAVE_S, jobs)
    run_s = train_s + save_s + data_gb * 8.0 / NIC_GBPS
    gaps = rng.exponential(float(np.mean(run_s)) / (GPUS * LOAD), jobs)
    submit = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    return [job_from_row({"job_id": f"{role}-{j:03d}", "submit_time_s": round(float(submit[j]), 1),
                          "model": model, "duration_s": round(float(train_s[j]), 1),
                          "data_gb": round(float(data_gb[j]), 2), "save_s": round(float(save_s[j]), 1),
                          "cpus_per_worker": 4.0, "mem_gb_per_worker": 8.0})
            for j in range(jobs)]


def _simulate(jobs, seed: int, on: bool, label: str, role: str):
    from dlsched.api import simulate
    cfg = {"policies": {POLICY: {"params": {"liquid": {"prescheduling": on}}}}}
    res = simulate(CLUSTER, jobs, POLICY, seed=seed, policy_config=cfg)
    res.policy = res.summary["policy"] = label
    res.workload = res.summary["workload"] = f"{role} (seed {seed})"
    return res


def launch_share(jobs) -> dict[str, float]:
    """Each job's launch phase as a share of its run alone (T_l / T_e) on a liquid node."""
    from dlsched.cluster.topology import load_cluster
    from dlsched.core.types import TaskPlacement
    from dlsched.sim.phases import launch_s
    nodes = load_cluster(CLUSTER).nodes
    out = {}
    for j in jobs:
        tl = launch_s(j, (TaskPlacement(0, 0, (0,)),), nodes)
        out[j.job_id] = tl / (tl + j.duration_s + j.save_s)
    return out


def run(seeds: int = 3, jobs: int = JOBS) -> ExperimentResult:
    results, rows, gains, shares = {}, [], {}, {}
    for role in WORKLOADS:
        runs: dict[str, list] = {label: [] for label, _ in RUNS}
        for seed in range(seeds):
            js = workload(role, seed, jobs)
            shares.update({(seed, k): v for k, v in launch_share(js).items()})
            for label, on in RUNS:
                runs[label].append(_simulate(js, seed, on, label, role))
        results[role] = runs
        rows += summarise(runs, KEYS, group=role)
        for seed, (off, on) in enumerate(zip(*(runs[label] for label, _ in RUNS))):
            jct_off = dict(zip(off.jobs.job_id, off.jobs.jct_s))
            jct_on = dict(zip(on.jobs.job_id, on.jobs.jct_s))
            gains.update({(seed, j): 1.0 - jct_on[j] / jct_off[j] for j in jct_off})
    checks, published = _checks(results, gains, shares)
    return ExperimentResult("liquid-prescheduling", "Liquid pre-scheduling data transmission (seed 003)",
                            rows, published, checks, results=results)


def _jct(runs, label) -> float:
    return mean_std([r.summary["mean_jct_s"] for r in runs[label]])[0]


def _checks(results, gains, shares) -> tuple[list[Check], list[dict]]:
    (off, _), (on, _) = RUNS
    checks, published, fall = [], [], {}
    for role, runs in results.items():
        a, b = _jct(runs, off), _jct(runs, on)
        fall[role] = 1.0 - b / a
        checks.append(Check(f"{role}: the mean JCT falls with pre-scheduling", b < a,
                            f"{a:,.0f} s off, {b:,.0f} s on ({-100 * fall[role]:+.1f} %)"))
        published.append({"figure": f"({'a' if role == 'cnn-mnist' else 'b'}) {role} JCT",
                           "published (seed 003)": "lower with pre-scheduling (figure, no numbers)",
                           "ours: off": f"{a:,.0f} s", "ours: on": f"{b:,.0f} s",
                           "ours: change": f"{-100 * fall[role]:+.1f} %"})
    cnn, neumf = fall["cnn-mnist"], fall["neumf"]
    checks.append(Check("the JCT falls more for cnn-mnist (short jobs, large data) than for neumf", cnn > neumf,
                        f"cnn-mnist {-100 * cnn:+.1f} %, neumf {-100 * neumf:+.1f} %"))
    keys = sorted(gains, key=lambda k: shares[k])
    q = max(len(keys) // 4, 1)
    low, high = (float(np.mean([gains[k] for k in part])) for part in (keys[:q], keys[-q:]))
    s_low, s_high = (float(np.mean([shares[k] for k in part])) for part in (keys[:q], keys[-q:]))
    checks.append(Check("all jobs: the quarter whose launch is the largest part of its run gains more "
                        "than the quarter whose launch is the smallest", high > low,
                        f"launch {100 * s_high:.1f} % of the run: JCT {-100 * high:+.1f} %; launch "
                        f"{100 * s_low:.1f} %: JCT {-100 * low:+.1f} % (per job, mean)"))
    return checks, published


register_experiment(Experiment("liquid-prescheduling", "Liquid pre-scheduling data transmission (seed 003)",
                               "seed 003", run, default_seeds=3))
