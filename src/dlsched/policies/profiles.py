"""Baseline profiles built from the core components."""
from dlsched.scheduler.framework import ProfileSpec, register_profile

register_profile(ProfileSpec(
    name="fifo", source="seed 000",
    description="FIFO order + first fit, strict head of line; workers placed one at a time "
                "(a partly placed job holds what it got)",
    order="fifo", filters=("fits",), scores=(("first_fit", 1.0),), gang=False, blocking=True))

register_profile(ProfileSpec(
    name="fifo-gang", source="seed 002 (gang scheduling)",
    description="FIFO order + first fit, all of a job's tasks or none, strict head of line",
    order="fifo", filters=("fits",), scores=(("first_fit", 1.0),), gang=True, blocking=True))

register_profile(ProfileSpec(
    name="fifo-backfill", source="baseline",
    description="FIFO order + first fit, gang, later jobs may start when the head does not fit",
    order="fifo", filters=("fits",), scores=(("first_fit", 1.0),), gang=True, blocking=False))
