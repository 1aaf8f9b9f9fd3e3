"""The event heap: entries (time, priority, seq, event).

`priority` orders events at the same time: node changes first, then finishes (so that what they
free is there for the round), then internal rate changes, then arrivals, then ticks. `seq` is a
global counter, so equal (time, priority) pop in push order and a run is deterministic.
"""
from __future__ import annotations

import heapq
from typing import Any

# Priorities at equal time.
P_NODE, P_FINISH, P_RATE, P_ARRIVAL, P_TICK = range(5)


class EventHeap:
    __slots__ = ("_heap", "_seq")

    def __init__(self):
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0

    def push(self, time: float, priority: int, event: Any) -> None:
        heapq.heappush(self._heap, (time, priority, self._seq, event))
        self._seq += 1

    def pop(self) -> tuple[float, int, int, Any]:
        return heapq.heappop(self._heap)

    def peek_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
