"""The fits filter (kube-scheduler's NodeResourcesFit): a node may take a task when its free
vector covers the task's demand on every resource (GPU, CPU, memory, disk, network), the node
is up, and its GPU type is the one the job requires (if any).

    ok[n] = up[n] and all_r(free[n, r] >= demand[r]) and (gpu_type is None or type[n] == gpu_type)
"""
from __future__ import annotations


from dlsched.core.types import RESOURCES
from dlsched.scheduler.framework import Filter, NodeMask, Timeless, register

_EPS = 1e-9


@register("filter", "fits", source="seed 002 (kube-scheduler fit filter)")
class FitsFilter(Timeless, Filter):
    """The node has enough free GPU, CPU, memory, disk and network for the task."""

    def __init__(self) -> None:
        pass

    def filter(self, ctx, job, task, free) -> NodeMask:
        demand = task.vector
        # Column by column over the demanded resources only: `free` is column-major in a round.
        ok = ctx.snap.up.copy()
        for r in task.dims:
            ok &= free[:, r] >= demand[r] - _EPS
        if job.gpu_type is not None:
            cl = ctx.snap.cluster
            want = cl.gpu_types.index(job.gpu_type) if job.gpu_type in cl.gpu_types else -1
            ok &= cl.node_gpu_type == want
        if ok.any():
            return NodeMask(ok)
        short = [RESOURCES[r] for r in range(len(RESOURCES)) if not (free[:, r] >= demand[r] - _EPS).any()]
        reason = ("insufficient " + ", ".join(short)) if short else "no single node has every resource free"
        if job.gpu_type is not None:
            reason += f" (GPU type {job.gpu_type})"
        return NodeMask(ok, reason)
