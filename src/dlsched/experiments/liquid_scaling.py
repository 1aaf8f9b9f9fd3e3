"""liquid-scaling: Liquid (seed 003) on 5, 10, 15 and 20 nodes of 2 T4 each, against FIFO,
spread, bin pack and gang: JCT, makespan, network traffic. Jobs are parameter-server jobs
(workload `liquid`), their number and arrival rate growing with the cluster.

The slides give no numbers; the expected direction (Liquid's claim): its network-aware placement
moves fewer bytes over the network and gives lower JCT than the network-oblivious policies.
"""
from __future__ import annotations

from dlsched.experiments.base import (Check, Experiment, ExperimentResult, mean_std, register_experiment,
                                      run_seeds, summarise)
from dlsched.scheduler.framework import REGISTRY

SIZES = (5, 10, 15, 20)
BASELINES = ["fifo", "k8s-spread", "k8s-binpack", "volcano-gang"]
LIQUID = ["liquid-immediate", "liquid"]
KEYS = ("mean_jct_s", "makespan_s", "nic_bytes", "cross_rack_bytes", "mean_wait_s", "gpu_util",
        "sched_time_s", "finished")


def run(seeds: int = 3, sizes: tuple[int, ...] = SIZES) -> ExperimentResult:
    """`sizes`: the cluster sizes in nodes (all of SIZES by default; the tests run fewer)."""
    import dlsched.policies  # noqa: F401
    policies = BASELINES + [p for p in LIQUID if p in REGISTRY.names("profile")]
    results, rows, checks = {}, [], []
    for n in sizes:
        wl = f"liquid:jobs={8 * n},rate={n / 600:.6g}"
        runs = run_seeds(f"liquid-{n}", wl, policies, seeds)
        results[f"liquid-{n}"] = runs
        rows += summarise(runs, KEYS, group=f"liquid-{n}")
        jct = {p: mean_std([r.summary["mean_jct_s"] for r in rs])[0] for p, rs in runs.items()}
        nic = {p: mean_std([r.summary["nic_bytes"] for r in rs])[0] for p, rs in runs.items()}
        for lp in (p for p in LIQUID if p in runs):
            checks.append(Check(f"{n} nodes: {lp} moves fewer network bytes than spread, bin pack and gang",
                                all(nic[lp] < nic[b] for b in BASELINES[1:]),
                                ", ".join(f"{p} {v / 1e9:,.0f} GB" for p, v in nic.items())))
            checks.append(Check(f"{n} nodes: {lp} has a lower mean JCT than spread",
                                jct[lp] < jct["k8s-spread"],
                                ", ".join(f"{p} {v:,.0f} s" for p, v in jct.items())))
    missing = [p for p in LIQUID if p not in policies]
    if missing:
        checks.append(Check("Liquid policies registered", False, "missing: " + ", ".join(missing)))
    published = [{"figure": "network-aware placement moves less data and lowers JCT",
                  "published (seed 003)": "claimed, no numbers", "ours": "see checks"}]
    return ExperimentResult("liquid-scaling", "Liquid scaling (seed 003)", rows, published, checks,
                            results=results)


register_experiment(Experiment("liquid-scaling", "Liquid scaling (seed 003)", "seed 003", run, default_seeds=3))
