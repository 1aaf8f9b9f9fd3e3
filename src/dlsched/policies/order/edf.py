"""Earliest deadline first (EDF): the job whose deadline comes first goes first; jobs without a
deadline after every job with one, in arrival order.

    key(job) = (0, deadline_s)     a job with a deadline (absolute, seconds)
    key(job) = (1,)                one without

The framework appends (submit_time_s, job_id). Seed 000 measured the share of jobs that finish
before their deadline as the number of jobs grows (its Figure 3) under FIFO and Gandiva, which
ignore deadlines; `dlsched experiment seed000-deadlines` adds this order to see whether it lifts
that curve. Non-preemptive (a running job keeps its GPUs), gang, and a job that does not fit does
not block later ones (as sjf): the classic list-scheduling form of EDF.
"""
from __future__ import annotations

from dlsched.scheduler.framework import Order, ProfileSpec, Timeless, register, register_profile


@register("order", "edf", source="Liu and Layland, JACM 1973 (EDF); seed 000's deadlines")
class EdfOrder(Timeless, Order):
    """Earliest deadline first; jobs without a deadline last, in arrival order."""
    static = True

    def __init__(self) -> None:
        pass

    def key(self, job, ctx) -> tuple:
        d = job.spec.deadline_s
        return (1,) if d is None else (0, d)


register_profile(ProfileSpec(
    name="edf", source="Liu and Layland, JACM 1973 (EDF); seed 000's deadlines",
    description="Earliest deadline first (jobs without one last, in arrival order), non-preemptive; "
                "gang, first fit; a job that does not fit does not block the others",
    order="edf", filters=("fits",), scores=(("first_fit", 1.0),), gang=True, blocking=False))
