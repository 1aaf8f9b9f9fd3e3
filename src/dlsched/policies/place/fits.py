"""The fits filter (kube-scheduler's NodeResourcesFit): a node may take a task when its free
vector covers the task's demand on every resource (GPU, CPU, memory, disk, network), the node
is up, and its GPU type is the one the job requires (if any).

    ok[n] = up[n] and all_r(free[n, r] >= demand[r]) and (gpu_type is None or type[n] == gpu_type)
"""
from __future__ import annotations


from functools import lru_cache

from dlsched.core.types import amount, demand_dims
from dlsched.scheduler.framework import Filter, NodeMask, Timeless, register

_EPS = 1e-9


@register("filter", "fits", source="seed 002 (kube-scheduler fit filter)")
class FitsFilter(Timeless, Filter):
    """The node has enough free GPU, CPU, memory, disk and network for the task."""

    def __init__(self) -> None:
        pass

    def never_fits(self, job, cluster) -> str:
        """A job that asks for a GPU type no node has, a task larger than every node of its
        type, or a DL job (a gang) larger than all of them: it would wait forever (and hold a
        FIFO queue behind it)."""
        mask = cluster.type_mask(job)
        if mask is None:
            return ""
        what = job.gpu_type or " or ".join(job.gpu_types or ())
        if not mask.any():
            have = ", ".join(t for t in cluster.gpu_types if t != "none") or "none"
            return f"no node has {what or 'usable'} GPUs (the cluster has {have})"
        cap = cluster.capacity[mask]
        need = 0.0
        for t in job.tasks:
            v = t.vector
            if not (cap >= v - _EPS).all(axis=1).any():
                return f"a task is larger than any {what} node"
            need = need + v
        if job.kind == "dl" and (need > cap.sum(axis=0) + _EPS).any():
            return f"the job needs more than all the {what} nodes together"
        return ""

    def filter(self, ctx, job, task, free) -> NodeMask:
        # Column by column over the demanded resources only: `free` is column-major in a round.
        # (The same comparisons as free[:, r] >= demand[r] - 1e-9, with the thresholds kept per
        # demand: this runs once per task placed or tried.)
        ok = None
        for r, t in _thresholds(task.demand):
            if ok is None:
                ok = free[:, r] >= t
            else:
                ok &= free[:, r] >= t
        up = ctx.snap.up
        if ok is None:
            ok = up.copy()
        else:
            ok &= up
        mask = ctx.snap.cluster.type_mask(job)
        if mask is not None:
            ok &= mask
        if ok.any():
            return NodeMask(ok)
        return NodeMask(ok, why_not(ctx, job, task, free))


@lru_cache(maxsize=65536)
def _thresholds(demand: tuple[float, ...]) -> tuple[tuple[int, float], ...]:
    """(resource, demand - 1e-9) for each resource the demand asks for."""
    return tuple((r, float(demand[r]) - _EPS) for r in demand_dims(demand))


def why_not(ctx, job, task, free) -> str:
    """Why no node takes the task, in the user's terms ("why is my job waiting"): the largest
    free block of a resource no node has enough of, or the resources no node has together."""
    cl = ctx.snap.cluster
    on = ctx.snap.up.copy()
    mask = cl.type_mask(job)
    if mask is not None:
        on &= mask
    if not on.any():
        what = job.gpu_type or " or ".join(job.gpu_types or ())
        return f"no {what} node is up" if what else "no node is up"
    demand = task.vector
    for r in task.dims:
        most = float(free[on, r].max())
        if most < demand[r] - _EPS:
            return (f"needs {amount(r, demand[r], job.gpu_type)} on one node; the largest free block is "
                    f"{max(most, 0.0):g}")
    parts = [amount(r, demand[r], job.gpu_type) for r in task.dims]
    return "no node has " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]) + \
        " free together"
