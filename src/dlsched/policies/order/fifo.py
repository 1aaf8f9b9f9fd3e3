"""FIFO order (seed 000's baseline): jobs in order of arrival.

key(job) = () -- the framework appends (submit_time_s, job_id), which is exactly FIFO."""
from __future__ import annotations

from dlsched.scheduler.framework import Order, Timeless, register


@register("order", "fifo", source="seed 000 (FIFO baseline)")
class FifoOrder(Timeless, Order):
    """First in, first out: earliest submission first."""
    static = True

    def __init__(self) -> None:
        pass

    def key(self, job, ctx) -> tuple:
        return ()
