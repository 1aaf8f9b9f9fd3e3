"""Shortest job first (SJF), non-preemptive.

Source: the size-aware baselines of Gu et al., "Tiresias: A GPU Cluster Manager for Distributed
Deep Learning", NSDI 2019 (its evaluation), which know every job's size in advance: like `srtf`, an
ORACLE of job size, not something a real cluster manager can run.

    key(job) = (W,)                  gpu_weighted = True (default): total GPU-service
    key(job) = (W / max(G, 1),)      gpu_weighted = False: run time

W = the job's total work in GPU-seconds, estimated from its JobSpec exactly as `srtf` does
(dlsched.policies.order.srtf.WorkEstimate: duration_s x GPUs, or iterations x isolated iteration
time on a packed placement x GPUs); G = its GPUs. Unlike SRTF the key ignores the service
received, and the profile has no preemption: a job runs to completion once started.
"""
from __future__ import annotations

from dlsched.policies.order.srtf import SizeOrder
from dlsched.scheduler.framework import Order, ProfileSpec, register, register_profile


@register("order", "sjf", source="Gu et al., NSDI 2019 (SJF baseline; size oracle)")
class SjfOrder(SizeOrder, Order):
    """Shortest job first by total work (job sizes known: an oracle); never preempts."""

    def key(self, job, ctx) -> tuple:
        return self.scaled(job, self.work.total(job, ctx.cluster if ctx is not None else None))


register_profile(ProfileSpec(
    name="sjf", source="Gu et al., NSDI 2019 (SJF baseline; knows job sizes)",
    description="Shortest job first by total GPU-service (an oracle of job size), non-preemptive; "
                "gang, first fit; a job that does not fit does not block the others",
    order="sjf", filters=("fits",), scores=(("first_fit", 1.0),), gang=True, blocking=False))
