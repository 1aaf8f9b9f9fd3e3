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
from array import array
from dataclasses import dataclass
from typing import Any

from dlsched.core.types import JobSpec
from dlsched.scheduler.eventlog import ColumnSeq, placed_detail

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
class Reshare:
    """The end of a re-share window: the link changes held since the last one are applied
    together (SimBackend.reshare_window_s, dlsched.sim.rates)."""


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


class EngineLog(ColumnSeq):
    """SimBackend's own log, (time, kind, job_id, detail) records, kept in columns: times in an
    array of doubles, kinds as one byte, job ids and details as references (a run writes three
    or more records per job; a list of tuples costs about three times as much). A sequence of
    plain 4-tuples: iteration, `len`, indexing and slicing (a list) read back tuples equal to
    those appended, and it compares equal to any list or tuple of equal records. Times that are
    not floats are kept as they came."""
    __slots__ = ("_t", "_k", "_j", "_d", "_kinds", "_code", "_odd_t")

    def __init__(self, records=()):
        self._t = array("d")
        self._k = bytearray()
        self._j: list = []
        self._d: list = []
        self._kinds: list[str] = []
        self._code: dict[str, int] = {}
        self._odd_t: dict[int, Any] = {}
        for r in records:
            self.append(r)

    def append(self, rec) -> None:
        t, kind, job_id, detail = rec
        code = self._code.get(kind)
        if code is None:
            code = self._new_kind(kind)
        if type(t) is not float:
            self._odd_t[len(self._j)] = t
            t = float("nan")
        self._t.append(t)
        self._k.append(code)
        self._j.append(job_id)
        self._d.append(detail)

    def extend_coded(self, times, which, kinds, job_ids: list, details: list) -> None:
        """Append records in bulk (a compiled run's: dlsched.sim.fastloop): the i-th is
        (times[i], kinds[which[i]], job_ids[i], details[i]), times a numpy array of floats; a
        detail is a string or a take's placements (as `append_take` keeps them)."""
        w, table = self._coded(which, kinds)
        self._t.frombytes(times.astype("float64", copy=False).tobytes())
        self._k.extend(w.translate(table))
        self._j.extend(job_ids)
        self._d.extend(details)

    def append_take(self, t: float, job_id: str, placements: tuple) -> None:
        """Append (t, "take", job_id, "task@node;...") keeping the placements (the decision's
        own tuple, shared with the scheduler's log) rather than the string: it is made when the
        record is read."""
        self.append((t, "take", job_id, placements))

    compact = True     # what dlsched.metrics keeps as it is, rather than copy into a list

    def _record(self, i: int) -> tuple:
        t = self._odd_t[i] if self._odd_t and i in self._odd_t else self._t[i]
        d = self._d[i]
        return (t, self._kinds[self._k[i]], self._j[i], d if type(d) is str else placed_detail(d))

    def columns(self) -> dict:
        """The records as four lists, time_s, kind, job_id and detail, holding what iteration
        reads back (Result.save's events.parquet, without a tuple per record)."""
        if self._odd_t:
            rows = list(self)
            t, k, j, d = (list(c) for c in zip(*rows)) if rows else ([], [], [], [])
        else:
            ks = self._kinds
            t, k, j = self._t.tolist(), [ks[c] for c in self._k], list(self._j)
            d = [x if type(x) is str else placed_detail(x) for x in self._d]
        return {"time_s": t, "kind": k, "job_id": j, "detail": d}

    def __len__(self) -> int:
        return len(self._j)

    def __iter__(self):
        if self._odd_t:
            for i in range(len(self._j)):
                yield self._record(i)
            return
        ks = self._kinds
        yield from zip(self._t, (ks[c] for c in self._k), self._j,
                       (d if type(d) is str else placed_detail(d) for d in self._d))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._record(k) for k in range(*i.indices(len(self._j)))]
        return self._record(self._index(i))

