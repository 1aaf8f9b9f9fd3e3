"""The runtime's wake-up times: the rounds the Scheduler asked for (`Backend.wake_at`).

A wake is handed out as a RoundTick only once the batch's own time has reached it (`due(now)`,
`now` being the time the batch's events carry). The Scheduler tells its periodic tick from a
component's wake by the event's time (`RoundTick.time >= _next_tick`), so a tick handed out
early, stamped with a time before its own, reads as a component's wake: the periodic tick is
then never armed again and the server runs no periodic round until its policy's next event
(the restarted server that ran no round for 30 s, tests/runtime/test_runtime_hardening.py).
Scheduler thread only.
"""
from __future__ import annotations

import heapq


class Wakes:
    def __init__(self) -> None:
        self._heap: list[float] = []
        self._set: set[float] = set()

    def add(self, t: float) -> bool:
        """Ask for a round at `t`; False when one is already asked for then."""
        if t in self._set:
            return False
        self._set.add(t)
        heapq.heappush(self._heap, t)
        return True

    def __len__(self) -> int:
        return len(self._heap)

    def timeout(self, now: float, cap: float) -> float:
        """How long a poll may block at `now`: `cap`, or less where a wake comes sooner."""
        return max(0.0, min(cap, self._heap[0] - now)) if self._heap else cap

    def due(self, now: float) -> int:
        """Take the wakes at or before `now` (the batch's time); how many there were."""
        n = 0
        while self._heap and self._heap[0] <= now:
            self._set.discard(heapq.heappop(self._heap))
            n += 1
        return n
