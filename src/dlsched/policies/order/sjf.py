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

from dlsched.policies.order.srtf import WorkEstimate
from dlsched.scheduler.framework import ProfileSpec, register, register_profile


@register("order", "sjf", source="Gu et al., NSDI 2019 (SJF baseline; size oracle)")
class SjfOrder:
    """Shortest job first by total work (job sizes known: an oracle); never preempts."""
    static = False   # the key needs the round's cluster (the speed model), so it is keyed per round

    def __init__(self, gpu_weighted: bool = True) -> None:
        self.gpu_weighted = bool(gpu_weighted)
        self.work = WorkEstimate()

    def key(self, job, ctx) -> tuple:
        w = self.work.total(job, ctx.cluster if ctx is not None else None)
        if not self.gpu_weighted:
            w /= max(job.spec.gpus, 1.0)
        return (w,)


register_profile(ProfileSpec(
    name="sjf", source="Gu et al., NSDI 2019 (SJF baseline; knows job sizes)",
    description="Shortest job first by total GPU-service (an oracle of job size), non-preemptive; "
                "gang, first fit; a job that does not fit does not block the others",
    order="sjf", filters=("fits",), scores=(("first_fit", 1.0),), gang=True, blocking=False))
