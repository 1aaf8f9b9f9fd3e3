"""Tetris (Grandl et al., "Multi-resource packing for cluster schedulers", SIGCOMM 2014), as used
in seed 000: place each task on the node whose free resources are best aligned with its demand.

    alignment(task, node) = cos(d, f) = (d . f) / (|d| |f|)
    d_r = demand_r / capacity_{node, r},   f_r = free_{node, r} / capacity_{node, r}

over r in {GPU, CPU, memory, disk, network}; resources a node does not have (capacity 0) are
left out. Both vectors are non-negative, so the score is in [0, 1] (1: the free vector points
the same way as the demand: placing the task leaves the node's remaining resources balanced).

The paper's remaining-work term (prefer jobs with little work left, an SRPT flavour) is the
`remaining_work` order's `weight`, off (0) by default. In the paper it is added to the alignment
of every (task, machine) pair; it is the same for every machine, so it only changes which job
goes first (see dlsched.policies.order.remaining_work).
"""
from __future__ import annotations

import numpy as np

from dlsched.scheduler.framework import ProfileSpec, register, register_profile, Score


@register("score", "tetris", source="seed 000; Grandl et al. SIGCOMM 2014")
class TetrisScorer(Score):
    """Cosine similarity of the task's demand and the node's free vector (both / node capacity)."""
    node_local = True  # a node's score depends on that node alone

    def __init__(self) -> None:
        pass

    def score(self, ctx, job, task, free, nodes) -> np.ndarray:
        inv = ctx.snap.cluster.inv_capacity
        dot = np.zeros(len(nodes))
        dd = np.zeros(len(nodes))
        ff = np.zeros(len(nodes))
        # Column by column (the round's free array is column-major); inv is 0 where a node lacks r.
        for r in range(free.shape[1]):
            ir = inv[nodes, r]
            f = np.clip(free[nodes, r], 0.0, None) * ir
            ff += f * f
            if task.demand[r] > 0:
                d = task.demand[r] * ir
                dd += d * d
                dot += d * f
        with np.errstate(invalid="ignore", divide="ignore"):
            cos = dot / np.sqrt(dd * ff)
        return np.clip(np.nan_to_num(cos, nan=0.0), 0.0, 1.0)


register_profile(ProfileSpec(
    name="tetris", source="seed 000; Grandl et al. SIGCOMM 2014",
    description="multi-resource packing: each task goes to the node whose free vector is best "
                "aligned (cosine) with its demand; later jobs may use what the head cannot",
    order="remaining_work", filters=("fits",), scores=(("tetris", 1.0),), gang=False, blocking=False))
