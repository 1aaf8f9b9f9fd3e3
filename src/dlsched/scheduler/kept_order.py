"""The waiting queue in the order's order, kept from one round to the next (issue "Scale ... deep
queues": a round's cost must not grow with the jobs that cannot start).

An order that is not static (its keys need the round: Tiresias's attained service) was keyed
and sorted whole every round: under a deep queue, thousands of key() calls and a sort per round
for jobs whose keys had not changed. An order may declare `waiting_keys_kept` (true): the key of
a waiting job that holds nothing does not change while it waits (Tiresias without its
starvation guard: a job's queue moves only with the service it attains, and a job that holds no
GPU attains none). Then a job is keyed once, when it joins the queue, with the round's context,
and kept in a sorted list; a job that holds tasks while it waits (a gang placed in part) is
keyed again every round. The same keys, so the same order, as keying every job every round:
tests/unit/test_deep_queue.py runs both and compares the event logs;
`python benchmarks/bench_policies.py --deep` measures it (RESULTS.md block `deep-queue`).
"""
from __future__ import annotations

from bisect import bisect_left, insort
from itertools import chain
from operator import attrgetter


def _key(rec):
    return rec.key


_PLACED = attrgetter("placed")


class KeptOrder:
    """The queue's keyed records in key order (`sorted`), and those not yet keyed (`new`)."""

    __slots__ = ("order", "sorted", "new", "kept", "note")

    def __init__(self, order) -> None:
        self.order = order
        # told each round's context, which may key nobody (SrtfOrder.quiet_until reads its queue)
        self.note = getattr(order, "note_round", None)
        self.sorted: list = []
        self.new: dict = {}          # job_id -> record, joined the queue since the last round
        self.kept: set = set()       # job ids in `sorted`

    def add(self, rec) -> None:
        self.new[rec.job_id] = rec

    def remove(self, rec) -> None:
        if self.new.pop(rec.job_id, None) is not None:
            return
        if rec.job_id in self.kept:
            self.kept.discard(rec.job_id)
            self._drop(rec)

    def _drop(self, rec) -> None:
        s = self.sorted
        i = bisect_left(s, rec.key, key=_key)
        if i < len(s) and s[i] is rec:
            del s[i]
        else:
            s.remove(rec)

    def ordered(self, ctx) -> list:
        """The waiting jobs in key order for this round: the new ones and those holding tasks
        keyed now (key + (submit_time_s, job_id), as the round keys them), the others as kept."""
        key = self.order.key
        if self.note is not None:
            self.note(ctx)
        s, kept = self.sorted, self.kept
        moved = list(filter(_PLACED, s))          # a partial gang attains service as it waits
        for r in moved:
            self._drop(r)
        for r in chain(self.new.values(), moved):
            r.key = (*key(r, ctx), r.submit_time_s, r.job_id)
            insort(s, r, key=_key)
            kept.add(r.job_id)
        self.new.clear()
        return list(s)
