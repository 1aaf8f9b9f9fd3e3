"""Remaining-work order: the Tetris paper's (Grandl et al., SIGCOMM 2014) remaining-work term,
which favours jobs with little work left (an SRPT flavour), with a weight.

    key(job) = weight * remaining work    (GPU-seconds; a task without GPUs counts as one)

remaining work = unplaced tasks x duration for bags of tasks; the trace duration (or iteration
count) x GPUs for DL jobs. With weight 0 (the default) every key is equal and the framework's
(submit_time_s, job_id) tie-break makes the order FIFO.
"""
from __future__ import annotations

from dlsched.core.types import GPU
from dlsched.scheduler.framework import Order, register


@register("order", "remaining_work", source="Grandl et al. SIGCOMM 2014 (Tetris remaining-work term)")
class RemainingWorkOrder(Order):
    """Arrival order, biased by `weight` toward jobs with little remaining work."""
    static = False

    def __init__(self, weight: float = 0.0):
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"weight must be in [0, 1], got {weight}")
        self.weight = weight

    def key(self, job, ctx) -> tuple:
        if self.weight == 0.0:
            return ()
        spec = job.spec
        if spec.kind == "tasks":
            work = sum((t.duration_s or 0.0) * max(t.demand[GPU], 1.0) for t in job.unplaced())
        else:
            work = (spec.duration_s or spec.iterations or 0.0) * max(spec.gpus, 1.0)
        return (self.weight * work,)
