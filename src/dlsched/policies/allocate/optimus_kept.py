"""Optimus's allocation kept between rounds while every active job is rigid (a trace's run time, no
speed model: its request or nothing, in arrival order): `KeptAllocation`, the part of
OptimusAllocate that brings the last round's greedy pass up to date for the jobs that joined or
left (`_allocate_kept`) instead of running it over every active job, with the same result.

A module of its own because it is a hot-path trick, not Optimus's rule: the allocator
(dlsched.policies.allocate.optimus) states the rule and computes it from scratch, and mixes this
class in for the rounds where it applies. The speed it buys is Optimus on the whole Philly trace
(benchmarks/bench_policies.py, RESULTS.md block `policies`: every job of that trace is rigid);
tests/unit/test_optimus_incremental.py checks it against the scratch path at every round.
"""
from __future__ import annotations

import bisect

import numpy as np

from dlsched.policies.actions.gandiva_common import ChangedJobs
from dlsched.policies.allocate.optimus_greedy import AllocJob, job_tasks, shape
from dlsched.scheduler.context import JobState

_EPS = 1e-9
_WAITING = (JobState.PENDING, JobState.SUSPENDED)
_EXACT = 2.0 ** 50      # integer-valued floats below this add up exactly in any order
# The kept round's (allocation, jobs the placer may have to act on) in the round's notes: see
# placer_hint.
_HINT = "optimus.acting"


def _integral(v) -> bool:
    for x in v:
        if not (-_EXACT < x < _EXACT) or x != int(x):
            return False
    return True


def _free_sum(free, up) -> tuple[list[float], bool]:
    """free[up].sum(axis=0), as the scratch round sums it, and whether it is known integer-
    valued and below _EXACT. With every node up and every value an integer-valued float small
    enough that no partial sum can be rounded, the column sums of the whole array are the same
    floats in any order: numpy's faster sum of a column-major array then (the boolean index's
    copy and a row-by-row sum cost 20 us a round)."""
    if up.all():
        m = np.abs(free).max(initial=0.0)
        if m * (len(free) + 1) < _EXACT and (free == np.floor(free)).all():
            return free.sum(axis=0).tolist(), True
    return free[up].sum(axis=0).tolist(), False


def placer_hint(ctx) -> list[str] | None:
    """The jobs of this round's allocation that the placer may have to act on, when the
    allocation is the one the kept path just returned for this round's transaction: the waiting
    jobs given tasks, and the running jobs given nothing or other tasks than they hold (every
    other job keeps what it holds, or keeps waiting). None: look at every job."""
    h = ctx.notes.get(_HINT) if ctx.notes else None
    if h is None or ctx.allocation != h[0]:
        return None
    return h[1]


