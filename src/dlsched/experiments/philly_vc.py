"""philly-vc: the Philly trace replayed per virtual cluster (VC), each VC a queue with a quota.

Philly's queueing came from its VCs: each team had a share of the cluster. Replayed as one
tenant (no queues), no job waits under any policy (benchmarks/RESULTS.md, "Every policy on the
whole Philly trace"). Here every VC is a leaf queue (the bundled queue files: nominal = the VC's
published node count x 8 GPUs, HeliosArtifact's philly_vc.csv; see the file's header), under:

    isolated   no borrowing (borrowing_limit 0): Helios's simulator runs one process per VC
    borrowing  a cohort: a VC may borrow what the others leave idle (Kueue's default), and the
               Kueue modes reclaim it when its owner asks

for fifo and tiresias (the `kueue` mode) and for fifo under a fair-share mode (`kueue-fair`),
plus fifo without queues as today's baseline. Per VC: jobs, wait (mean, median, p95), the share
of the delay that was quota (the VC over its share: Philly's "fair-share delay") rather than
placement ("fragmentation delay"), the VC's utilisation of its nominal GPUs and the GPU-hours it
borrowed. The cluster's busy nodes per minute (fifo, borrowing) are compared with the recorded
`active` series of philly_node_sequence.csv (Oct-Dec 2017): mean absolute and relative error and
correlation, reported with no bar yet. No per-VC figure of the ATC'19 paper is typed in: none
could be read (research/tenancy-semantics.md, section 5).
"""
from __future__ import annotations

from pathlib import Path

from dlsched.experiments.base import Check, Experiment, ExperimentResult, register_experiment

CONFIGS = {"isolated": "philly-isolated", "borrowing": "philly"}
RUNS = (("fifo", "fifo", "kueue"), ("tiresias", "tiresias", "kueue"), ("fifo kueue-fair", "fifo", "kueue-fair"))
NAN = float("nan")


def _vc_rows(group: str, res, tree) -> list[dict]:
    q = res.summary.get("queues", {})
    span_h = max(res.summary.get("makespan_s", 0.0), 1.0) / 3600
    rows = []
    for vc, d in sorted(q.items(), key=lambda kv: -kv[1]["jobs"]):
        if not d["jobs"]:
            continue
        delay = d["quota_wait_s"] + d["placement_wait_s"]
        nominal = tree.nodes[vc].quotas["gpu"].nominal if vc in tree.nodes and "gpu" in tree.nodes[vc].quotas else 0
        rows.append({"group": group, "policy": vc, "seeds": 1, "jobs": d["jobs"],
                     "mean_wait_s": d["mean_wait_s"], "median_wait_s": d["median_wait_s"],
                     "p95_wait_s": d["p95_wait_s"],
                     "quota_delay_share": d["quota_wait_s"] / delay if delay > 0 else NAN,
                     "gpu_util": d["gpu_hours"] / (nominal * span_h) if nominal else NAN,
                     "borrowed_gpu_h": d["borrowed_gpu_hours"], "nominal_gpus": nominal,
                     **{f"{k}_std": NAN for k in ("mean_wait_s", "gpu_util")}})
    return rows


def _node_error(res) -> dict:
    """The run's busy nodes per minute against Philly's recorded `active` nodes."""
    from dlsched.workload.node_sequence import busy_nodes_per_minute, compare, load_node_sequence
    data = Path(__file__).resolve().parent.parent / "data" / "philly" / "philly_node_sequence.csv.gz"
    recorded = load_node_sequence(data)
    got = compare(busy_nodes_per_minute(res), recorded, start="2017-10-01", end="2017-12-31 23:59")
    return {k: got[k] for k in ("minutes", "mae", "mean_rel_error", "corr") if k in got} | {
        "simulated_mean": got.get("sim_mean", NAN), "recorded_mean": got.get("recorded_mean", NAN)}


def run(seeds: int = 1, limit: int | None = None) -> ExperimentResult:
    """`limit`: the first N jobs of the trace only (tests); the experiment replays all of it."""
    from dlsched.api import simulate
    from dlsched.tenancy import load_queues
    from dlsched.workload.io import load_workload
    jobs = load_workload("philly")
    if limit is not None:
        jobs = sorted(jobs, key=lambda j: j.submit_time_s)[:limit]
    base = simulate("philly", jobs, "fifo")
    results = {"no queues": {"fifo": [base]}}
    rows = [{"group": "no queues", "policy": "(all)", "seeds": 1, "jobs": len(jobs),
             "mean_wait_s": base.summary["mean_wait_s"], "gpu_util": base.summary["gpu_util"],
             "mean_wait_s_std": NAN, "gpu_util_std": NAN}]
    totals = {}
    for config, qfile in CONFIGS.items():
        tree = load_queues(qfile)
        results[config] = {}
        for name, policy, mode in RUNS:
            res = simulate("philly", jobs, policy, queues=tree, tenancy=mode)
            results[config][name] = [res]
            rows += _vc_rows(f"{config} {name}", res, tree)
            totals[(config, name)] = res.summary
    nodes = _node_error(results["borrowing"]["fifo"][0]) if limit is None else {}
    iso, bor = totals[("isolated", "fifo")], totals[("borrowing", "fifo")]
    quota_iso = sum(d["quota_wait_s"] for d in iso["queues"].values())
    place_iso = sum(d["placement_wait_s"] for d in iso["queues"].values())
    checks = [
        Check("without queues no job waits (today's replay)", base.summary["mean_wait_s"] < 1.0,
              f"mean wait {base.summary['mean_wait_s']:,.1f} s"),
        Check("isolated VCs make jobs wait", iso["mean_wait_s"] > base.summary["mean_wait_s"] + 1.0,
              f"fifo mean wait {iso['mean_wait_s']:,.0f} s"),
        Check("borrowing waits less than isolation (fifo)", bor["mean_wait_s"] <= iso["mean_wait_s"],
              f"{bor['mean_wait_s']:,.0f} s against {iso['mean_wait_s']:,.0f} s"),
        Check("under isolation most delay is quota (fair-share) delay", quota_iso >= place_iso,
              f"quota {quota_iso / 3600:,.0f} job-hours, placement {place_iso / 3600:,.0f}"),
    ]
    def f(key: str, fmt: str) -> str:
        v = nodes.get(key, NAN)
        return "-" if v != v else format(v, fmt)
    published = [{"figure": "busy nodes per minute, Oct-Dec 2017", "recorded (philly_node_sequence)":
                  f("recorded_mean", ",.0f"), "ours (fifo, borrowing)": f("simulated_mean", ",.0f"),
                  "mean abs error": f("mae", ",.0f"), "mean rel error": f("mean_rel_error", ".2f"),
                  "correlation": f("corr", ".2f"), "minutes": f("minutes", ",.0f")}] if nodes else []
    summary = {f"{c} {n}": {k: s[k] for k in ("mean_wait_s", "jain_index", "max_ftf_rho", "unfair_fraction")}
               for (c, n), s in totals.items()}
    return ExperimentResult("philly-vc", "Philly per virtual cluster: quotas, borrowing, waits", rows, published,
                            checks, results=results, extra={"node_sequence": nodes, "runs": summary})


register_experiment(Experiment("philly-vc", "Philly per virtual cluster: quotas, borrowing, waits",
                               "Jeon et al. ATC'19 (trace); HeliosArtifact philly_vc.csv (VC sizes)", run,
                               default_seeds=1))
