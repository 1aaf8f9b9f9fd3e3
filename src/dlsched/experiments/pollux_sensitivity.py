"""pollux-sensitivity: our `pollux` policy under Pollux's own sensitivity studies (issue "Pollux",
P2): the scheduling round's length, and network interference with its avoidance switched off.

Pollux's published runs (petuum/adaptdl, branch osdi21-artifact, simulator/results-period/*/ and
simulator/results-inter/*/summary.json, "mean": the mean JCT over its eight workloads at 1.0x job
load; kept in ../shared/traces/pollux/results and typed in below with that source):

- round length (`--interval`): 30 s, 1, 2, 4 and 8 minutes;
- interference (`--interference x` with repair rule (1), "at most one distributed job per node",
  commented out): a distributed job sharing a node with another distributed job runs at (1 - x)
  of its goodput, x = 0, 0.25, 0.5. (With the rule on, no two distributed jobs share a node and
  the slowdown never applies; Pollux's plot reuses its 1-minute run for all three.)

We run the same settings on pollux-1 .. pollux-8 (`round_s`, and the allocator's
`avoid_interference` and `interference`; dlsched.sim.adaptive), one seed each as Pollux's runs,
in a process pool of one worker per core. Expected: each mean within +-7 % of Pollux's, and the
settings in the same order of mean JCT within each study.
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

from dlsched.experiments.base import Check, Experiment, ExperimentResult, register_experiment
from dlsched.experiments.pollux_fidelity import POLLUX_CONFIG, RESTART_DELAY_S, START_DELAY_S

# name -> (round_s, avoid_interference, interference, Pollux's published mean JCT (s))
PERIOD = {   # simulator/results-period/pollux-<period>/summary.json "mean"
    "30 s": (30.0, True, 0.0, 2729.1203125),
    "1 min": (60.0, True, 0.0, 2751.13359375),
    "2 min": (120.0, True, 0.0, 2805.8671875),
    "4 min": (240.0, True, 0.0, 2968.54921875),
    "8 min": (480.0, True, 0.0, 3354.1765625),
}
INTERFERENCE = {   # simulator/results-inter/{noavoid,inter25,inter50}/summary.json "mean"
    "no avoidance, 0 %": (60.0, False, 0.0, 2757.93359375),
    "no avoidance, 25 %": (60.0, False, 0.25, 3177.1234375),
    "no avoidance, 50 %": (60.0, False, 0.5, 3903.05703125),
}
STUDIES = {"round length": PERIOD, "interference": INTERFERENCE}


def config(round_s: float, avoid: bool, interference: float) -> dict:
    params = dict(POLLUX_CONFIG["policies"]["pollux"]["params"]["pollux"], avoid_interference=avoid,
                  interference=interference)
    return {"policies": {"pollux": {"round_s": round_s, "params": {"pollux": params}}}}


def mean_jct(workload: int, round_s: float, avoid: bool, interference: float, seed: int = 0) -> float:
    """Our pollux's mean JCT on pollux-<workload> under one setting (a pool worker's task)."""
    from dlsched.api import simulate
    res = simulate("pollux", f"pollux-{workload}", "pollux", seed=seed, start_delay_s=START_DELAY_S,
                   restart_delay_s=RESTART_DELAY_S, policy_config=config(round_s, avoid, interference))
    return float(res.summary["mean_jct_s"])


def run(seeds: int = 1, workloads: tuple[int, ...] = tuple(range(1, 9)), studies: tuple[str, ...] = tuple(STUDIES),
        workers: int | None = None) -> ExperimentResult:
    tasks = [(study, name, w, s) for study in studies for name in STUDIES[study]
             for w in workloads for s in range(max(int(seeds), 1))]
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        futs = [pool.submit(mean_jct, w, *STUDIES[study][name][:3], s) for study, name, w, s in tasks]
        got = [f.result() for f in futs]
    ours: dict[tuple[str, str], list[float]] = {}
    for (study, name, _, _), v in zip(tasks, got):
        ours.setdefault((study, name), []).append(v)
    rows, published, checks = [], [], []
    for study in studies:
        means = {}
        for name, (round_s, avoid, x, pub) in STUDIES[study].items():
            m = means[name] = sum(ours[study, name]) / len(ours[study, name])
            d = m / pub - 1
            rows.append({"group": study, "policy": f"pollux, {name}", "seeds": int(seeds), "mean_jct_s": m,
                         "round_s": round_s, "avoid_interference": avoid, "interference": x})
            published.append({"figure": f"{study}: {name}, mean JCT (s)", "published": pub, "ours": m,
                              "deviation": f"{100 * d:+.1f} %"})
            if len(workloads) == 8:
                checks.append(Check(f"{study}, {name}: mean JCT within +-7 % of Pollux's", abs(d) <= 0.07,
                                    f"{100 * d:+.1f} %"))
        want = sorted(STUDIES[study], key=lambda n: STUDIES[study][n][3])
        got_order = sorted(means, key=means.get)
        checks.append(Check(f"{study}: the settings in Pollux's order of mean JCT", got_order == want,
                            " < ".join(f"{n} {means[n]:,.0f} s" for n in got_order)))
    return ExperimentResult("pollux-sensitivity", "Pollux's round-length and interference studies", rows,
                            published, checks)


register_experiment(Experiment("pollux-sensitivity", "Pollux's round-length and interference studies",
                               "Pollux OSDI'21 artifact (petuum/adaptdl osdi21-artifact)", run, default_seeds=1))
