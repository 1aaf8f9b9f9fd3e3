"""Which waiting jobs the free GPUs could take at all, counted by class and kept between rounds
(issue "Scale ... deep queues": a round's cost must not grow with the jobs that cannot start).

`Placing._refuse` refuses, without a placement attempt and with `place`'s own words, a job that
holds nothing and that the free GPUs certainly cannot take: a gang of several tasks asking for
more GPUs than are free in all, or (the fits filter alone, no GPU type) a first task larger than
the largest free block. Once a round's queue loop has placed what it can, under a deep queue
every job left is such a job, and the loop used to refuse them one at a time (a lookup each,
but thousands a round). This index keeps, for the jobs of the queue, how many there are of each
class (gang of several tasks or not, GPUs in all, first task by block or not, its GPUs): a few
dozen classes. `none_can_start(total, block)` then says in O(classes) that no job of the queue
(less those decided this round) could start, and the loop stops: the jobs it did not try are
explained with `_refuse`'s words when asked (`Placing.gpu_refusal`). The same decisions, and the
same reasons word for word, as trying every job (tests/unit/test_deep_queue.py); measured with
`python benchmarks/bench_policies.py --deep` (RESULTS.md block `deep-queue`).

A job that holds tasks (a partly placed non-gang job) or that no rule can refuse (no GPU, a GPU
type, a non-gang job under more filters than fits) is of class `None`: the loop does not stop
before the round has tried it. A job is classed lazily, at the first query after it joined the
queue or after a round changed what it holds (`touch`).
"""
from __future__ import annotations

from collections import Counter

_EPS = 1e-9


class RefusalIndex:
    """The queue's jobs counted by refusal class (see the module docstring)."""

    __slots__ = ("gang", "fits_only", "cls", "counts", "new", "must")

    def __init__(self, gang: bool, fits_only: bool) -> None:
        self.gang, self.fits_only = bool(gang), bool(fits_only)
        self.cls: dict[str, tuple | None] = {}     # job id -> its class (classed jobs)
        self.counts: Counter = Counter()           # class -> jobs of the queue in it
        self.new: dict = {}                        # job id -> record, not classed yet
        self.must: set[str] = set()                # the jobs of class None (must be tried)

    def add(self, rec) -> None:
        self.new[rec.job_id] = rec

    def remove(self, rec) -> None:
        if self.new.pop(rec.job_id, None) is not None:
            return
        if rec.job_id in self.cls:
            c = self.cls.pop(rec.job_id)
            self.must.discard(rec.job_id)
            self.counts[c] -= 1
            if not self.counts[c]:
                del self.counts[c]

    def touch(self, rec) -> None:
        """What the job holds changed (a round placed part of it): class it again."""
        if rec.job_id in self.cls:
            self.remove(rec)
            self.add(rec)

    def _class(self, rec, cluster) -> tuple | None:
        if rec.placed or rec.done_tasks:
            return None
        need, first = rec.gpu_need()
        spec = rec.spec
        several = self.gang and spec.is_gang and len(rec.tasks) > 1
        by_block = self.fits_only and first > 0 and cluster.type_mask(spec) is None
        if not several and not by_block:
            return None
        return (several, need, by_block, first)

    def none_can_start(self, cluster, total: float, block: float, decided, tried) -> bool:
        """Whether no job of the queue not in `decided` could start with `total` GPUs free in
        all and `block` on the emptiest node: `_refuse` refuses each of them, or it is one that
        must be tried and the round has tried it already (on at least these GPUs: a round's
        free GPUs only shrink)."""
        if self.new:
            for jid, rec in self.new.items():
                c = self.cls[jid] = self._class(rec, cluster)
                self.counts[c] += 1
                if c is None:
                    self.must.add(jid)
            self.new.clear()
        for jid in self.must:
            if jid not in tried and jid not in decided:
                return False
        less: Counter = Counter()
        if decided:
            cls = self.cls
            for jid in decided:
                if jid in cls:
                    less[cls[jid]] += 1
        for c, n in self.counts.items():
            if c is None or n <= less.get(c, 0):
                continue
            several, need, by_block, first = c
            if not ((several and need > total + _EPS) or (by_block and block < first - _EPS)):
                return False
        return True