class KeptAllocation:
    """OptimusAllocate's kept view and incremental greedy pass for rigid jobs (mixed in; see the
    module). Reads the allocator's `_info`, `_speed_model`, `_observe` and `_static`."""

    @property
    def last_alloc(self) -> dict[str, tuple[int, int]]:
        """The last round's decision {job: (workers, PS)} (tests, bench)."""
        return dict(self._wp) if self._last_alloc is None else self._last_alloc

    @last_alloc.setter
    def last_alloc(self, value) -> None:
        self._last_alloc = value

    def observe(self, now: float, events: list, applied) -> None:
        """Note the jobs whose records may have changed (the next round updates those)."""
        self._changed.observe(events, applied)

    def _reset_kept(self, jobs_view, cluster) -> None:
        """Forget the kept view: the next kept round rebuilds it from the records."""
        self._kview = (jobs_view, cluster)    # the scheduler's jobs and the cluster it is of
        if jobs_view is None:
            self._changed = ChangedJobs(arrivals=True)   # jobs named by events and plans since
        self._kbuilt = False
        self._act: dict[str, object] = {}        # active DL job -> record
        self._keys: list[tuple] = []             # their (submit_time_s, job_id), sorted
        self._running: set[str] = set()          # running jobs of any kind
        self._arun: set[str] = set()             # the active ones among them
        self._hold: dict[str, list] = {}         # running DL job -> demand its placed tasks hold
        self._hsum: list | None = None           # their sum (exact: integer-valued floats)
        self._n_elastic = 0                      # active jobs that are not rigid
        self._n_iters = 0                        # active jobs with iterations (speed samples)
        self._exact = True                       # every demand so far integer-valued
        self._gdirty: set[str] = set()           # jobs that joined or left since the last sync
        self._odirty: set[str] = set()           # active jobs whose record changed
        self._gvalid = False
        self._g: dict[str, list] = {}            # job -> [key, need, allocated] of the kept run
        self._U: list[tuple] = []                # keys of the jobs it left out, sorted
        self._UL: dict[str, list] = {}           # job left out -> what was left before it
        self._Lend: list | None = None           # what was left after the last job
        self._gleft0: list | None = None         # what it started from
        self._out: dict[str, tuple] = {}         # job -> tasks (the allocation), in arrival order
        self._wp: dict[str, tuple[int, int]] = {}
        self._odd: set[str] = set()              # jobs given () or tasks other than their own

    def _note(self, jid: str, ctx) -> None:
        """Bring the kept view up to date with one job's record."""
        rec = ctx.jobs.get(jid)
        running = rec is not None and ctx.is_running(jid)
        if running:
            self._running.add(jid)
        else:
            self._running.discard(jid)
        dl = rec is not None and rec.spec.kind == "dl"
        # what it holds (a running DL job: every placed task's demand, as the scratch sum reads it)
        old = self._hold.pop(jid, None)
        if old is not None:
            self._hsum = [a - b for a, b in zip(self._hsum, old)]
        if running and dl:
            h = None
            for tp in rec.placed.values():
                d = rec.tasks[tp.task].demand
                h = list(d) if h is None else [a + b for a, b in zip(h, d)]
            if h is not None:
                self._hold[jid] = h
                self._hsum = h if self._hsum is None else [a + b for a, b in zip(self._hsum, h)]
                if not (_integral(h) and _integral(self._hsum)):
                    self._exact = False
        active = dl and (running or (rec.queued and rec.state in _WAITING))
        if active and running:
            self._arun.add(jid)
        else:
            self._arun.discard(jid)
        was = self._act.get(jid)
        if active:
            self._odirty.add(jid)
            self._act[jid] = rec
        else:
            self._odirty.discard(jid)
        if active == (was is not None):
            return
        self._gdirty.add(jid)
        if active:
            bisect.insort(self._keys, (rec.spec.submit_time_s, jid))
            sign = 1
        else:
            rec = was
            del self._act[jid]
            del self._keys[bisect.bisect_left(self._keys, (rec.spec.submit_time_s, jid))]
            sign = -1
        info = self._static.get(jid)
        if info is None:                      # first seen: its shares and whether it is rigid
            info = self._info(rec, ctx.cluster, self._inv(ctx))
        if not info[-1]:
            self._n_elastic += sign
        if rec.spec.iterations is not None:
            self._n_iters += sign
        if active and info[-1]:
            need = self._rigid_entry(rec, info).rigid
            if not _integral(need):
                self._exact = False

    def _inv(self, ctx) -> list[float]:
        """1 / capacity of the up nodes, per resource (as the scratch round computes it; kept
        while the cluster and the up nodes stay)."""
        up = ctx.snap.up
        key = (ctx.cluster, up.tobytes())
        hit = self._inv_kept
        if hit is not None and hit[0][0] is key[0] and hit[0][1] == key[1]:
            return hit[1]
        cap = ctx.cluster.capacity[up].sum(axis=0)
        inv = [1.0 / c if c > 0 else 0.0 for c in cap.tolist()]
        self._inv_kept = (key, inv)
        return inv

    def _need(self, tasks, nres: int) -> list:
        """The summed demand of a task list, task by task (kept per list; read only: greedy
        passes copy what is left)."""
        hit = self._need_by_tasks.get(id(tasks))
        if hit is not None and hit[0] is tasks:
            return hit[1]
        need = [0.0] * nres
        for t in tasks:
            for r in range(nres):
                need[r] += t.demand[r]
        if len(self._need_by_tasks) > 10_000:
            self._need_by_tasks.clear()
        self._need_by_tasks[id(tasks)] = (tasks, need)
        return need

    def _rigid_entry(self, rec, info) -> AllocJob:
        entry = self._rigid.get(rec.job_id)
        if entry is None:
            tasks = rec.spec.tasks
            entry = self._rigid[rec.job_id] = AllocJob(rec.job_id, info[0], info[1], 0, 0.0, 0.0, None,
                                                       self._need(tasks, len(info[0])), shape(tasks))
        return entry

    def _build_kept(self, ctx, jobs) -> None:
        """The kept view from the records (the first kept round, or after a check failed)."""
        self._reset_kept(ctx.jobs, ctx.cluster)
        self._kbuilt = True
        for rec in ctx.running:
            self._note(rec.job_id, ctx)
        for rec in jobs:
            self._note(rec.job_id, ctx)

    def _allocate_kept(self, jobs, ctx) -> dict | None:
        """The allocation of a round where every active job is rigid, from the one kept since the
        last round: None when that does not apply (then from scratch).

        What a rigid job gets depends on the jobs before it in arrival order and on `left`, the
        free resources plus what the running jobs hold. Kept: the active jobs and their entries
        (updated for the jobs the events and applied plans named: `observe`), the running jobs'
        held sum, and the last run of the greedy pass: who got their request, and for each job
        left out and after the last job what was left. A job that left the active set and held
        an allocation leaves everything after it with more (`delta`): the jobs that got theirs
        still do; only those left out are tried again. Exact only when every demand and the
        free sum are integer-valued floats (then every sum is exact, in any order); otherwise,
        and for a round built by hand (no observe yet), None."""
        if not self._changed.live or ctx.txn.decided:
            return None
        noted = self._changed.take()
        if self._kview[0] is not ctx.jobs or self._kview[1] is not ctx.cluster or not self._kbuilt:
            self._speed_model(ctx.cluster)
            self._build_kept(ctx, jobs)
        else:
            if noted:
                self._speed_model(ctx.cluster)
                for jid in sorted(noted):
                    self._note(jid, ctx)
        # the kept view must match the records: the running jobs, and the waiting DL jobs
        n_wait = 0
        act = self._act
        for rec in jobs:
            if rec.spec.kind == "dl" and rec.state in _WAITING:
                if rec.job_id not in act or rec.job_id in self._running:
                    n_wait = -1
                    break
                n_wait += 1
        if n_wait != len(act) - len(self._arun) or ctx.n_running != len(self._running):
            self.kept_rebuilds += 1
            self._build_kept(ctx, jobs)
            return None
        if self._n_elastic or not self._exact:
            return None
        if self._n_iters:                     # rigid jobs with iterations: their speed samples
            self._observe(ctx)
        if not act:
            self.last_alloc = {}
            self._elastic = False
            self._gvalid = False
            return {}
        txn = ctx.txn
        fs, exact = _free_sum(txn.free_view() if hasattr(txn, "free_view") else txn.free, ctx.snap.up)
        hs = self._hsum
        left0 = fs if hs is None else [a + b for a, b in zip(fs, hs)]
        # (both below _EXACT and integer-valued, the held sum checked as it was kept: exact)
        if not exact and not (_integral(fs) and _integral(left0)):
            return None
        if not self._gvalid or left0 != self._gleft0 or not self._sync(left0):
            self._rebuild(left0)
        self._gdirty = set()
        odirty, self._odirty = self._odirty, set()
        g, out = self._g, self._out
        for jid in odirty:
            self._set_out(jid, g[jid][2])
        self._last_alloc = None
        self._elastic = False
        res = dict(out)
        if ctx.notes is None:
            ctx.notes = {}
        ctx.notes[_HINT] = (res, [j for j in self._odd if j in self._running]
                            + [r.job_id for r in jobs if r.job_id in act and out[r.job_id]])
        return res

    def _set_out(self, jid: str, ok: bool) -> None:
        rec = self._act[jid]
        w, p = self._rigid[jid].rigid_shape if ok else (0, 0)
        self._wp[jid] = (w, p)
        tasks = () if w == 0 else rec.tasks if (w, p) == shape(rec.tasks) else job_tasks(rec.spec, w, p)
        self._out[jid] = tasks
        if not tasks or tasks is not rec.tasks:
            self._odd.add(jid)
        else:
            self._odd.discard(jid)

    def _rebuild(self, left0: list) -> None:
        """The greedy pass over every active job (greedy_allocate's, for rigid entries)."""
        self._gvalid, self._gleft0 = True, left0
        self._g, self._U, self._UL = {}, [], {}
        self._out, self._wp, self._odd = {}, {}, set()
        self._Lend = self._run_from(0, list(left0))
        self._odirty = set()

    def _run_from(self, pos: int, left: list) -> list:
        """The greedy pass over the active jobs from position `pos` of the arrival order, with
        `left` before it (consumed); the allocation's entries of those jobs are set. Returns
        what is left after the last job."""
        g, U, UL, rigid = self._g, self._U, self._UL, self._rigid
        keys = self._keys
        if pos < len(keys):
            del U[bisect.bisect_left(U, keys[pos]):]
        nres = len(left)
        for key in keys[pos:]:
            jid = key[1]
            need = rigid[jid].rigid
            for i in range(nres):
                if need[i] > left[i] + _EPS:
                    ok = False
                    break
            else:
                ok = True
            if ok:
                for i in range(nres):
                    left[i] -= need[i]
                UL.pop(jid, None)
            else:
                U.append(key)
                UL[jid] = list(left)
            e = g.get(jid)
            if e is None:
                g[jid] = [key, need, ok]
                self._set_out(jid, ok)
            elif e[2] != ok:
                e[2] = ok
                self._set_out(jid, ok)
        return left

    @staticmethod
    def _short(delta: list) -> bool:
        """Did a job left out take more than the jobs before it gave back, in some resource?"""
        return min(delta) < 0

    def _sync(self, left0: list) -> bool:
        """Bring the kept greedy pass up to date with the jobs that joined or left (False: it
        cannot be, rebuild). The jobs that left and held an allocation give it back to every
        job after them (`delta`, never negative until a job left out takes some): the jobs after
        them that got theirs still do (they would fit in more), so only the jobs left out are
        tried again, in arrival order, with what was left before them plus delta. When one
        takes more than delta holds in some resource, the jobs after it may no longer fit: the
        pass is run again from there. Then the jobs that joined, at the end of the order."""
        dirty = self._gdirty
        if not dirty:
            return True
        g, act, keys = self._g, self._act, self._keys
        gone = [g[j] for j in dirty if j in g and j not in act]
        new = sorted((act[j].spec.submit_time_s, j) for j in dirty if j not in g and j in act)
        if new and keys[-len(new):] != new:
            return False                     # a job joined before others: rebuild
        U, UL, out, wp, odd = self._U, self._UL, self._out, self._wp, self._odd
        events = []
        for e in gone:
            key = e[0]
            jid = key[1]
            del g[jid]
            del out[jid]
            del wp[jid]
            odd.discard(jid)
            if e[2]:
                events.append((key, e[1]))
            else:
                del U[bisect.bisect_left(U, key)]
                del UL[jid]
        if events:
            events += [(k, None) for k in U]
            events.sort(key=lambda x: x[0])
        delta = None
        for key, gave in events:
            if gave is not None:             # a job that left gives its allocation back
                delta = list(gave) if delta is None else [a + b for a, b in zip(delta, gave)]
                continue
            if delta is None:
                continue                     # nothing changed before it: still left out
            jid = key[1]
            e = g[jid]
            need = e[1]
            left = [a + b for a, b in zip(UL[jid], delta)]
            for a, b in zip(need, left):
                if a > b + _EPS:
                    UL[jid] = left           # still left out
                    break
            else:
                e[2] = True
                del U[bisect.bisect_left(U, key)]
                del UL[jid]
                self._set_out(jid, True)
                delta = [a - b for a, b in zip(delta, need)]
                if self._short(delta):
                    left = [a - b for a, b in zip(left, need)]
                    self._Lend = self._run_from(bisect.bisect_right(keys, key), left)
                    return True
                if not any(delta):
                    delta = None
        if delta is not None:
            self._Lend = [a + b for a, b in zip(self._Lend, delta)]
        if new:
            self._Lend = self._run_from(len(keys) - len(new), self._Lend)
        return True
