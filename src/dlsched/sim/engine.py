"""The event heap: entries (time, priority, seq, event), and the engine's own event records.

`priority` orders events at the same time: node changes first, then finishes (so that what they
free is there for the round), then internal rate changes, then arrivals, then ticks. `seq` is a
global counter, so equal (time, priority) pop in push order and a run is deterministic. An entry
may also be pushed later with a number taken earlier (`reserve`, `push_seq`): SimBackend feeds the
arrivals one at a time and defers finishes this way, and the pops are the same as if every entry
had been pushed when its number was taken.

The records below are SimBackend's internal events (the Scheduler never sees them; it gets
dlsched.scheduler.events, which SimBackend.poll translates them into). Finish, SaveDone, TaskDone
and RateChange carry the job's version when pushed: a record whose version is no longer the job's is
stale and dropped when popped.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

from dlsched.core.types import JobSpec

# Priorities at equal time.
P_NODE, P_FINISH, P_RATE, P_ARRIVAL, P_TICK = range(5)


@dataclass(frozen=True, slots=True)
class Arrive:
    job: JobSpec


@dataclass(frozen=True, slots=True)
class Finish:
    job_id: str
    version: int


@dataclass(frozen=True, slots=True)
class SaveDone:
    """The job's saving phase is over (dlsched.sim.phases): it finishes."""
    job_id: str
    version: int


@dataclass(frozen=True, slots=True)
class TaskDone:
    job_id: str
    task: int
    version: int


@dataclass(frozen=True, slots=True)
class RateChange:
    """A rate change known in advance: the job's restart (restore from checkpoint) is over."""
    job_id: str
    version: int


@dataclass(frozen=True, slots=True)
class Tick:
    """A periodic round is due (Backend.wake_at)."""


@dataclass(frozen=True, slots=True)
class NodeChange:
    node: int
    up: bool


class EventHeap:
    __slots__ = ("_heap", "_seq")

    def __init__(self):
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0

    def push(self, time: float, priority: int, event: Any) -> None:
        heapq.heappush(self._heap, (time, priority, self._seq, event))
        self._seq += 1

    def reserve(self, n: int = 1) -> int:
        """Take the next n sequence numbers without pushing (the first is returned): an entry
        pushed later with `push_seq` and one of them pops exactly where it would have popped had
        it been pushed now (its key is the same), provided it is in the heap before its key is
        reached. SimBackend keeps the jobs' arrivals and its deferred finishes out of the heap
        this way."""
        seq = self._seq
        self._seq += n
        return seq

    def push_seq(self, time: float, priority: int, seq: int, event: Any) -> None:
        heapq.heappush(self._heap, (time, priority, seq, event))

    def pop(self) -> tuple[float, int, int, Any]:
        return heapq.heappop(self._heap)

    def peek_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
