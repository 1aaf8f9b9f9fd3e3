"""`--semantics gavel`: Gavel's round mechanism (`rounds`) driving Gavel's policies (`policies`),
with results in dlsched's tables (`simulate_gavel`).

The cluster is read as GPUs per type (Gavel has no network, CPUs or nodes beyond GPU counts);
each job's speed is the throughput table's (Gavel's own, bundled, unless another is named) for
its job type (`model`), scale factor (its workers) and GPU type; its work is `iterations` steps.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from dlsched.core.errors import DlschedError
from dlsched.core.types import JobSpec
from dlsched.metrics.result import cluster_nodes
from dlsched.sim.gavel.policies import GAVEL_POLICIES, GavelPolicy, gavel_policy
from dlsched.sim.gavel.rounds import MIN_RESET_S, ROUND_S, GavelRounds, GavelRun

SEMANTICS = ("native", "gavel", "tiresias", "pollux")   # tiresias, pollux: dlsched.sim.tiresias, .pollux


def cluster_gpus(cluster) -> dict[str, int]:
    """GPUs per type of a dlsched Cluster."""
    out: dict[str, int] = {}
    for n in cluster.nodes:
        if n.gpus:
            out[n.gpu_type] = out.get(n.gpu_type, 0) + n.gpus
    return out


def check_jobs(jobs: Sequence[JobSpec], table) -> None:
    """Every job must name a job type of the table and give its work in steps."""
    for j in jobs:
        if j.iterations is None or not j.iterations > 0:
            raise DlschedError(f"job {j.job_id}: --semantics gavel needs each job's work in steps (iterations); "
                               f"it has {'none' if j.iterations is None else j.iterations}")
        if not table.has(j.model):
            raise DlschedError(f"job {j.job_id}: its model {j.model!r} is not a job type of the throughput table "
                               f"{table.name!r}")


class CountFallback:
    """A throughput table whose missing GPU counts run at the largest count below them that it
    has (dlsched's speed model does the same: `speed.table_rate`). Gavel's per-VC Philly traces
    ask, say, 4 GPUs of Recommendation types that Gavel's table measures on 1 GPU only; Gavel's
    own simulator stops with a KeyError on them."""

    def __init__(self, table) -> None:
        self.table, self.name, self.reference = table, table.name, getattr(table, "reference", None)
        self.filled: set[tuple[str, int]] = set()

    def steps_per_s(self, job_type: str, gpus: int, gpu_type: str) -> float | None:
        from dlsched.workload.speed import table_rate
        r = self.table.steps_per_s(job_type, gpus, gpu_type)
        if r is None:
            r = table_rate(self.table, job_type, gpus, gpu_type)
            if r is not None:
                self.filled.add((job_type, gpus))
        return r

    def pair(self, job_type: str, gpus: int, other: str, gpu_type: str):
        return self.table.pair(job_type, gpus, other, gpu_type)

    def has(self, job_type) -> bool:
        return self.table.has(job_type)


def simulate_gavel(cluster, jobs: Sequence[JobSpec], policy: str, table, *, seed: int = 0,
                   round_s: float = ROUND_S, min_reset_s: float = MIN_RESET_S,
                   window: tuple[int, int] | None = None, workload_name: str = "jobs",
                   progress: Callable[[float, int], None] | None = None,
                   more: Callable[[int], Sequence[JobSpec]] | None = None):
    """Run a `gavel-*` policy under Gavel's round mechanism; a SimResult like the native one's.
    `window`: (first, end) positions of the jobs that must finish (Gavel's `jobs_to_complete`);
    the run ends then, and jobs still running are `running` in the table. `more(n)`: the jobs
    after the first n, asked for when a window's run has used every arrival (Gavel's generator
    never stops); without it that is an error."""
    spec = gavel_policy(policy)
    if spec is None:
        raise DlschedError(f"--semantics gavel runs Gavel's policies ({', '.join(GAVEL_POLICIES)}), not {policy!r}")
    check_jobs(jobs, table)
    gpus = cluster_gpus(cluster)
    table = CountFallback(table)
    run = GavelRounds(jobs, gpus, table, spec, seed=seed, round_s=round_s, min_reset_s=min_reset_s,
                      window=window, progress=progress, more=more).run()
    res = to_result(run, policy=policy, cluster_name=cluster.name, workload_name=workload_name,
                    nodes=cluster_nodes(cluster))
    if table.filled:
        res.summary["gpu_counts_filled"] = sorted(f"{t} x{n}" for t, n in table.filled)
    if window is not None:
        ids = {j.job_id for j in jobs[window[0]:window[1]]}
        w = res.jobs[res.jobs.job_id.isin(ids)]
        res.summary["window"] = list(window)
        res.summary["window_mean_jct_s"] = float(w.jct_s.mean()) if len(w) else None
    return res


def to_result(run: GavelRun, *, policy: str, cluster_name: str, workload_name: str, nodes=()):
    import numpy as np
    import pandas as pd

    from dlsched.metrics.result import SimResult, summarize
    nan = float("nan")
    arrived = [j for j in run.jobs if j.arrival <= run.end_s]

    def state(j) -> str:
        if j.finish is not None:
            return "done"
        if j.failed:
            return "failed"
        return "running" if j.first_start is not None else "queued"

    rows = []
    for j in arrived:
        s = j.spec
        fs = nan if j.first_start is None else j.first_start
        fin = nan if j.finish is None else j.finish
        rows.append({
            "job_id": s.job_id, "state": state(j), "submit_s": j.arrival, "first_start_s": fs, "finish_s": fin,
            "wait_s": fs - j.arrival, "starting_s": 0.0, "jct_s": fin - j.arrival, "run_s": fin - fs,
            "gpus": s.gpus, "workers": len(s.tasks), "model": s.model, "user": s.user, "queue": s.queue or "default",
            "priority": s.priority, "preemptions": j.suspends, "migrations": 0,
            "deadline_s": nan if s.deadline_s is None else s.deadline_s,
            "deadline_met": None if s.deadline_s is None else bool(j.finish is not None and j.finish <= s.deadline_s),
            "gpu_s": j.gpu_s, "nic_bytes": 0.0, "cross_rack_bytes": 0.0, "first_progress_s": fs,
            "ttfp_s": fs - j.arrival, "suspends": j.suspends, "resumes": j.suspends,
            "switch_lost_s": 0.0, "switch_lost_gpu_s": 0.0,
            "gpu_type_run": "+".join(sorted(j.types)), "rounds": j.rounds,
            "steps_done": j.done, "steps_total": j.total,
        })
    jobs = pd.DataFrame(rows)
    if not len(jobs):
        jobs = pd.DataFrame(columns=["job_id", "state", "submit_s", "first_start_s", "finish_s", "wait_s", "jct_s",
                                     "deadline_s", "gpu_s", "nic_bytes", "cross_rack_bytes", "ttfp_s",
                                     "switch_lost_gpu_s"])
    total = sum(run.gpus.values())
    r = np.array([x[:5] for x in run.rounds], dtype=float).reshape(-1, 5)
    tl = pd.DataFrame({"time_s": r[:, 0], "allocated_gpus": r[:, 2], "effective_gpus": r[:, 2],
                       "partial_gpus": np.zeros(len(r)), "running_jobs": r[:, 3], "queued_jobs": r[:, 4]})
    rounds = pd.DataFrame({"time_s": r[:, 0], "end_s": r[:, 1], "wall_s": [x[5] for x in run.rounds],
                           "queued_jobs": r[:, 4].astype(int)})
    summary = summarize(jobs, tl, rounds.wall_s.to_numpy(dtype=float), total_gpus=total,
                        effective_gpu_s=float(((r[:, 1] - r[:, 0]) * r[:, 2]).sum()) if len(r) else 0.0,
                        policy=policy, cluster_name=cluster_name, workload_name=workload_name)
    summary.update({"semantics": "gavel", "allocation_resets": run.resets, "lease_extensions": run.lease_extensions,
                    "lease_opportunities": run.lease_opportunities, "rounds": len(run.rounds)})
    return SimResult(policy, cluster_name, workload_name, total, jobs, summary, tl, rounds, [], [], list(nodes))


__all__ = ["GAVEL_POLICIES", "SEMANTICS", "GavelPolicy", "GavelRounds", "check_jobs", "cluster_gpus", "gavel_policy",
           "simulate_gavel", "to_result"]
