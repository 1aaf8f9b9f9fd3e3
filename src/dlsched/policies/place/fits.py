"""The fits filter (kube-scheduler's NodeResourcesFit): a node may take a task when its free
vector covers the task's demand on every resource (GPU, CPU, memory, disk, network), the node
is up, and its GPU type is the one the job requires (if any).

    ok[n] = up[n] and all_r(free[n, r] >= demand[r]) and (gpu_type is None or type[n] == gpu_type)
"""
from __future__ import annotations


from dlsched.core.types import amount
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
        return NodeMask(ok, why_not(ctx, job, task, free))


def why_not(ctx, job, task, free) -> str:
    """Why no node takes the task, in the user's terms ("why is my job waiting"): the largest
    free block of a resource no node has enough of, or the resources no node has together."""
    cl = ctx.snap.cluster
    on = ctx.snap.up.copy()
    if job.gpu_type is not None:
        want = cl.gpu_types.index(job.gpu_type) if job.gpu_type in cl.gpu_types else -1
        on &= cl.node_gpu_type == want
    if not on.any():
        return f"no {job.gpu_type} node is up" if job.gpu_type else "no node is up"
    demand = task.vector
    for r in task.dims:
        most = float(free[on, r].max())
        if most < demand[r] - _EPS:
            return (f"needs {amount(r, demand[r], job.gpu_type)} on one node; the largest free block is "
                    f"{max(most, 0.0):g}")
    parts = [amount(r, demand[r], job.gpu_type) for r in task.dims]
    return "no node has " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]) + \
        " free together"
