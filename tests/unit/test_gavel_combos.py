"""The round mechanism's book of combinations gives each type's greedy order exactly as a full
sort of every combination by (priority, deficit, X) descending, ties by insertion, would."""
from __future__ import annotations

import random

import numpy as np

from dlsched.sim.gavel.combos import ComboBook

TYPES = ("V100", "P100", "K80")
HALF = 180.0


class Reference:
    """Gavel's dictionaries, sorted in full every round."""

    def __init__(self):
        self.tsf, self.dfc, self.ok, self.seq = {}, {}, {}, {}
        self.alloc, self.wt = {}, {t: 0.0 for t in TYPES}

    def add(self, c, received, ok):
        self.seq[c] = len(self.seq)
        self.tsf[c] = {t: received for t in TYPES}
        self.dfc[c] = {t: 0.0 for t in TYPES}
        self.ok[c] = dict(zip(TYPES, ok))

    def remove_job(self, j):
        for c in [c for c in self.tsf if j in c]:
            del self.tsf[c], self.dfc[c]

    def reset(self, elapsed):
        for t in TYPES:
            self.wt[t] = 0.0
            for c in self.tsf:
                x = self.alloc[c][t] if c in self.alloc else 0.0
                self.dfc[c][t] = self.dfc[c][t] + x * elapsed - (self.tsf[c][t] - HALF)
                self.tsf[c][t] = HALF
                self.wt[t] += HALF

    def received(self, c, t, s):
        if c in self.tsf:
            self.tsf[c][t] += s
            self.wt[t] += s

    def order(self, t, positive_only):
        rows = []
        for c in self.tsf:
            if not self.ok[c][t]:
                continue
            x = self.alloc[c][t] if c in self.alloc else 0.0
            frac = self.tsf[c][t] / self.wt[t] if self.wt[t] != 0.0 else 0.0
            p = 0.0 if x == 0.0 else (x / frac if frac > 0.0 else x * 1e9)
            if positive_only and p <= 0.0:
                continue
            rows.append((-p, -self.dfc[c][t], -x, self.seq[c], c))
        return [r[-1] for r in sorted(rows)]


def test_walk_is_the_full_sort_through_arrivals_departures_resets_and_compaction():
    rng = random.Random(7)
    book, ref = ComboBook(TYPES, HALF), Reference()
    jobs, next_id = [], 0
    for step in range(400):
        if rng.random() < 0.6 or len(jobs) < 3:
            jid = f"j{next_id}"
            next_id += 1
            new = [((jid,), HALF)] + [((o, jid), 0.0) for o in jobs if rng.random() < 0.5]
            jobs.append(jid)
            for c, r in new:
                ok = [rng.random() < 0.9 for _ in TYPES]
                book.add(c, r, ok, [int(j[1:]) for j in c])
                ref.add(c, r, ok)
        if rng.random() < 0.35 and jobs:
            gone = jobs.pop(rng.randrange(len(jobs)))
            book.remove_job(gone)
            ref.remove_job(gone)
        live = list(ref.tsf)
        for c in rng.sample(live, min(len(live), 5)):
            t = rng.randrange(len(TYPES))
            s = rng.choice([360.0, 120.5, 17.25])
            book.received(c, t, s)
            ref.received(c, TYPES[t], s)
        if step % 6 == 0:
            elapsed = rng.choice([1920.0, 2160.0, 2500.5])
            book.reset(elapsed)
            ref.reset(elapsed)
            alloc = {}
            for c in rng.sample(live, len(live) // 3):
                alloc[c] = {t: rng.choice([0.0, 0.0, 0.25, 0.5, 1.0, -1e-12]) for t in TYPES}
            ref.alloc = alloc
            book.set_allocation(alloc)
        book.rank_round()
        taken = np.zeros(next_id, dtype=bool)
        for ti, t in enumerate(TYPES):
            for positive_only in (False, True):
                assert list(book.walk(ti, positive_only, taken)) == ref.order(t, positive_only), (step, t, positive_only)
        # jobs given GPUs before the walk are filtered out, past the combinations with priority > 0
        taken[rng.sample(range(next_id), next_id // 2)] = True
        for ti, t in enumerate(TYPES):
            want = ref.order(t, False)
            head = ref.order(t, True)
            rest = [c for c in want[len(head):] if not any(taken[int(j[1:])] for j in c)]
            assert list(book.walk(ti, False, taken)) == head + rest
    assert len(book) == len(ref.tsf)


def test_compaction_keeps_the_order_and_the_book():
    book = ComboBook(TYPES, HALF)
    for i in range(3000):
        book.add((f"j{i}",), HALF, [True, True, True], [i])
    for i in range(3000):
        if i % 3:
            book.remove_job(f"j{i}")
    book.reset(1920.0)
    book.set_allocation({})
    assert book.n == 1000 and len(book) == 1000
    book.rank_round()
    assert list(book.walk(0, False, np.zeros(3000, dtype=bool))) == [(f"j{i}",) for i in range(0, 3000, 3)]
    book.received(("j3",), 0, 50.0)
    assert book.tsf[book.slot[("j3",)], 0] == HALF + 50.0


def test_a_block_of_pairs_is_added_as_one_by_one():
    """ComboBook.add_many (a new job's pairs under packing) leaves the book as `add` in a loop
    does, growing past its first capacity."""
    rng = random.Random(3)
    one, many = ComboBook(TYPES, HALF), ComboBook(TYPES, HALF)
    for b in (one, many):
        b.add(("j0",), HALF, [True, True, False], [0])
    pairs = [(f"j{i}", f"j{i + 1}") for i in range(300)]
    ok = np.array([[rng.random() < 0.7 for _ in TYPES] for _ in pairs], dtype=bool)
    mem = np.array([(i, i + 1) for i in range(300)], dtype=np.int64)
    for c, row, m in zip(pairs, ok, mem):
        one.add(c, 0.0, list(row), list(m))
    many.add_many(pairs, 0.0, ok, mem)
    assert (one.n, one.live, one.combos, one.slot, one.of_job) == (many.n, many.live, many.combos, many.slot,
                                                                   many.of_job)
    for name in ("tsf", "dfc", "X", "ok", "alive", "mem"):
        assert np.array_equal(getattr(one, name)[: one.n], getattr(many, name)[: many.n]), name
