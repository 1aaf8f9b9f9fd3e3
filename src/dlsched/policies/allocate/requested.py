"""The fixed-request allocator: every job gets exactly the workers and PS it asked for."""
from __future__ import annotations

from dlsched.scheduler.framework import Allocate, Timeless, register


@register("allocate", "requested", source="baseline")
class RequestedAllocate(Timeless, Allocate):
    """Each job gets the tasks it requested (no resizing)."""

    def __init__(self) -> None:
        pass

    def allocate(self, jobs, ctx) -> dict:
        return {}
