"""seed001-gandiva: Gandiva's introspective mechanisms (Xiao et al., "Gandiva: Introspective Cluster
Scheduling for Deep Learning", OSDI 2018; seed 001) in three parts.

1. Table 1: for each of its eight models, jobs of that model on one P40, time-sliced (profile
   `gandiva`, packing off) against packed (packing forced from the start, no solo turn first, never undone); the aggregate
   throughput of each run = total work / makespan, in solo speeds, so the gain is
   packed / time-sliced - 1, computed by the simulator from the per-model data
   (dlsched.workload.packing) and the time-slicing costs. Pairs (two jobs), and the "max" of the
   table: as many copies as fit the P40's 24 GB (at most 8). A third run per pair lets
   gandiva_pack decide (max_util raised so that every pair is tried): packing must be kept for
   the models with a positive published gain and undone for the others.
2. Figure 9, six 1-GPU jobs time-sliced on 4 GPUs: four jobs run, two more arrive at 600 s;
   under `gandiva` all six progress at once (two rings of two jobs), against FIFO where the two
   wait for a GPU. Per-job GPU share over the overload window (until the first job ends),
   aggregate throughput, time to first progress.
3. Cluster scale: 45 servers x 4 P40 (180 GPUs, two affinity groups of two GPUs per server, as
   the paper's 180-GPU cluster; server shape ours), an overload of hyper-parameter-search-like
   jobs (Poisson arrivals at 1.5x the cluster's capacity for four hours; 1/2/4/8 GPUs with
   probability 0.70/0.15/0.10/0.05; models of Table 1 and the zoo; 10 minutes to 4 hours of
   work), FIFO, Tiresias and Gandiva: GPU utilisation, JCT, time to first progress,
   suspensions, migrations and the time lost to them. The utilisation compared is the useful
   one under overload (useful_gpu_util_overload): GPU-seconds of training progress at solo
   speed (a job's work is its run time at its ideal placement x its GPUs) done during the four
   hours of arrivals, per GPU-second of the cluster - what Gandiva's Figure 15 measures in
   spirit (GPUs kept busy with useful work). Packing raises it above the GPU time held; partial
   holds, slow placements and idle GPUs lower it. Allocated (gpu_util) and effective
   (effective_gpu_util: held by jobs making progress, a shared GPU counted once) utilisation
   over the makespan are reported beside it.

Published (seed 001): Table 1's gains; Figure 9 and Figure 15 as figures (no numbers in the
seed); the paper's cluster result: utilisation +26 % on 180 GPUs. Expected: the sign of every
Table 1 gain, the full-pack gains within 10 % of the published throughput ratio, packing kept
exactly where the published gain is positive; in Figure 9 all six jobs progress within a quantum
and the four GPUs stay busy (switching costs under 5 %); at cluster scale a higher effective
useful utilisation under overload than FIFO and a much earlier first progress (at most half
of FIFO's mean).
"""
from __future__ import annotations

import math

import numpy as np

from dlsched.cluster import cluster_from_dict
from dlsched.experiments.base import (Check, Experiment, ExperimentResult, mean_std, register_experiment,
                                      summarise)
from dlsched.workload.packing import TABLE1, TABLE1_NAMES, gpu_mem_gb
from dlsched.workload.schema import job_from_row

PUBLISHED_UTIL_GAIN = 0.26      # Gandiva (OSDI 2018): cluster GPU utilisation +26 % on 180 GPUs
WORK_S = 1200.0                 # solo seconds of work per job in the Table 1 runs
MAX_COPIES = 8

CLUSTER_SPEC = {"name": "gandiva-180", "rack_uplink_gbps": 100, "node_groups": [
    {"count": 45, "gpus": 4, "gpus_per_group": 2, "gpu_type": "P40", "gpu_mem_gb": 24, "cpus": 32,
     "mem_gb": 256, "nic_gbps": 40, "gpu_link_gbps": 100, "nodes_per_rack": 15}]}
