"""Gavel's round mechanism (`--semantics gavel`): `Scheduler.simulate` of
stanford-futuredata/gavel (`scheduler/scheduler.py`), written from its rules, not its code.

- **Rounds.** Every job dispatched in a round runs `min(int(T * round_s), R)` steps (T its
  steps/s on the round's type, R its remaining steps) and takes steps / T seconds; the round ends
  when its last job does. Completions and arrivals are handled only at round ends: a job that
  arrives mid-round waits for the round to end. With nothing running, time jumps to the next
  arrival. There is no restart cost.
- **Allocation.** The policy's X[combination][type] is recomputed only when the job set changed
  (an arrival, a completion, a failed micro-task) **and** `min_reset_s` (1920 s) have passed since
  the last reset, or no reset happened at a time > 0 yet. A job that arrived since then has no
  X: it may take a slot in the greedy pass, but is not dispatched, and that slot idles.
- **Priorities.** At a reset each combination's deficit grows by X * (time since the last
  reset) minus the time it received, and every time received restarts at round_s / 2 (180 s).
  Per type: fraction = the combination's time / the type's time; priority = X / fraction (X *
  1e9 with fraction 0; 0 with X = 0, T = 0 or no X).
- **Greedy pass.** Types V100, P100, K80 (then any others by name), shuffled each round by a
  `random.Random(seed + 5)` unless the policy's label holds `Perf` or `Packing`; per type the
  combinations by (priority, deficit, X) descending; each takes s GPUs of the type if no member
  already runs, T > 0 and s fit (FIFO labels also skip priority 0).
- **Leases.** A job keeps its previous GPUs when it stays on their type and they are free (Gavel's
  lease extension); placement is by decreasing scale factor, otherwise lowest GPU ids first.
- **Failures.** A micro-task of 0 steps fails; after 5 failures in a row the job is dropped.
- **JCT** = the end of the job's last micro-task - its arrival.

Combinations are singles, and with a packing policy every pair of active jobs of equal scale
factor (Gavel's `_populate_job_combination_metadata`), pairs running at the table's pair speeds.
"""
from __future__ import annotations

import random
import time as _time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dlsched.core.errors import DlschedError
from dlsched.core.types import JobSpec
from dlsched.policies.hetero.common import HeteroJob
from dlsched.sim.gavel.combos import ComboBook
from dlsched.sim.gavel.policies import Combo, GavelPolicy

ROUND_S = 360.0
MIN_RESET_S = 1920.0
MAX_FAILED_ATTEMPTS = 5
GAVEL_TYPE_ORDER = ("V100", "P100", "K80")


@dataclass(eq=False)
class _Job:
    spec: JobSpec
    idx: int
    job_type: str
    sf: int
    total: float
    arrival: float
    weight: float
    done: float = 0.0
    first_start: float | None = None
    last_ts: float | None = None
    finish: float | None = None
    failures: int = 0
    failed: bool = False
    rounds: int = 0
    suspends: int = 0
    gpu_s: float = 0.0
    types: dict = field(default_factory=dict)       # GPU type -> seconds run on it
    v: dict = field(default_factory=dict)           # GPU type -> steps/s alone (0: cannot run there)
    hetero: dict = field(default_factory=dict)      # the HeteroJob fields that do not change (_hetero_jobs)

    @property
    def remaining(self) -> float:
        return self.total - self.done


@dataclass
class GavelRun:
    """What one run leaves: the jobs, a row per round and the counters."""
    jobs: list[_Job]
    rounds: list[tuple]          # (start_s, end_s, busy GPUs, running jobs, queued jobs, wall_s)
    gpus: dict[str, int]
    resets: int = 0
    lease_extensions: int = 0
    lease_opportunities: int = 0
    end_s: float = 0.0


def _type_order(types: Sequence[str]) -> list[str]:
    known = [t for t in GAVEL_TYPE_ORDER if t in types]
    return known + sorted(t for t in types if t not in GAVEL_TYPE_ORDER)


