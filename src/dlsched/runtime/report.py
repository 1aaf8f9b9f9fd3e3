"""The same result for a real run as for a simulation: dlsched.metrics.result.result_from_log over
the runtime's stored event log (`schedlog`), with each job's spec from the store and its
counters measured (dlsched.runtime.progress).

Utilisation samples are derived from the log itself: allocated GPUs change only at a launch,
resume, migrate, resize (take the placements' GPUs), suspend, stop, hold or finish (give them
back). A GPU that several jobs share (packing, over-subscription) counts once: each GPU id
counts the jobs' demands on it, at most 1. On the runtime every placed job is whole (gang) and
trains, so effective GPUs equal allocated ones, and nothing is partly held. Round times come from the log's `round` records.
"""
from __future__ import annotations

import time

from dlsched.core.types import GPU, TaskPlacement
from dlsched.metrics.result import SimResult, result_from_log
from dlsched.runtime.progress import job_stats
from dlsched.runtime.spec import RuntimeJobSpec
from dlsched.scheduler.eventlog import LogRecord

_TAKE = ("launch", "resume", "migrate", "resize")
_GIVE = ("suspend", "stopped", "held", "finish", "cancel")


def _gpus(spec: RuntimeJobSpec, workers: int | None) -> dict[int, float]:
    """GPUs per task index of the job's task list with `workers` workers."""
    tasks = spec.tasks(workers) if workers else spec.tasks()
    return {t.index: float(t.demand[GPU]) for t in tasks}


def result_from_store(store, epoch: float, total_gpus: int, *, policy: str, cluster_name: str = "ray") -> SimResult:
    rows = store.schedlog_all()
    jobs = {j["job_id"]: j for j in store.jobs()}
    specs = {jid: RuntimeJobSpec(**j["spec"]) for jid, j in jobs.items()}
    log, samples = [], []
    held: dict[str, dict] = {}                     # job -> {(node, gpu id) or task: GPUs} it holds now
    queued: set[str] = set()
    for r in rows:
        jid, kind = r["job_id"], r["kind"]
        if jid and jid not in jobs:
            continue
        if kind == "finish" and jobs[jid]["state"] == "cancelled":
            kind = "cancel"        # a cancel ends the job for the scheduler; it did not finish
        pls = tuple(TaskPlacement(int(t), int(n), tuple(int(g) for g in ids)) for t, n, ids in r["placements"])
        spec = specs[jid].to_jobspec(jid, jobs[jid]["submit_time"] - epoch) if kind == "arrival" else None
        log.append(LogRecord(r["time_s"], kind, jid, r["detail"] or "", placements=pls, cost=r["cost"],
                             packed=r["packed"], spec=spec))
        if kind == "arrival":
            queued.add(jid)
        elif kind in _TAKE:
            workers = sum(1 for _ in pls) - specs[jid].ps if kind == "resize" else None
            per = _gpus(specs[jid], workers)
            got: dict = {}
            for tp in pls:
                g = per.get(tp.task, 0.0)
                for gid in tp.gpu_ids:
                    got[(tp.node, gid)] = got.get((tp.node, gid), 0.0) + g / len(tp.gpu_ids)
                if g and not tp.gpu_ids:
                    got[("task", tp.task)] = g
            # a launch or resume adds tasks (a non-gang policy places a job in parts); a migrate
            # or resize replaces the job's placements
            if kind in ("launch", "resume"):
                mine = held.setdefault(jid, {})
                for k, v in got.items():
                    mine[k] = mine.get(k, 0.0) + v
            else:
                held[jid] = got
            queued.discard(jid)
        elif kind in _GIVE:
            held.pop(jid, None)
            if kind in ("suspend", "stopped"):
                queued.add(jid)
            else:
                queued.discard(jid)
        elif kind == "rejected":
            queued.discard(jid)
        else:
            continue
        on: dict = {}
        for jid_, mine in held.items():
            for k, v in mine.items():
                key = (jid_, k) if k[0] == "task" else k
                on[key] = on.get(key, 0.0) + v
        alloc = float(sum(min(v, 1.0) for v in on.values()))
        sample = (r["time_s"], alloc, alloc, 0.0, len(held), len(queued))
        if samples and samples[-1][0] == sample[0]:
            samples[-1] = sample
        else:
            samples.append(sample)
    now = time.time()
    log += [LogRecord(now - epoch, "stats", jid, stats=job_stats(store, jid, epoch, now)) for jid in specs]
    return result_from_log(log, samples, total_gpus=total_gpus, policy=policy,
                           cluster_name=cluster_name, workload_name="runtime")