CLUSTER_POLICIES = ["fifo", "tiresias", "gandiva"]
CLUSTER_KEYS = ("mean_jct_s", "median_jct_s", "makespan_s", "mean_wait_s", "useful_gpu_util_overload",
                "gpu_util", "effective_gpu_util",
                "mean_ttfp_s", "median_ttfp_s", "suspensions", "resumes", "migrations", "switch_lost_gpu_s",
                "switch_lost_frac", "sched_time_s", "finished")
MODELS_1GPU = ("vae", "superresolution", "rhn", "scrnn", "mi-lstm", "lstm", "resnet50", "resnext50",
               "resnet18", "mobilenet", "vgg16", "bert")
MODELS_MULTI = ("resnet50", "resnext50", "vgg16", "bert", "lstm", "resnet18")
SIZES = ((1, 0.70), (2, 0.15), (4, 0.10), (8, 0.05))


# -- running -----------------------------------------------------------------------------------
def _simulate(cluster, jobs, policy: str, params: dict | None = None, seed: int = 0):
    """One run; returns (SimResult, Scheduler) - the scheduler, to read the actions' logs."""
    from dlsched.metrics import build_result
    from dlsched.scheduler.core import Scheduler, build_profile
    from dlsched.sim.backend import SimBackend
    profile = build_profile(policy, {"params": params} if params else None)
    backend = SimBackend(cluster, jobs)
    sched = Scheduler(profile, seed=seed)
    sched.run(backend)
    res = build_result(sched, backend, policy=policy, cluster_name=cluster.name, workload_name="jobs")
    return res, sched


def _p40(gpus: int, groups: int = 0):
    return cluster_from_dict({"name": f"p40x{gpus}", "node_groups": [
        {"count": 1, "gpus": gpus, "gpus_per_group": groups, "gpu_type": "P40", "gpu_mem_gb": 24,
         "cpus": 32, "mem_gb": 256}]})


def _copies(model: str, k: int, work_s: float = WORK_S) -> list:
    return [job_from_row(dict(job_id=f"{model}-{i}", submit_time_s=0.0, workers=1, model=model,
                              duration_s=work_s, cpus_per_worker=2, mem_gb_per_worker=8)) for i in range(k)]


# -- part 1: Table 1 ---------------------------------------------------------------------------
def table1(models=tuple(TABLE1), work_s: float = WORK_S) -> list[dict]:
    """Per model: the aggregate throughputs (solo speeds) of pairs and of full packs, time-sliced
    and packed, the gains, and gandiva_pack's own verdict on the pair."""
    from dlsched.policies.actions.gandiva_pack import GandivaPack
    cl = _p40(1)
    off = {"gandiva_grow": {"enabled": False}}
    out = []
    for m in models:
        row = {"model": m, "name": TABLE1_NAMES[m], "published_gain": TABLE1[m][3] / 100.0}
        k_max = max(2, min(MAX_COPIES, int(math.floor(24.0 / gpu_mem_gb(m)))))
        for label, k in (("pair", 2), ("max", k_max)):
            jobs = _copies(m, k, work_s)
            sliced, _ = _simulate(cl, jobs, "gandiva", {**off, "gandiva_timeslice": {"max_load": k},
                                                        "gandiva_pack": {"enabled": False}})
            packed, _ = _simulate(cl, jobs, "gandiva", {**off, "gandiva_timeslice": {"max_load": k},
                                                        "gandiva_pack": {"max_util": 1e6, "max_jobs": k,
                                                                         "window_s": 1e12, "profile_first": False}})
            ts = k * work_s / sliced.summary["makespan_s"]
            pk = k * work_s / packed.summary["makespan_s"]
            row[f"{label}_k"] = k
            row[f"{label}_sliced"] = ts
            row[f"{label}_packed"] = pk
            row[f"{label}_gain"] = pk / ts - 1.0
            row[f"{label}_switch_lost_frac"] = sliced.summary["switch_lost_frac"]
        _, sched = _simulate(cl, _copies(m, 2, work_s), "gandiva", {**off, "gandiva_pack": {"max_util": 1e6}})
        pack = next(a for a in sched.profile.actions if isinstance(a, GandivaPack))
        verdicts = [v for *_, v in pack.log if v in ("kept", "undone")]
        row["verdict"] = verdicts[0] if verdicts else "not tried"
        out.append(row)
    return out


