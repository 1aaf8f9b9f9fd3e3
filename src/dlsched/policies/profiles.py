"""Baseline profiles built from the core components."""
from dataclasses import replace

from dlsched.scheduler.framework import ProfileSpec, register_profile

register_profile(ProfileSpec(
    name="fifo", source="seed 000",
    description="FIFO order + first fit, strict head of line; workers placed one at a time "
                "(a partly placed job holds what it got)",
    order="fifo", filters=("fits",), scores=(("first_fit", 1.0),), gang=False, blocking=True))

FIFO_GANG = register_profile(ProfileSpec(
    name="fifo-gang", source="seed 002 (gang scheduling)",
    description="FIFO order + first fit, all of a job's tasks or none, strict head of line",
    order="fifo", filters=("fits",), scores=(("first_fit", 1.0),), gang=True, blocking=True))

# `gang`: the name the runtime issue uses (`dlsched server --policy gang`) for fifo-gang.
register_profile(replace(FIFO_GANG, name="gang", description="the same as fifo-gang: " + FIFO_GANG.description))

register_profile(ProfileSpec(
    name="fifo-backfill", source="baseline",
    description="FIFO order + first fit, gang, later jobs may start when the head does not fit",
    order="fifo", filters=("fits",), scores=(("first_fit", 1.0),), gang=True, blocking=False))

register_profile(ProfileSpec(
    name="gandiva", source="Xiao et al., OSDI 2018 (seed 001)",
    description="Gandiva's introspective mode: reactive getNodes placement; under overload jobs "
                "time-slice GPUs (60 s quanta) instead of queueing; light time-sliced jobs are packed "
                "while that beats slicing; time-sliced jobs migrate to freed GPUs and the cluster is "
                "defragmented for multi-GPU jobs; idle GPUs grow jobs that scale; gang",
    order="fifo", filters=("fits",), scores=(("first_fit", 1.0),),
    # before placement, in this order: move time-sliced jobs to freed GPUs and defragment; pack
    # (or unpack) time-sliced jobs; end time-slice turns; shrink grown jobs for waiting ones;
    # place (getNodes, no concurrent over-subscription: time slicing replaces it). After
    # placement: time slicing admits the jobs left waiting, then grow.
    actions=("gandiva_migrate", "gandiva_pack", "gandiva_timeslice", "gandiva_grow"),
    placers=("gandiva_place",),
    gang=True, blocking=False, round_s=60.0,
    params={"gandiva_place": {"oversubscribe": False}}))
