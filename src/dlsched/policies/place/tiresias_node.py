"""Tiresias's `yarn` placement scheme (`--semantics tiresias`): a gang per node.

Source: the Tiresias simulator (SymbioticLab/Tiresias, simulator/switch.py, `ms_yarn_alloc_res`,
`try_single_node_alloc`, `try_cross_node_alloc`): with G GPUs per node, a job of n GPUs gets

    n <= G : one node with n free GPUs (the first in node order)
    n >  G : floor(n / G) nodes whose GPUs are all free (the first ones in node order), and,
             when n % G > 0, one more node with n % G free GPUs (the first other one)

or nothing (all or nothing: the job waits). Tiresias's fifo scheduler places with this scheme;
its dlas schedulers count GPUs only (they ignore the scheme).

This filter computes that plan once per job from the free GPUs before the job's own tentative
reservations (so every task of the job sees the same plan) and admits a task only on a node of
the plan that still has room for the job in it. With the `first_fit` scorer the tasks fill the
plan's nodes in node order. A job that already holds tasks (not a gang: partly placed) may only
add tasks on the nodes it uses. Tiresias's CPU and memory checks (6 CPUs and 5 GB per GPU on its
nodes) are left to the `fits` filter and the job's own demands.
"""
from __future__ import annotations

import numpy as np

from dlsched.core.types import GPU
from dlsched.scheduler.framework import Filter, NodeMask, register

_EPS = 1e-9


def node_plan(free_gpus: np.ndarray, cap_gpus: np.ndarray, need: float) -> dict[int, float] | None:
    """Tiresias's yarn plan for a job of `need` GPUs: {node: GPUs}, or None when it cannot be
    placed now. `free_gpus`, `cap_gpus`: per node (down nodes: 0 free)."""
    g = float(cap_gpus.max()) if len(cap_gpus) else 0.0
    if g <= 0 or need <= 0:
        return None
    full = int(need // g) if need > g + _EPS else 0
    rest = need - full * g
    plan: dict[int, float] = {}
    if full:
        whole = np.flatnonzero((cap_gpus >= g - _EPS) & (free_gpus >= cap_gpus - _EPS))
        if len(whole) < full:
            return None
        plan = {int(n): g for n in whole[:full]}
    if rest > _EPS:
        ok = free_gpus >= rest - _EPS
        ok[list(plan)] = False
        cand = np.flatnonzero(ok)
        if not len(cand):
            return None
        plan[int(cand[0])] = rest
    return plan


@register("filter", "tiresias_node", source="SymbioticLab/Tiresias simulator/switch.py (yarn scheme)")
class TiresiasNodeFilter(Filter):
    """A job on one node when it fits a node, else on whole free nodes plus one for the rest."""

    def __init__(self) -> None:
        pass

    def never_fits(self, job, cluster) -> str:
        cap = cluster.capacity[:, GPU]
        need = float(sum(t.demand[GPU] for t in job.tasks))
        if need > _EPS and node_plan(cap.copy(), cap, need) is None:
            return "Tiresias's yarn placement: the job needs more whole nodes than the cluster has"
        return ""

    def filter(self, ctx, job, task, free) -> NodeMask:
        ok = np.zeros(len(free), dtype=bool)
        rec = ctx.jobs.get(job.job_id)
        if rec is not None and rec.placed:
            ok[[tp.node for tp in rec.placed.values()]] = True
            return NodeMask(ok, "Tiresias's yarn placement: the job's other tasks are on another node")
        before = free[:, GPU].astype(float, copy=True)
        used: dict[int, float] = {}
        for tp in ctx.txn.reserved(job.job_id):
            d = job.tasks[tp.task].demand[GPU]
            before[tp.node] += d
            used[tp.node] = used.get(tp.node, 0.0) + d
        up = getattr(ctx.snap, "up", None)
        if up is not None:
            before = np.where(up, before, 0.0)
        need = float(sum(t.demand[GPU] for t in job.tasks))
        plan = node_plan(before, ctx.snap.capacity[:, GPU], need)
        if plan is None:
            return NodeMask(ok, "Tiresias's yarn placement: no node (or set of whole free nodes) holds the job")
        for n, gpus in plan.items():
            ok[n] = gpus - used.get(n, 0.0) >= task.demand[GPU] - _EPS
        return NodeMask(ok, "Tiresias's yarn placement: not one of the job's nodes")
