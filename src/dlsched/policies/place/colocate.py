"""Co-location (seed 002's custom scheduler): all of a job's workers (and parameter servers) on
one server, so that they never communicate over the network; a job waits while no single server
can hold it.

    ok[n] = (nothing of the job placed yet and free[n] >= sum of the job's remaining demands)
            or n is the node the job already uses
"""
from __future__ import annotations

import numpy as np

from dlsched.scheduler.framework import Filter, NodeMask, ProfileSpec, register, register_profile

_EPS = 1e-9


@register("filter", "colocate", source="seed 002 (co-location)")
class ColocateFilter(Filter):
    """Only a node that can hold every remaining task of the job (or the node it already uses)."""

    def __init__(self) -> None:
        pass

    def never_fits(self, job, cluster) -> str:
        need = np.sum([t.vector for t in job.tasks], axis=0)
        if not (cluster.capacity >= need - _EPS).all(axis=1).any():
            return "co-location: no server can ever hold all the job's tasks"
        return ""

    def filter(self, ctx, job, task, free) -> NodeMask:
        rec = ctx.jobs.get(job.job_id)
        used = {tp.node for tp in ctx.txn.reserved(job.job_id)}
        if rec is not None:
            used |= {tp.node for tp in rec.placed.values()}
        if used:
            ok = np.zeros(len(free), dtype=bool)
            ok[list(used)] = True
            return NodeMask(ok, "co-location: the job's other tasks are on another node")
        tasks = rec.unplaced() if rec is not None else list(job.tasks)
        need = np.sum([t.vector for t in tasks], axis=0) if tasks else np.zeros(free.shape[1])
        ok = (free >= need - _EPS).all(axis=1)
        return NodeMask(ok, "co-location: no single node can hold all the job's tasks")


register_profile(ProfileSpec(
    name="co-location", source="seed 002 (co-location)",
    description="all workers of a job on one server (no network traffic); the job waits until a "
                "single server can hold it",
    order="fifo", filters=("fits", "colocate"), scores=(("resource_allocation", 1.0),), gang=True,
    blocking=False, params={"resource_allocation": {"strategy": "most_allocated"}}))
