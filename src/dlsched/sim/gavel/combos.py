"""The round mechanism's book of combinations (`GavelRounds`): each combination's time received,
deficit and X per GPU type, in arrays indexed by slot, and each type's greedy order.

A slot is given at arrival and never reused, so slot order is insertion order, Gavel's tie
break. The book answers `walk(type)`: the combinations in Gavel's order for that type's greedy
pass, (priority, deficit, X) descending, ties by insertion, without sorting every combination
every round. Between two resets X and the deficits do not change, so neither does the order of
the combinations whose priority is 0 (X = 0 on the type, or no X because they arrived after the
reset): that order is sorted once per reset, and the arrivals since (deficit 0, X 0, the
newest slots) fall between its entries with deficit >= 0 and those below. Only the few
combinations with X != 0 are ranked each round. A combination that cannot run on a type (no
speed) is in none of its lists: the greedy pass would skip it.

Why: Gandiva's pairs. Gavel's continuous sweep at 4.4 jobs/h holds thousands of pairs, and
sorting them all each round took 400 of the cell's 500 s (benchmarks/bench_gavel.py).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

Combo = tuple[str, ...]
_SMALL = 24          # up to this many, a type's lists are also kept and walked as Python lists


class ComboBook:
    def __init__(self, types: Sequence[str], half_round_s: float) -> None:
        self.types = list(types)
        self.half = half_round_s
        k, cap = len(self.types), 256
        self.tsf = np.zeros((cap, k))            # time received since the last reset (+ half a round for singles)
        self.dfc = np.zeros((cap, k))            # deficit
        self.X = np.zeros((cap, k))              # the allocation in force
        self.ok = np.zeros((cap, k), dtype=bool)  # runs on the type (every member has a speed)
        self.alive = np.zeros(cap, dtype=bool)
        self.mem = np.full((cap, 2), -1, dtype=np.int64)   # members' job numbers (-1: none)
        self.combos: list[Combo] = []
        self.slot: dict[Combo, int] = {}
        self.of_job: dict[str, list[int]] = {}
        self.worker_time = [0.0] * k
        self.n = self.live = 0
        self.fresh_from = 0
        self._zero: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0, dtype=np.int64),) * 2 for _ in range(k)]
        self._pos: list[np.ndarray] = [np.zeros(0, dtype=np.int64) for _ in range(k)]
        self._neg: list[np.ndarray] = [np.zeros(0, dtype=np.int64) for _ in range(k)]
        self._ranked: list[tuple[list[int], np.ndarray]] = [([], np.zeros(0, dtype=np.int64)) for _ in range(k)]
        # the same, as lists, where they are short (most rounds at low load: numpy's cost per call
        # is then the round's cost; Gavel-LAS at 0.4 jobs/h, benchmarks/bench_gavel.py)
        self._pos_rows: list[list | None] = [[] for _ in range(k)]
        self._neg_rows: list[list | None] = [[] for _ in range(k)]
        self._zero_list: list[list | None] = [[] for _ in range(k)]

    def __len__(self) -> int:
        return self.live

    def __contains__(self, combo: Combo) -> bool:
        return combo in self.slot

    # -- the set of combinations ------------------------------------------------------------------
    def add(self, combo: Combo, received: float, runs_on: Sequence[bool], members: Sequence[int]) -> None:
        """`members`: the job numbers of `combo`'s jobs (indices into the `taken` array that
        `walk` reads)."""
        if self.n == len(self.alive):
            self._grow(2 * self.n)
        s = self.n
        self.n += 1
        self.live += 1
        self.combos.append(combo)
        self.slot[combo] = s
        self.tsf[s] = received
        self.dfc[s] = 0.0
        self.X[s] = 0.0
        self.ok[s] = runs_on
        self.alive[s] = True
        self.mem[s] = -1
        self.mem[s, : len(members)] = members
        for j in combo:
            self.of_job.setdefault(j, []).append(s)

    def add_many(self, combos: Sequence[Combo], received: float, runs_on: np.ndarray, members: np.ndarray) -> None:
        """`add` for many combinations at once, in order: runs_on (len(combos), types), members
        (len(combos), 2). (One block per arrival: a job's pairs under packing, hundreds at a time
        on Gavel's continuous sweep; benchmarks/bench_gavel.py, gavel-gandiva.)"""
        m = len(combos)
        if not m:
            return
        while self.n + m > len(self.alive):
            self._grow(2 * len(self.alive))
        s0 = self.n
        self.n += m
        self.live += m
        self.combos.extend(combos)
        blk = slice(s0, s0 + m)
        self.tsf[blk] = received
        self.dfc[blk] = 0.0
        self.X[blk] = 0.0
        self.ok[blk] = runs_on
        self.alive[blk] = True
        self.mem[blk] = members
        slot, of_job = self.slot, self.of_job
        for s, combo in enumerate(combos, s0):
            slot[combo] = s
            for j in combo:
                lst = of_job.get(j)
                if lst is None:
                    of_job[j] = [s]
                else:
                    lst.append(s)

    def remove_job(self, job_id: str) -> None:
        for s in self.of_job.pop(job_id, ()):
            if self.alive[s]:
                self.alive[s] = False
                del self.slot[self.combos[s]]
                self.live -= 1

    def _grow(self, cap: int) -> None:
        for name in ("tsf", "dfc", "X", "ok", "alive", "mem"):
            old = getattr(self, name)
            new = np.zeros((cap,) + old.shape[1:], dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def _compact(self) -> None:
        """Drop the dead slots, keeping the order of the live ones."""
        keep = np.flatnonzero(self.alive[: self.n])
        for name in ("tsf", "dfc", "X", "ok", "alive", "mem"):
            arr = getattr(self, name)
            arr[: len(keep)] = arr[keep]
            arr[len(keep): self.n] = -1 if name == "mem" else 0
        self.combos = [self.combos[s] for s in keep.tolist()]
        self.n = len(keep)
        self.slot = {c: s for s, c in enumerate(self.combos)}
        self.of_job = {}
        for s, c in enumerate(self.combos):
            for j in c:
                self.of_job.setdefault(j, []).append(s)

    # -- time received, resets and X --------------------------------------------------------------
    def received(self, combo: Combo, ti: int, seconds: float) -> None:
        s = self.slot.get(combo)
        if s is not None:
            self.tsf[s, ti] += seconds
            self.worker_time[ti] += seconds

    def reset(self, elapsed: float) -> None:
        """Each live combination's deficit grows by X * elapsed - the time it received; every time
        received restarts at half a round."""
        n, a = self.n, self.alive[: self.n]
        received = self.tsf[:n] - self.half
        grown = self.dfc[:n] + self.X[:n] * elapsed - received
        self.dfc[:n] = np.where(a[:, None], grown, self.dfc[:n])
        self.tsf[:n][a] = self.half
        self.worker_time = [self.half * self.live] * len(self.types)

    def set_allocation(self, alloc: Mapping[Combo, Mapping[str, float]]) -> None:
        """X from the policy's answer (combinations it leaves out get 0); each type's lists are
        rebuilt for the rounds until the next reset."""
        if self.n > 1024 and self.n > 2 * self.live:
            self._compact()
        n = self.n
        self.X[:n] = 0.0
        types, slots, rows = self.types, [], []
        for c, row in alloc.items():
            s = self.slot.get(c)
            if s is not None:
                vals = [row.get(t, 0.0) for t in types]
                if any(vals):
                    slots.append(s)
                    rows.append(vals)
        if slots:
            self.X[slots] = rows
        live = self.alive[:n]
        for ti in range(len(self.types)):
            cand = live & self.ok[:n, ti]
            x = self.X[:n, ti]
            self._pos[ti] = np.flatnonzero(cand & (x > 0))
            self._neg[ti] = np.flatnonzero(cand & (x < 0))
            for store, slots in ((self._pos_rows, self._pos[ti]), (self._neg_rows, self._neg[ti])):
                store[ti] = list(zip(slots.tolist(), x[slots].tolist(), self.dfc[slots, ti].tolist())) \
                    if len(slots) <= _SMALL else None
            zero = np.flatnonzero(cand & (x == 0))
            d = self.dfc[zero, ti]
            order = np.lexsort((zero, -d))
            ranked, d = zero[order], d[order]
            split = int(np.count_nonzero(d >= 0))
            self._zero[ti] = (ranked[:split], ranked[split:])
            self._zero_list[ti] = ranked.tolist() if len(ranked) <= _SMALL else None
        self.fresh_from = n

    def _rank(self, slots: np.ndarray, rows: list | None, ti: int) -> np.ndarray | list[int]:
        """Slots with X != 0 by (priority, deficit, X) descending, then slot; priority = X /
        (time received / the type's time), X * 1e9 when nothing was received. `rows`: the same
        slots as (slot, X, deficit) when they are few (the same order, in Python)."""
        wt = self.worker_time[ti]
        if rows is not None:
            alive, tsf, keyed = self.alive, self.tsf, []
            for s, x, d in rows:
                if alive[s]:
                    f = float(tsf[s, ti]) / wt if wt != 0.0 else 0.0
                    keyed.append((-(x / f if f > 0.0 else x * 1e9), -d, -x, s))
            keyed.sort()
            return [k[3] for k in keyed]
        slots = slots[self.alive[slots]]
        if len(slots) == 0:
            return slots
        x = self.X[slots, ti]
        frac = self.tsf[slots, ti] / wt if wt != 0.0 else np.zeros(len(slots))
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(frac > 0.0, x / np.where(frac > 0.0, frac, 1.0), x * 1e9)
        return slots[np.lexsort((slots, -x, -self.dfc[slots, ti], -p))]

    def rank_round(self) -> None:
        """Rank the combinations with X != 0 for this round (their priorities change as time is
        received)."""
        for ti in range(len(self.types)):
            pos = self._rank(self._pos[ti], self._pos_rows[ti], ti)
            neg = self._rank(self._neg[ti], self._neg_rows[ti], ti)
            self._ranked[ti] = (pos if isinstance(pos, list) else pos.tolist(),
                                np.asarray(neg, dtype=np.int64) if isinstance(neg, list) else neg)

    def walk(self, ti: int, positive_only: bool, taken: np.ndarray) -> Iterator[Combo]:
        """Type ti's combinations in Gavel's greedy order; `positive_only` stops after those with
        priority > 0 (FIFO labels). `taken[j]` is True for a job already given GPUs this round
        (the caller keeps it up to date): after the few with priority > 0, the rest are
        filtered by it at once, since most have a member that already runs (Gandiva at 4.4
        jobs/h: 7,700 combinations visited a round, nearly all to be skipped)."""
        combos = self.combos
        pos, neg = self._ranked[ti]
        for s in pos:
            yield combos[s]
        if positive_only:
            return
        head, tail = self._zero[ti]
        if self.fresh_from == self.n and self._zero_list[ti] is not None and len(neg) <= _SMALL:
            alive, mem = self.alive, self.mem      # few: in Python
            for s in self._zero_list[ti] + neg.tolist():
                a, b = mem[s]
                if alive[s] and not taken[a] and (b < 0 or not taken[b]):
                    yield combos[s]
            return
        fresh = np.arange(self.fresh_from, self.n)
        fresh = fresh[self.alive[fresh] & self.ok[fresh, ti]]
        rest = np.concatenate((head, fresh, tail, neg))
        m0, m1 = self.mem[rest, 0], self.mem[rest, 1]
        free = self.alive[rest] & ~taken[m0] & ((m1 < 0) | ~taken[m1])
        for s in rest[free].tolist():
            yield combos[s]
