"""Carries out Liquid's estimated allocation (`liquid_estimate`, dlsched.policies.allocate): each
waiting job the allocation resizes is placed with its resized tasks by the profile's own engine
(for the Liquid profiles: the `fits` filter and Liquid's best-fit score, so the immediate
strategy of seed 003 on the estimated vector), all or nothing, and launched as a Resize (for a
job never placed, its first start).

Jobs go in queue order; one that does not fit waits (the Liquid profiles are non-blocking, so
later jobs may still start), and the per-task loop never places it with its requested tasks
(it is marked decided, as Optimus's placer does with the jobs of its allocation). In the `liquid`
profile this runs after `liquid_batch`, which places the resized jobs itself when the arrival
rate switches the genetic algorithm on; the rest come here. With an empty allocation (estimate
off) it does nothing.
"""
from __future__ import annotations

from dlsched.policies.place.liquid import SOURCE
from dlsched.scheduler.framework import Place, register


@register("place", "liquid_resize", source=SOURCE)
class LiquidResize(Place):
    """Liquid estimation: place the jobs the allocation resized, best fit, all or nothing."""
    carries_allocation = True

    def __init__(self) -> None:
        pass

    def place(self, ctx) -> None:
        alloc = ctx.allocation
        if not alloc:
            return
        txn = ctx.txn
        for rec in ctx.queue:
            tasks = alloc.get(rec.job_id)
            if tasks is None or rec.job_id in txn.decided:
                continue
            txn.decided.add(rec.job_id)
            for task in tasks:
                node, _ = ctx.choose_node(rec.spec, task)
                if node is None:
                    txn.discard(rec.job_id)
                    break
                txn.reserve(rec.job_id, task, node)
            else:
                txn.commit_resize(rec.job_id, tasks)
