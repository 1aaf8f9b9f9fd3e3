"""Most-free-GPUs placement in chunks: Pollux's Tiresias (and Optimus) placement.

Source: Pollux's simulator (petuum/adaptdl, simulator/tiresias.py, `TiresiasPolicy.optimize`):
a job's replicas go, one chunk at a time, to the node with the most free GPUs; the chunk is as
many replicas as that node can take (`num = min(count, needed)`), ties go to the lowest node.

Per task (the framework places a job's tasks one at a time), with the job's reservations of
this round known:

    score(node) = (held(node) + free_gpu(node) / gpu_capacity(node)) / 2      in [0, 1]
    held(node)  = 1 if this job already reserved a task on the node in this round, else 0

so a job keeps filling the node it started on (the chunk) and then moves to the node with the
most free GPUs (its fraction: on identical nodes, the count). Nodes without GPUs score by held
alone. Not node-local (a node's score depends on the job's other tasks), so the framework
rescores every candidate for every task.
"""
from __future__ import annotations

import numpy as np

from dlsched.core.types import GPU
from dlsched.scheduler.framework import register, Score, Timeless


@register("score", "most_free", source="petuum/adaptdl simulator/tiresias.py (Pollux)")
class MostFreeScorer(Timeless, Score):
    """Fill the node the job started on, then the node with the most free GPUs."""
    node_local = False

    def __init__(self) -> None:
        pass

    def score(self, ctx, job, task, free, nodes) -> np.ndarray:
        inv = ctx.snap.cluster.inv_capacity[nodes, GPU]
        frac = np.clip(free[nodes, GPU] * inv, 0.0, 1.0)
        held = {tp.node for tp in ctx.txn.reserved(job.job_id)}
        # 1.0 where this job already reserved a task (a few nodes: one comparison each)
        mine = np.isin(nodes, np.fromiter(held, dtype=np.int64, count=len(held))).astype(np.float64) \
            if held else np.zeros(len(nodes))
        return (mine + frac) / 2.0
