"""A small simulator run for one tenancy scenario: a cluster of GPUs, a queue tree, jobs that
arrive, and what ran, what waited (and why) and who was preempted (and why), read from the
scheduler's own records and event log."""
from __future__ import annotations

from dataclasses import dataclass

import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.scheduler.context import JobState
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim.backend import SimBackend
from dlsched.tenancy import tree_from_dict
from dlsched.tenancy.engine import Tenancy
from dlsched.workload.schema import job_from_row


def tree(*queues) -> dict:
    """{queues: [...]} from (name, nominal, extra-quota-fields, parent, weight) shorthands."""
    out = []
    for q in queues:
        q = dict(q)
        name = q.pop("name")
        node = {"name": name}
        for k in ("parent", "weight", "priority"):
            if k in q:
                node[k] = q.pop(k)
        if q:
            node["quotas"] = q.get("gpu", {"gpu": q})
        out.append(node)
    return {"queues": out}


def job(jid, queue, gpus, t=0.0, dur=100_000.0, prio=0, workers=1, **kw):
    return job_from_row(dict(job_id=jid, submit_time_s=t, workers=workers, gpus_per_worker=gpus / workers,
                             cpus_per_worker=kw.pop("cpus", 0.5), mem_gb_per_worker=kw.pop("mem", 1.0),
                             duration_s=dur, priority=prio, queue=queue, **kw))


@dataclass
class Outcome:
    sched: Scheduler
    backend: SimBackend

    def state(self, jid) -> JobState:
        return self.sched.jobs[jid].state

    def running(self) -> set[str]:
        return set(self.sched.running)

    def waiting(self) -> set[str]:
        return {r.job_id for r in self.sched.queue}

    def why(self, jid) -> str:
        return self.sched.jobs[jid].why

    def preempted(self) -> dict[str, str]:
        """job -> the reason of its (last) suspension by the tenancy."""
        return {r.job_id: r.detail for r in self.sched.log if r.kind == "suspend" and r.detail}

    def admitted_order(self) -> list[str]:
        """Jobs in the order they were launched or resumed."""
        return [r.job_id for r in self.sched.log if r.kind in ("launch", "resume")]

    def usage(self, queue) -> float:
        return sum(r.held_gpus() for r in self.sched.running.values() if (r.spec.queue or "default") == queue)


def run(queues: dict, jobs: list, *, gpus: int = 16, nodes: int = 1, mode: str = "kueue", settings=None,
        policy: str = "fifo", until: float | None = None, cluster: dict | None = None, finish=()) -> Outcome:
    """Simulate until `until` (default: just after the last arrival). `finish`: (time, job) pairs,
    jobs whose work ends then (their duration is set so)."""
    cl = cluster_from_dict(cluster or {"node_groups": [{"count": nodes, "gpus": gpus // nodes, "gpu_mem_gb": 32,
                                                         "cpus": 64, "mem_gb": 512}]})
    ends = {j: t for t, j in finish}
    jobs = [job_from_row({**_row(j), "duration_s": ends[j.job_id] - j.submit_time_s}) if j.job_id in ends else j
            for j in jobs]
    backend = SimBackend(cl, jobs, restart_delay_s=0.0)
    ten = Tenancy(tree_from_dict(queues), mode, settings)
    ten.check_jobs(jobs)
    sched = Scheduler(build_profile(policy), tenancy=ten)
    horizon = until if until is not None else max(j.submit_time_s for j in jobs) + 1.0
    backend.wake_at(horizon)
    _run_until(sched, backend, horizon)
    return Outcome(sched, backend)


def _row(j) -> dict:
    from dlsched.workload.schema import job_to_row
    return job_to_row(j)


def _run_until(sched, backend, horizon: float) -> None:
    """Scheduler.run's loop, stopped at `horizon` (the jobs run far longer)."""
    class Stop(Exception):
        pass

    poll = backend.poll

    def limited():
        if backend.now() >= horizon:
            raise Stop
        return poll()
    backend.poll = limited
    try:
        sched.run(backend)
    except Stop:
        pass