# -- part 2: Figure 9 --------------------------------------------------------------------------
def figure9(work_s: float = 3600.0, late_s: float = 600.0) -> dict:
    """Six 1-GPU jobs on 4 GPUs: per-job share of a GPU over the overload window, aggregate,
    time to first progress, for gandiva and fifo."""
    cl = _p40(4, groups=2)
    jobs = [job_from_row(dict(job_id=f"j{i}", submit_time_s=0.0 if i < 4 else late_s, workers=1,
                              model="resnet50", duration_s=work_s, cpus_per_worker=2, mem_gb_per_worker=8))
            for i in range(6)]
    out = {}
    for policy in ("gandiva", "fifo"):
        res, _ = _simulate(cl, jobs, policy, {"gandiva_grow": {"enabled": False}} if policy == "gandiva" else None)
        end = float(res.jobs.finish_s.min())
        shares = _work_between(res.events, late_s, end)
        out[policy] = {"result": res, "window": (late_s, end),
                       "shares": {j: shares.get(j, 0.0) / (end - late_s) for j in sorted(res.jobs.job_id)},
                       "ttfp": dict(zip(res.jobs.job_id, res.jobs.ttfp_s))}
        out[policy]["aggregate"] = sum(out[policy]["shares"].values())
    return out


def _work_between(events, t0: float, t1: float) -> dict[str, float]:
    """Work each job did in [t0, t1], from the engine's rate records."""
    rate: dict[str, tuple[float, float]] = {}
    work: dict[str, float] = {}
    for t, kind, job, detail in events:
        if kind not in ("rate", "finish"):
            continue
        if job in rate:
            since, r = rate[job]
            a, b = max(since, t0), min(t, t1)
            if b > a:
                work[job] = work.get(job, 0.0) + r * (b - a)
        rate[job] = (t, float(detail) if kind == "rate" else 0.0)
    return work


# -- part 3: cluster scale ---------------------------------------------------------------------
def cluster_jobs(seed: int, *, gpus: int = 180, load: float = 1.5, span_s: float = 4 * 3600.0) -> list:
    """Poisson arrivals offering `load` x the cluster's GPUs over span_s seconds."""
    from dlsched.workload.models import get_model
    rng = np.random.default_rng(seed)
    sizes, probs = zip(*SIZES)
    lo, hi = 600.0, 4 * 3600.0
    mean_work = (hi - lo) / math.log(hi / lo) * float(np.dot(sizes, probs))   # GPU-seconds per job
    rate = load * gpus / mean_work
    jobs, t, i = [], 0.0, 0
    while t < span_s:
        g = int(rng.choice(sizes, p=probs))
        pool = MODELS_1GPU if g == 1 else MODELS_MULTI
        model = str(pool[int(rng.integers(len(pool)))])
        row = dict(job_id=f"g{i:04d}", submit_time_s=round(t, 3), workers=g, model=model,
                   duration_s=round(float(np.exp(rng.uniform(math.log(lo), math.log(hi)))), 1),
                   cpus_per_worker=4, mem_gb_per_worker=16)
        m = get_model(model)
        if m is not None:
            row["batch_size"] = m.default_batch * g
        jobs.append(job_from_row(row))
        t += float(rng.exponential(1.0 / rate))
        i += 1
    return jobs


