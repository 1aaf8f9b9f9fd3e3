"""seed002-k8s: the Kubernetes techniques of seed 002 on its cluster (2 servers x 4 V100 + 2 x 2
V100, 10 Gbps): load balancing (k8s-spread), bin pack (k8s-binpack), Volcano gang and
co-location, on ten image models with CIFAR-10- and ImageNet-sized data.

As in the seed's figures 6-11, each model is its own experiment: its jobs (both data sets, two
rounds, 2-4 one-GPU workers each, arriving within two minutes; workload
`seed002:model=M,rounds=2,span_s=120`) run under each technique, and we report JCT, network
traffic, waiting time, scheduling time, makespan and GPU utilisation per technique and model.

The seed's figures are bar charts without numbers; its expected direction: co-location has the
lowest JCT, makespan and traffic, and the highest waiting time for some models (it waits for a
single server that holds the whole job); load balancing moves the most bytes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dlsched.experiments.base import (Check, Experiment, ExperimentResult, register_experiment,
                                      run_seeds, summarise)
from dlsched.workload.generators import SEED002_MODELS

POLICIES = ["k8s-spread", "k8s-binpack", "volcano-gang", "co-location"]
KEYS = ("mean_jct_s", "makespan_s", "mean_wait_s", "nic_bytes", "gpu_util", "sched_time_s",
        "sched_round_mean_ms", "partial_hold_gpu_s", "finished", "unfinished")
FIGURES = (("mean_jct_s", "JCT (s)", 1.0), ("nic_bytes", "network traffic (GB)", 1e9),
           ("mean_wait_s", "waiting time (s)", 1.0), ("sched_time_s", "scheduling time (ms)", 1e-3),
           ("makespan_s", "makespan (s)", 1.0), ("gpu_util", "GPU utilisation (%)", 0.01))


def _bars(rows: list[dict], path: Path) -> Path:
    """One panel per figure of the seed (6-11): bars per model, one colour per technique."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(14, 11))
    models = list(SEED002_MODELS)
    x = np.arange(len(models))
    width = 0.8 / len(POLICIES)
    for i, (key, label, scale) in enumerate(FIGURES):
        ax = fig.add_subplot(3, 2, i + 1)
        for k, pol in enumerate(POLICIES):
            vals = [next((r[key] / scale for r in rows if r["group"] == m and r["policy"] == pol), np.nan)
                    for m in models]
            errs = [next((r[f"{key}_std"] / scale for r in rows if r["group"] == m and r["policy"] == pol), 0)
                    for m in models]
            ax.bar(x + (k - (len(POLICIES) - 1) / 2) * width, vals, width, yerr=errs, label=pol, capsize=2)
        ax.set_title(label, fontsize=10)
        ax.set_xticks(x, models, rotation=30, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        if i == 0:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def run(seeds: int = 3) -> ExperimentResult:
    results, rows = {}, []
    for model in SEED002_MODELS:
        runs = run_seeds("seed002", f"seed002:model={model},rounds=2,span_s=120", POLICIES, seeds)
        results[model] = runs
        rows += summarise(runs, KEYS, group=model)
    avg = {k: {p: float(np.mean([r[k] for r in rows if r["policy"] == p])) for p in POLICIES}
           for k in ("mean_jct_s", "makespan_s", "nic_bytes", "mean_wait_s", "sched_time_s")}
    rows += [{"group": "mean of models", "policy": p, "seeds": seeds,
              **{k: avg[k][p] for k in avg}, **{f"{k}_std": float("nan") for k in avg}} for p in POLICIES]
    coloc_max_wait = [m for m in SEED002_MODELS
                      if max(POLICIES, key=lambda p: next(r["mean_wait_s"] for r in rows
                                                           if r["group"] == m and r["policy"] == p)) == "co-location"]

    def lowest(key):
        return min(avg[key], key=avg[key].get)

    def detail(key, scale=1.0, unit="s"):
        return ", ".join(f"{p} {v / scale:,.0f} {unit}" for p, v in avg[key].items())
    checks = [
        Check("co-location has the lowest JCT (mean over models)", lowest("mean_jct_s") == "co-location",
              detail("mean_jct_s")),
        Check("co-location has the lowest makespan (mean over models)", lowest("makespan_s") == "co-location",
              detail("makespan_s")),
        Check("co-location moves the fewest bytes over the network", lowest("nic_bytes") == "co-location",
              detail("nic_bytes", 1e9, "GB")),
        Check("load balancing (k8s-spread) moves the most bytes",
              max(avg["nic_bytes"], key=avg["nic_bytes"].get) == "k8s-spread", detail("nic_bytes", 1e9, "GB")),
        Check("co-location has the highest waiting time for some models", bool(coloc_max_wait),
              "models: " + (", ".join(coloc_max_wait) or "none")),
    ]
    published = [{"figure": f, "published (seed 002)": d, "ours": o} for f, d, o in [
        ("lowest JCT (fig. 6)", "co-location", lowest("mean_jct_s")),
        ("most network traffic (fig. 7)", "load balancing", max(avg["nic_bytes"], key=avg["nic_bytes"].get)),
        ("highest waiting time for some models (fig. 8)", "co-location", ", ".join(coloc_max_wait) or "none"),
        ("lowest makespan (fig. 10)", "co-location", lowest("makespan_s")),
    ]]
    return ExperimentResult("seed002-k8s", "Kubernetes techniques (seed 002)", rows, published, checks,
                            results=results, extra={"plots": {"per_model.png": _bars}})


register_experiment(Experiment("seed002-k8s", "Kubernetes techniques (seed 002)", "seed 002", run, default_seeds=3))
