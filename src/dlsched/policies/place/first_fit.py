"""First fit (seed 000's FIFO scheduler: "the first node that could accommodate each task"):
every feasible node scores the same, so the framework's tie-break - lowest node id - picks the
first node that fits, in node order."""
from __future__ import annotations

import numpy as np

from dlsched.scheduler.framework import register, Score, Timeless


@register("score", "first_fit", source="seed 000")
class FirstFitScorer(Timeless, Score):
    """Every fitting node scores 1; the lowest node id wins."""
    node_local = True  # a node's score depends on that node alone
    first_fit = True  # lets the framework skip scoring: the first candidate wins

    def __init__(self) -> None:
        pass

    def score(self, ctx, job, task, free, nodes) -> np.ndarray:
        return np.ones(len(nodes))