class GavelRounds:
    """One run of the round mechanism over `jobs` (arrival order) on `gpus` per type."""

    def __init__(self, jobs: Sequence[JobSpec], gpus: dict[str, int], table, policy: GavelPolicy, *, seed: int = 0,
                 round_s: float = ROUND_S, min_reset_s: float = MIN_RESET_S,
                 window: tuple[int, int] | None = None, progress: Callable[[float, int], None] | None = None,
                 more: Callable[[int], Sequence[JobSpec]] | None = None):
        self.table, self.policy, self.round_s, self.min_reset_s = table, policy, round_s, min_reset_s
        self.gpus = {t: n for t, n in gpus.items() if n > 0}
        self.order = _type_order(list(self.gpus))
        self.alloc_fn = policy.make(seed)
        self.shuffler = random.Random(seed + 5)
        self.window, self.progress, self.more = window, progress, more
        self.queue = [self._job(s, i) for i, s in enumerate(jobs)]
        for a, b in zip(self.queue, self.queue[1:]):
            if b.arrival < a.arrival:
                raise DlschedError(f"job {b.spec.job_id}: arrivals must not decrease (Gavel's traces are in arrival order)")
        self._speed: dict[tuple, tuple[float, ...]] = {}
        self._pair_ok: dict[tuple, list[bool]] = {}   # (older type, newer type, sf) -> runs on each type, paired
        self._check(self.queue)
        # state of the mechanism (names as in Gavel's Scheduler)
        self.active: dict[str, _Job] = {}
        self.book = ComboBook(self.order, round_s / 2.0)     # time received, deficits, X per combination
        self.taken = np.zeros(len(self.queue) + 1, dtype=bool)  # by job number: given GPUs this round
        self.type_index = {t: i for i, t in enumerate(self.order)}
        self.allocation: dict[Combo, dict[str, float]] = {}
        self.need_update = False
        self.last_reset = 0.0
        self.now = 0.0
        self.assignment: dict[Combo, tuple[str, tuple[int, ...]]] = {}

    @staticmethod
    def _job(s: JobSpec, i: int) -> _Job:
        return _Job(s, i, s.model, len(s.tasks), float(s.iterations), float(s.submit_time_s), float(s.priority or 1))

    def _check(self, jobs: list[_Job]) -> None:
        for j in jobs:
            if not self.table.has(j.job_type) or not j.total > 0:
                raise DlschedError(f"job {j.spec.job_id}: needs a job type of the throughput table and its work in "
                                   f"steps (model {j.job_type!r}, iterations {j.spec.iterations!r})")
            if not any(n >= j.sf and (self.table.steps_per_s(j.job_type, j.sf, t) or 0.0) > 0
                       for t, n in self.gpus.items()):
                raise DlschedError(f"job {j.spec.job_id} ({j.job_type}, {j.sf} GPUs) can run on no GPU type of this "
                                   f"cluster ({', '.join(f'{n} {t}' for t, n in self.gpus.items())}): the throughput "
                                   f"table {getattr(self.table, 'name', '')!r} has no speed for it on a type with "
                                   f"{j.sf} GPUs")

    def _refill(self, all_jobs: list, pending: list) -> None:
        """With a window, arrivals must go on while it runs (Gavel's generator never stops): take
        the jobs after the last one from `more`, or stop with an error without it."""
        new = list(self.more(len(all_jobs))) if self.more is not None else []
        if not new:
            raise DlschedError(f"the workload ran out of jobs before jobs {self.window[0]} to "
                               f"{self.window[1] - 1} finished: generate more jobs")
        add = [self._job(s, len(all_jobs) + k) for k, s in enumerate(new)]
        self._check(add)
        if add[0].arrival < all_jobs[-1].arrival:
            raise DlschedError(f"job {add[0].spec.job_id}: arrivals must not decrease")
        all_jobs.extend(add)
        pending[:0] = list(reversed(add))

    # -- speeds ---------------------------------------------------------------------------------
    def speed(self, combo: Combo, t: str) -> tuple[float, ...]:
        """Steps/s of each member of `combo` on type t (0 where the table has none)."""
        key = (tuple(self.active[j].job_type for j in combo), self.active[combo[0]].sf, t)
        v = self._speed.get(key)
        if v is None:
            jt, sf = key[0], key[1]
            if len(combo) == 1:
                v = (self.table.steps_per_s(jt[0], sf, t) or 0.0,)
            else:
                v = tuple(self.table.pair(jt[0], sf, jt[1], t) or (0.0, 0.0))
            self._speed[key] = v
        return v

    # -- the job set ----------------------------------------------------------------------------
    def _add(self, job: _Job) -> None:
        jid = job.spec.job_id
        half = self.round_s / 2.0
        self.active[jid] = job
        job.v = {t: self.speed((jid,), t)[0] for t in self.order}
        job.hetero = vars(HeteroJob(jid, job.job_type, job.sf, job.weight, entity=job.spec.user))   # checked here
        self.book.add((jid,), half, [job.v[t] > 0.0 for t in self.order], [job.idx])
        if self.policy.packing:
            # every pair with an older job of its scale factor (the older job first, as Gavel
            # orders ids), whose types are those where both have a pair speed: one row per
            # pair of job types, the block added at once (ComboBook.add_many)
            pairs, rows, mem, ok_of = [], [], [], self._pair_ok
            for other in self.active.values():
                if other is not job and other.sf == job.sf:
                    c = (other.spec.job_id, jid)
                    k = (other.job_type, job.job_type, job.sf)
                    ok = ok_of.get(k)
                    if ok is None:
                        ok = ok_of[k] = [min(self.speed(c, t)) > 0.0 for t in self.order]
                    pairs.append(c)
                    rows.append(ok)
                    mem.append((other.idx, job.idx))
            if pairs:
                self.book.add_many(pairs, 0.0, np.array(rows, dtype=bool), np.array(mem, dtype=np.int64))
        if job.idx >= len(self.taken):
            self.taken = np.zeros(2 * job.idx + 1, dtype=bool)
        self.need_update = True

    def _remove(self, jid: str) -> None:
        del self.active[jid]
        self.book.remove_job(jid)
        self.need_update = True

    # -- allocation and priorities --------------------------------------------------------------
    def _hetero_jobs(self) -> list[HeteroJob]:
        """The active jobs as the policy sees them, new at every reset (a policy may keep them).
        Past a knee thousands are active at each of thousands of resets, and the dataclass's
        own constructor was a third of the cell (gavel-fifo at 6.0 jobs/h, sampled with py-spy;
        benchmarks/bench_gavel.py): each job's constant fields were checked by one HeteroJob
        made at its arrival (`_add`), so the rest are made from that one's fields, with the
        two that change set to values that are >= 0 by construction."""
        out, now, make = [], self.now, HeteroJob.__new__
        for j in self.active.values():
            h = make(HeteroJob)
            fields = dict(j.hetero)
            fields["remaining_steps"] = j.total - j.done if j.done < j.total else 0.0
            fields["time_since_arrival_s"] = now - j.arrival if now > j.arrival else 0.0
            deadline = j.spec.deadline_s
            if deadline is not None:
                fields["deadline_in_s"] = deadline - now if deadline > now else None
            object.__setattr__(h, "__dict__", fields)
            out.append(h)
        return out

    def _update_priorities(self) -> float:
        """At a due reset: deficits, then the policy's new X. Every round: the ranks of the
        combinations with X != 0 (dlsched.sim.gavel.combos)."""
        wall = 0.0
        due = self.now - self.last_reset >= self.min_reset_s or self.last_reset == 0
        if self.need_update and due:
            self.book.reset(self.now - self.last_reset)
            self.last_reset = self.now
            t0 = _time.perf_counter()
            jobs = self._hetero_jobs()
            alloc = self.alloc_fn(jobs, dict(self.gpus), self.table, self.now)
            wall = _time.perf_counter() - t0
            # the policy's answer as it is (ComboBook reads a missing type as 0); combinations of
            # a job that has left (a policy's state may name one) are dropped
            active = self.active
            if any(j not in active for c in alloc for j in c):
                alloc = {c: row for c, row in alloc.items() if all(j in active for j in c)}
            self.allocation = alloc
            self.book.set_allocation(alloc)
            self.need_update = False
            self.resets += 1
        self.book.rank_round()
        return wall

    # -- one round ------------------------------------------------------------------------------
    def _greedy(self) -> dict[str, list[tuple[Combo, int]]]:
        order = list(self.order)
        if self.policy.shuffles_types:
            self.shuffler.shuffle(order)
        left = dict(self.gpus)
        taken = self.taken
        taken[:] = False
        active = self.active
        out: dict[str, list[tuple[Combo, int]]] = {t: [] for t in order}
        for t in order:
            if left[t] == 0:
                continue
            for c in self.book.walk(self.type_index[t], self.policy.fifo, taken):
                members = [active[j] for j in c]
                if any(taken[m.idx] for m in members):
                    continue
                sf = members[0].sf
                if sf > left[t]:
                    continue
                left[t] -= sf
                for m in members:
                    taken[m.idx] = True
                out[t].append((c, sf))
                if left[t] == 0:
                    break
        return out

    def _place(self, chosen: dict[str, list[tuple[Combo, int]]]) -> dict[Combo, tuple[str, tuple[int, ...]]]:
        new: dict[Combo, tuple[str, tuple[int, ...]]] = {}
        for t, combos in chosen.items():
            combos = sorted(combos, key=lambda x: x[1], reverse=True)
            used: set[int] = set()
            free = iter(range(self.gpus[t]))
            for sf in sorted({s for _, s in combos}, reverse=True):
                for c, s in combos:
                    prev = self.assignment.get(c)
                    if s == sf and prev is not None and prev[0] == t and not used.intersection(prev[1]):
                        new[c] = prev
                        used.update(prev[1])
                for c, s in combos:
                    if s != sf or c in new or c not in self.allocation:
                        continue
                    ids = []
                    for g in free:
                        if g not in used:
                            ids.append(g)
                            used.add(g)
                            if len(ids) == s:
                                break
                    new[c] = (t, tuple(ids))
        for c, (t, ids) in new.items():
            if c in self.assignment:
                self.lease_opportunities += 1
                self.lease_extensions += self.assignment[c] == (t, ids)
        return new

    def run(self) -> GavelRun:
        self.resets = self.lease_extensions = self.lease_opportunities = 0
        all_jobs = list(self.queue)
        pending = list(reversed(self.queue))           # pop() takes the next arrival
        want = None
        if self.window is not None:
            lo, hi = self.window
            want = {j.spec.job_id for j in all_jobs[lo:hi]}
        rounds: list[tuple] = []
        running: list[tuple[float, Combo, str, list[int]]] = []
        round_start, round_end = 0.0, None
        stuck = 0                                      # rounds in a row with nothing to run or to wait for
        ran_last: set[str] = set()
        if pending:
            self.now = pending[-1].arrival
        while True:
            if want is not None:
                if not want:
                    break
                if not pending:
                    self._refill(all_jobs, pending)
            elif not pending and not self.active and not running:
                break
            if running:
                top = max(r[0] for r in running)
                if round_end is not None:
                    round_start = round_end
                round_end = top
                self.now = top
            elif pending:
                self.now = max(self.now, pending[-1].arrival)
            else:
                self.last_reset = 0.0                  # Gavel: a trace with nothing left to arrive
                stuck += 1
            for fin, c, t, steps in sorted(running, key=lambda r: (-r[0], r[1])):
                self._complete(c, t, steps, fin, round_start, want)
            running = []
            while pending and pending[-1].arrival <= self.now:
                self._add(pending.pop())
            wall = self._update_priorities()
            chosen = self._greedy()
            self.assignment = self._place(chosen)
            busy = 0
            now, active, round_s = self.now, self.active, self.round_s
            for c, (t, ids) in self.assignment.items():
                speeds = (active[c[0]].v[t],) if len(c) == 1 else self.speed(c, t)
                steps, end = [], now
                for jid, v in zip(c, speeds):
                    job = active[jid]
                    n = min(int(v * round_s), job.total - job.done)
                    steps.append(n)
                    end = max(end, now + n / v)
                    job.last_ts = now
                    if job.first_start is None:
                        job.first_start = now
                running.append((end, c, t, steps))
                busy += len(ids)
            on_now = {j for c in self.assignment for j in c}
            for jid in ran_last - on_now:                # suspended: ran in the last round, not in this one
                if jid in active:
                    active[jid].suspends += 1
            ran_last = on_now
            if running:
                stuck = 0
            elif stuck > 1:
                break                                  # what is left can never run (checked up front)
            rounds.append((self.now, max([r[0] for r in running], default=self.now), busy, len(self.assignment),
                           len(self.active) - sum(len(c) for c in self.assignment), wall))
            if self.progress is not None:
                self.progress(self.now, len(all_jobs) - len(pending) - len(self.active))
        return GavelRun(all_jobs, rounds, dict(self.gpus), self.resets, self.lease_extensions,
                        self.lease_opportunities, self.now)

    def _complete(self, c: Combo, t: str, steps: list, fin: float, round_start: float, want) -> None:
        active = self.active
        elapsed = fin - round_start
        if len(c) == 1 and elapsed > 0 and steps[0] > 0:
            # a job alone that made progress, written out (once per job per round, most of a
            # round's work under Gavel's rounds; benchmarks/bench_gavel.py): the loop below
            m = active.get(c[0])
            if m is None:
                return
            m.failures = 0
            m.done += steps[0]
            m.rounds += 1
            m.last_ts = fin
            types = m.types
            types[t] = types.get(t, 0.0) + elapsed
            m.gpu_s += elapsed * m.sf
            self.book.received(c, self.type_index[t], elapsed)
            if m.done >= m.total:
                m.finish = fin
                self._remove(c[0])
                if want is not None:
                    want.discard(c[0])
            return
        members = [active.get(j) for j in c]
        if all(m is None for m in members):
            return
        if elapsed <= 0 or any(n <= 0 for m, n in zip(members, steps) if m is not None):
            self.need_update = True
            if len(c) == 1:
                job = members[0]
                job.failures += 1
                if job.failures >= MAX_FAILED_ATTEMPTS:
                    job.failed = True
                    self._remove(job.spec.job_id)
                    if want is not None:
                        want.discard(job.spec.job_id)
            return
        done = []
        for m, n in zip(members, steps):
            if m is None:
                continue
            m.failures = 0
            m.done += n
            m.rounds += 1
            m.last_ts = fin
            m.types[t] = m.types.get(t, 0.0) + elapsed
            m.gpu_s += elapsed * m.sf
            if m.done >= m.total:
                m.finish = fin
                done.append(m)
        self.book.received(c, self.type_index[t], elapsed)
        for m in done:
            self._remove(m.spec.job_id)
            if want is not None:
                want.discard(m.spec.job_id)


__all__ = ["GAVEL_TYPE_ORDER", "GavelRounds", "GavelRun", "MIN_RESET_S", "ROUND_S"]