def cluster_runs(seeds: int, *, spec: dict = CLUSTER_SPEC, load: float = 1.5,
                 span_s: float = 4 * 3600.0) -> dict[str, list]:
    cl = cluster_from_dict(spec)
    out: dict[str, list] = {p: [] for p in CLUSTER_POLICIES}
    for seed in range(seeds):
        jobs = cluster_jobs(seed, gpus=cl.total_gpus, load=load, span_s=span_s)
        for p in CLUSTER_POLICIES:
            res, _ = _simulate(cl, jobs, p, seed=seed)
            res.workload = res.summary["workload"] = f"gandiva-overload (seed {seed})"
            res.summary["useful_gpu_util_overload"] = useful_util(res, cl.total_gpus, span_s)
            out[p].append(res)
    return out


def useful_util(res, total_gpus: int, t1: float) -> float:
    """GPU-seconds of training progress at solo speed done in [0, t1], per GPU-second of the
    cluster (duration-based jobs: their rate is ideal seconds per second)."""
    work = _work_between(res.events, 0.0, t1)
    gpus = dict(zip(res.jobs.job_id, res.jobs.gpus))
    return sum(gpus[j] * w for j, w in work.items()) / (total_gpus * t1)


# -- the experiment ----------------------------------------------------------------------------
def run(seeds: int = 3, *, cluster_spec: dict = CLUSTER_SPEC, span_s: float = 4 * 3600.0,
        table_models=tuple(TABLE1)) -> ExperimentResult:
    t1 = table1(table_models)
    f9 = figure9()
    runs = cluster_runs(seeds, spec=cluster_spec, span_s=span_s)
    rows = summarise(runs, CLUSTER_KEYS, group="cluster")
    rows += summarise({p: [f9[p]["result"]] for p in ("gandiva", "fifo")}, CLUSTER_KEYS, group="figure9")

    published: list[dict] = []
    for r in t1:
        published.append({"figure": f"Table 1 {r['name']}: packing gain, pair", "published": f"{100 * r['published_gain']:+.0f} %",
                          "ours": f"{100 * r['pair_gain']:+.0f} %"})
        published.append({"figure": f"Table 1 {r['name']}: packing gain, {r['max_k']} copies (max)",
                          "published": f"{100 * r['published_gain']:+.0f} %", "ours": f"{100 * r['max_gain']:+.0f} %"})
        published.append({"figure": f"Table 1 {r['name']}: gandiva_pack on a pair",
                          "published": "kept" if r["published_gain"] > 0 else "undone", "ours": r["verdict"]})
    g9, fifo9 = f9["gandiva"], f9["fifo"]
    late = [j for j in g9["shares"] if j in ("j4", "j5")]
    published += [
        {"figure": "Figure 9: GPU shares of six 1-GPU jobs on 4 GPUs (overload window)", "published": "figure",
         "ours": ", ".join(f"{j} {g9['shares'][j]:.2f}" for j in g9["shares"])},
        {"figure": "Figure 9: aggregate (GPUs of work) gandiva / fifo", "published": "figure",
         "ours": f"{g9['aggregate']:.2f} / {fifo9['aggregate']:.2f}"},
        {"figure": "Figure 9: late jobs' time to first progress (s) gandiva / fifo", "published": "figure",
         "ours": f"{max(g9['ttfp'][j] for j in late):,.0f} / {max(fifo9['ttfp'][j] for j in late):,.0f}"},
    ]

    def m(policy, key):
        return mean_std([r.summary[key] for r in runs[policy]])[0]
    useful = {p: m(p, "useful_gpu_util_overload") for p in CLUSTER_POLICIES}
    eff = {p: m(p, "effective_gpu_util") for p in CLUSTER_POLICIES}
    alloc = {p: m(p, "gpu_util") for p in CLUSTER_POLICIES}
    ttfp = {p: m(p, "mean_ttfp_s") for p in CLUSTER_POLICIES}
    jct = {p: m(p, "mean_jct_s") for p in CLUSTER_POLICIES}
    gain = useful["gandiva"] / useful["fifo"] - 1.0
    published += [
        {"figure": "cluster: GPU utilisation gain over FIFO (ours: useful, under overload)",
         "published": f"+{100 * PUBLISHED_UTIL_GAIN:.0f} % (180 GPUs)", "ours": f"{100 * gain:+.1f} %"},
        {"figure": "cluster: useful GPU utilisation under overload fifo / tiresias / gandiva", "published": "-",
         "ours": " / ".join(f"{100 * useful[p]:.1f} %" for p in CLUSTER_POLICIES)},
        {"figure": "cluster: effective GPU utilisation (makespan) fifo / tiresias / gandiva", "published": "-",
         "ours": " / ".join(f"{100 * eff[p]:.1f} %" for p in CLUSTER_POLICIES)},
        {"figure": "cluster: allocated GPU utilisation fifo / tiresias / gandiva", "published": "-",
         "ours": " / ".join(f"{100 * alloc[p]:.1f} %" for p in CLUSTER_POLICIES)},
        {"figure": "cluster: mean time to first progress (s) fifo / tiresias / gandiva", "published": "-",
         "ours": " / ".join(f"{ttfp[p]:,.0f}" for p in CLUSTER_POLICIES)},
        {"figure": "cluster: mean JCT (s) fifo / tiresias / gandiva", "published": "-",
         "ours": " / ".join(f"{jct[p]:,.0f}" for p in CLUSTER_POLICIES)},
    ]

    sign_ok = [r["name"] for r in t1 if (r["pair_gain"] > 0) != (r["published_gain"] > 0)]
    far = [r["name"] for r in t1
           if abs((1 + r["max_gain"]) - (1 + r["published_gain"])) > 0.10 * (1 + r["published_gain"])]
    wrong = [r["name"] for r in t1 if r["verdict"] != ("kept" if r["published_gain"] > 0 else "undone")]
    checks = [
        Check("Table 1: every pair's packing gain has the published sign", not sign_ok,
              ", ".join(f"{r['name']} {100 * r['pair_gain']:+.0f} %" for r in t1)),
        Check("Table 1: full-pack gains within 10 % of the published throughput ratio", not far,
              ", ".join(f"{r['name']} {100 * r['max_gain']:+.0f} % ({r['max_k']} jobs)" for r in t1)),
        Check("Table 1: packing kept where the published gain is positive, undone elsewhere", not wrong,
              "wrong: " + (", ".join(wrong) or "none")),
        Check("Figure 9: all six jobs progress within a quantum of arriving (FIFO: the late two wait)",
              max(g9["ttfp"].values()) <= 60.0 + 5.0 and min(fifo9["ttfp"][j] for j in late) > 60.0,
              f"gandiva max {max(g9['ttfp'].values()):.1f} s, fifo late jobs "
              f"{min(fifo9['ttfp'][j] for j in late):,.0f} s"),
        Check("Figure 9: time slicing keeps the 4 GPUs busy (switching costs under 5 %)",
              g9["aggregate"] >= 0.95 * 4, f"aggregate {g9['aggregate']:.3f} GPUs of work"),
        Check("cluster: Gandiva's useful GPU utilisation under overload higher than FIFO's",
              useful["gandiva"] > useful["fifo"],
              f"{100 * useful['gandiva']:.1f} % vs {100 * useful['fifo']:.1f} % ({100 * gain:+.1f} %)"),
        Check("cluster: Gandiva's mean time to first progress at most half of FIFO's",
              ttfp["gandiva"] <= 0.5 * ttfp["fifo"], f"{ttfp['gandiva']:,.0f} s vs {ttfp['fifo']:,.0f} s"),
    ]
    return ExperimentResult("seed001-gandiva", "Gandiva's introspective mechanisms (seed 001)", rows, published,
                            checks, results={"cluster": runs, "figure9": {p: [f9[p]["result"]] for p in ("gandiva", "fifo")}},
                            extra={"table1": t1, "figure9_shares": {p: f9[p]["shares"] for p in ("gandiva", "fifo")}})


register_experiment(Experiment("seed001-gandiva", "Gandiva's introspective mechanisms (seed 001)", "seed 001", run,
                               default_seeds=3))
