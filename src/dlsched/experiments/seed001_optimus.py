"""seed001-optimus: Optimus against DRF and Tetris on a parameter-server workload (seed 001;
Peng et al., "Optimus: An Efficient Dynamic Resource Scheduler for Deep Learning Clusters",
EuroSys 2018).

Workload `seed001` (workload/generators.py): 30 PS jobs with Poisson arrivals (one per 4
minutes on average), image / language / speech models of the zoo, each submitted with a fixed
size (2-8 workers, 1-4 PS) that DRF and Tetris run it at, and 1-4 hours of work at that size
alone; cluster `seed001` (16 servers x 4 P100, 10 Gbps). Optimus is the paper's policy: the
speed model fitted online by NNLS and the remaining steps from the loss-curve fit
(`optimus` with speed = remaining = "fitted"); `optimus-oracle` (true speeds and remaining
iterations) is shown beside it to separate what estimation costs. The convergence estimate's
error is reported too: the loss-curve fit on the samples the run collected up to 25 / 50 / 90 %
of each job, against the job's true iterations (median over jobs, mean over seeds). So is the
speed fit's error as it converges: each time a job first runs at a new (w, p), the step time
the policy predicted there from the samples it had (1, 2, 3 or more) against the speed the job
then showed (the allocator's `fit_errors`). Below min_samples (3) the prediction is the oracle's
shape scaled to the samples, so its error is what placement and contention add to the isolated
shape; from 3 samples on it is the NNLS fit.

A second part solves Optimus's integer program exactly (policies/actions/optimus_exact.py,
HiGHS) on small random cases and reports the optimality gap of the marginal-gain heuristic.

Published (seed 001): mean JCT 2.39x and makespan 1.63x lower than DRF; all jobs done in 4.1 h
(Optimus), 6.7 h (DRF) and 5.0 h (Tetris). Expected: Optimus's mean JCT at least 2x and its
makespan at least 1.5x lower than DRF's, and both lower than Tetris's; the heuristic never
better than the optimum (a check of the solver and of the tables).
"""
from __future__ import annotations

from dlsched.experiments.base import (Check, Experiment, ExperimentResult, mean_std, register_experiment,
                                      summarise)

PUBLISHED = {"jct_ratio_drf": 2.39, "makespan_ratio_drf": 1.63,          # seed 001, Optimus results
             "makespan_h": {"optimus": 4.1, "drf": 6.7, "tetris": 5.0}}
KEYS = ("mean_jct_s", "median_jct_s", "p95_jct_s", "makespan_s", "mean_wait_s", "gpu_util", "sched_time_s",
        "finished")
FITTED = {"policies": {"optimus": {"params": {"optimus": {"speed": "fitted", "remaining": "fitted"}}}}}
# label -> (profile, policy config)
POLICIES = {"optimus": ("optimus", FITTED), "drf": ("drf", None), "tetris": ("tetris", None),
            "optimus-oracle": ("optimus", None)}
GAP_CASES = 20


def _simulate(cluster, jobs, profile_name: str, cfg, seed: int):
    """One run; returns (SimResult, the profile's Optimus allocator or None)."""
    from dlsched.api import load_policy_config
    from dlsched.cluster.topology import load_cluster
    from dlsched.metrics import build_result
    from dlsched.policies.allocate.optimus import OptimusAllocate
    from dlsched.scheduler.core import Scheduler, build_profile
    from dlsched.sim.backend import SimBackend
    cl = load_cluster(cluster)
    profile = build_profile(profile_name, load_policy_config(cfg).get(profile_name, {}))
    backend = SimBackend(cl, jobs)
    sched = Scheduler(profile, seed=seed)
    sched.run(backend)
    res = build_result(sched, backend, policy=profile_name, cluster_name=cl.name, workload_name="jobs")
    return res, profile.allocator if isinstance(profile.allocator, OptimusAllocate) else None


def convergence_errors(opt, specs, fractions=(0.25, 0.5, 0.9)) -> dict[str, float]:
    """Median |K_hat / K - 1| of the loss-curve fit on the samples a run's Optimus collected up
    to each fraction of a job's iterations (the fit the policy would have made then)."""
    import numpy as np

    from dlsched.policies.actions.optimus_fit import MAX_FIT_SAMPLES, MIN_LOSS_SAMPLES, convergence_step, fit_loss
    out = {}
    for f in fractions:
        errs = []
        for s in specs:
            smp = [x for x in getattr(opt, "_loss", {}).get(s.job_id, []) if x[0] <= f * s.iterations]
            if len(smp) < MIN_LOSS_SAMPLES:
                continue
            idx = np.unique(np.linspace(0, len(smp) - 1, min(len(smp), MAX_FIT_SAMPLES)).round().astype(int))
            k, loss = zip(*(smp[i] for i in idx))
            errs.append(abs(convergence_step(fit_loss(k, loss)) / s.iterations - 1.0))
        out[f"conv_err_{int(100 * f)}"] = float(np.median(errs)) if errs else float("nan")
    return out


SPEED_FIT_BINS = (1, 2, 3)      # samples a job had before a new (w, p): 1, 2, 3 or more


def speed_fit_errors(opt) -> dict[str, float]:
    """Median relative error of Optimus's predicted step time at a (w, p) a job had not run at
    yet, against the speed it then showed, by the samples it had before (the fit's error as it
    converges: early state below min_samples, NNLS fit from there)."""
    import numpy as np
    out = {}
    for b in SPEED_FIT_BINS:
        errs = [e for _, _, n, e in opt.fit_errors if (n == b if b < SPEED_FIT_BINS[-1] else n >= b)]
        out[f"speed_err_{b}"] = float(np.median(errs)) if errs else float("nan")
    return out


def run_policies(seeds: int, workload: str = "seed001", cluster: str = "seed001",
                 policies: dict = POLICIES) -> dict[str, list]:
    from dlsched.workload.io import load_workload
    out: dict[str, list] = {p: [] for p in policies}
    for seed in range(seeds):
        jobs = load_workload(workload, seed=seed)
        for label, (profile, cfg) in policies.items():
            res, opt = _simulate(cluster, jobs, profile, cfg, seed)
            res.workload = res.summary["workload"] = f"{workload} (seed {seed})"
            res.summary["label"] = label
            if opt is not None and opt.remaining == "fitted":
                res.summary.update(convergence_errors(opt, jobs))
            if opt is not None and opt.speed == "fitted":
                res.summary.update(speed_fit_errors(opt))
            out[label].append(res)
    return out


def run(seeds: int = 5, gap_cases: int = GAP_CASES, workload: str = "seed001") -> ExperimentResult:
    from dlsched.policies.actions.optimus_exact import gap_study
    runs = run_policies(seeds, workload)
    rows = summarise(runs, KEYS)
    jct = {p: mean_std([r.summary["mean_jct_s"] for r in rs])[0] for p, rs in runs.items()}
    ms = {p: mean_std([r.summary["makespan_s"] for r in rs])[0] for p, rs in runs.items()}
    jr, mr = jct["drf"] / jct["optimus"], ms["drf"] / ms["optimus"]
    per_jr = [d.summary["mean_jct_s"] / o.summary["mean_jct_s"] for d, o in zip(runs["drf"], runs["optimus"])]
    per_mr = [d.summary["makespan_s"] / o.summary["makespan_s"] for d, o in zip(runs["drf"], runs["optimus"])]
    gaps = gap_study(gap_cases, seed=0)
    published = [
        {"figure": "mean JCT DRF / Optimus", "published": f"{PUBLISHED['jct_ratio_drf']:.2f}x", "ours": f"{jr:.2f}x"},
        {"figure": "makespan DRF / Optimus", "published": f"{PUBLISHED['makespan_ratio_drf']:.2f}x",
         "ours": f"{mr:.2f}x"},
        {"figure": "mean JCT Tetris / Optimus", "published": "-", "ours": f"{jct['tetris'] / jct['optimus']:.2f}x"},
        {"figure": "makespan Tetris / Optimus", "published": "-", "ours": f"{ms['tetris'] / ms['optimus']:.2f}x"},
    ]
    for p in ("optimus", "drf", "tetris"):
        published.append({"figure": f"all jobs done, {p} (h)", "published": f"{PUBLISHED['makespan_h'][p]:.1f}",
                          "ours": f"{ms[p] / 3600.0:.2f}"})
    published += [
        {"figure": "all jobs done, optimus-oracle (h)", "published": "-",
         "ours": f"{ms['optimus-oracle'] / 3600.0:.2f}"},
        {"figure": "mean JCT optimus / optimus-oracle", "published": "-",
         "ours": f"{jct['optimus'] / jct['optimus-oracle']:.3f}"},
        {"figure": f"heuristic optimality gap, mean over {gaps['cases']} ILP cases", "published": "-",
         "ours": f"{100 * gaps['mean_gap']:.2f} %"},
        {"figure": f"heuristic optimality gap, max over {gaps['cases']} ILP cases", "published": "-",
         "ours": f"{100 * gaps['max_gap']:.2f} %"},
    ]
    for f in (25, 50, 90):
        err = mean_std([r.summary.get(f"conv_err_{f}") for r in runs["optimus"]])[0]
        published.append({"figure": f"convergence estimate error at {f} % of a job (median)",
                          "published": "-", "ours": f"{100 * err:.1f} %"})
    for b in SPEED_FIT_BINS:
        err = mean_std([r.summary.get(f"speed_err_{b}") for r in runs["optimus"]])[0]
        more = " or more" if b == SPEED_FIT_BINS[-1] else ""
        published.append({"figure": f"speed fit error at a new (w, p), after {b}{more} sample(s) (median)",
                          "published": "-", "ours": f"{100 * err:.1f} %"})
    fmt = ", ".join
    checks = [
        Check("Optimus's mean JCT at least 2x lower than DRF's", jr >= 2.0,
              f"{jr:.2f}x (per seed: {fmt(f'{x:.2f}' for x in per_jr)})"),
        Check("Optimus's makespan at least 1.5x lower than DRF's", mr >= 1.5,
              f"{mr:.2f}x (per seed: {fmt(f'{x:.2f}' for x in per_mr)})"),
        Check("Optimus's mean JCT lower than Tetris's", jct["optimus"] < jct["tetris"],
              f"{jct['optimus'] / 3600:.2f} h vs {jct['tetris'] / 3600:.2f} h"),
        Check("Optimus's makespan lower than Tetris's", ms["optimus"] < ms["tetris"],
              f"{ms['optimus'] / 3600:.2f} h vs {ms['tetris'] / 3600:.2f} h"),
        Check("the marginal-gain heuristic is never better than the exact optimum",
              min(gaps["gaps"]) >= -1e-9,
              f"mean gap {100 * gaps['mean_gap']:.2f} %, max {100 * gaps['max_gap']:.2f} %, optimal in "
              f"{gaps['optimal_cases']} of {gaps['cases']} cases ({min(gaps['jobs'])}-{max(gaps['jobs'])} jobs)"),
    ]
    return ExperimentResult("seed001-optimus", "Optimus vs DRF and Tetris (seed 001)", rows, published, checks,
                            results={"": runs}, extra={"gap_study": gaps})


register_experiment(Experiment("seed001-optimus", "Optimus vs DRF and Tetris (seed 001)", "seed 001", run,
                               default_seeds=5))
