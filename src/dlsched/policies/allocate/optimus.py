"""Optimus: elastic allocation of workers and parameter servers by marginal gain.

Source: Peng et al., "Optimus: An Efficient Dynamic Resource Scheduler for Deep Learning
Clusters", EuroSys 2018 (seed 001), and the Optimus baseline of Pollux's simulator (petuum/adaptdl,
simulator/optimus.py, `OptimusPolicy`), whose semantics the defaults follow.

Every round (the profile runs one every 60 s) all active DL jobs - running and waiting - are
re-allocated from scratch:

    T_j(w, p)  = Q_j x t_j(w, p)        time to finish: remaining iterations Q_j x seconds per
                                         iteration with w workers and p parameter servers
    1. in arrival order, each job gets its minimum (1 worker, and 1 PS if it uses PS) while the
       cluster's free resources (a vector: GPUs, CPUs, memory, ...) hold it; the rest get 0;
    2. repeatedly give one worker or one PS to the job and role with the largest
           gain = (T_j(w, p) - T_j(w', p')) / d(task)       d = the task's dominant share of
                                                             the cluster (max_r demand_r / cap_r)
       (x early_factor for a job in its early state: fewer than min_samples speed samples),
       until every gain <= 0 or nothing more fits. A job is capped at max_workers workers.
       Settle (`settle`, on by default): a running job that has not yet shown its speed with
       the tasks it holds (no rate measured at its current (w, p)) keeps them, as a rigid job
       keeps its request. Without it a job resized or started just before a round is resized
       again on a guess before it has run a step: on the runtime, where a restart takes seconds
       to minutes, a ps job was restarted 4 times in a row and never stepped. Pollux's Optimus
       has no such rule; in the simulator a job shows its rate as soon as its restart delay is
       over, so with rounds further apart than that it changes nothing.
    3. placement (the placer `optimus_place`, dlsched.policies.actions.optimus, carries the
       allocation out): jobs whose (w, p) did not change keep their placements; a running job
       given 0 is suspended; the others are placed in ascending order of task count. A change of
       a job's allocation is a Resize and costs the backend's restart delay.

This module is the allocator (steps 1 and 2): `OptimusAllocate.allocate` returns the tasks every
active DL job should hold after the round, and the placer carries that out.

Estimates (parameters `speed` and `remaining`):
- speed = "oracle": t_j(w, p) from the speed model on a packed placement (for Pollux's
  applications: the measured step times; Pollux's Optimus reads its measured profiles too).
  speed = "fitted": Optimus's online model, fitted by non-negative least squares to the
  (w, p, iterations/s) samples the job has shown (see `OptimusSpeedFit`); until a job has
  min_samples distinct samples its oracle shape is scaled to what it showed.
- remaining = "oracle": Q_j = the iterations the job still has to run (the backend's counter; the
  simulator knows it, as Pollux's Optimus reads its validation profiles).
  remaining = "fitted": the loss-curve fit of the paper (see `OptimusConvergence`).

Jobs with no speed model (a trace's duration, no model): their speed does not depend on w, so
they are rigid - they get their requested tasks in arrival order when those fit, or nothing.
"""
from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

from dlsched.core.types import Role, TaskSpec
from dlsched.scheduler.context import JobState
from dlsched.policies.actions.gandiva_common import ChangedJobs
from dlsched.scheduler.framework import Allocate, register

_EPS = 1e-9
SPEEDS = ("oracle", "fitted")
REMAININGS = ("oracle", "fitted")
# Pollux's simulator (simulator.py, get_optimus_job_info): ncf jobs never get more than 1 replica.
POLLUX_MAX_REPLICAS = {"ncf": 1}


def job_tasks(spec, workers: int, ps: int) -> tuple[TaskSpec, ...]:
    """The job's task list with `workers` workers and `ps` parameter servers (demands copied from
    its own first worker and first PS; workers first, as the workload schema builds them)."""
    w0 = next(t for t in spec.tasks if t.role is Role.WORKER)
    p0 = next((t for t in spec.tasks if t.role is Role.PS), None)
    if ps and p0 is None:
        raise ValueError(f"job {spec.job_id} has no parameter server to copy")
    return _task_list(w0.demand, None if p0 is None else p0.demand, workers, ps)


@lru_cache(maxsize=8192)
def _task_list(wd: tuple, pd: tuple | None, workers: int, ps: int) -> tuple[TaskSpec, ...]:
    """The task list of a shape (TaskSpecs are immutable, so jobs of one shape share one)."""
    tasks = [TaskSpec(i, Role.WORKER, wd) for i in range(workers)]
    tasks += [TaskSpec(workers + j, Role.PS, pd) for j in range(ps)]
    return tuple(tasks)


_SHAPES: dict[int, tuple] = {}


def shape(tasks) -> tuple[int, int]:
    """(workers, parameter servers) of a task list (remembered per list: a round asks it of
    every active job, and a job's list changes only when it is resized)."""
    hit = _SHAPES.get(id(tasks))
    if hit is not None and hit[0] is tasks:
        return hit[1]
    p = sum(1 for t in tasks if t.role is Role.PS)
    if len(_SHAPES) > 100_000:
        _SHAPES.clear()
    _SHAPES[id(tasks)] = (tasks, (len(tasks) - p, p))     # the list is kept: its id stays its own
    return len(tasks) - p, p


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


@dataclass(slots=True, eq=False)
class AllocJob:
    """One job of an Optimus allocation. gain of a worker = (time(w, p) - time(w + 1, p)) x kw,
    of a PS = (time(w, p) - time(w, p + 1)) x kp (kw, kp: the early factor over the task's
    dominant share, times anything that scales `time` to the time to finish). A rigid job (no
    speed model) takes `rigid` (its requested tasks' total demand) or nothing."""
    job_id: str
    worker: list                 # demand of one worker
    ps: list | None              # demand of one PS (None: no PS)
    cap: int                     # most workers
    kw: float
    kp: float
    time: Callable[[int, int], float]
    rigid: list | None = None
    rigid_shape: tuple[int, int] = (0, 0)


def greedy_allocate(jobs: list[AllocJob], left: list[float]) -> dict[str, list[int]]:
    """Optimus's allocation (steps 1 and 2 of the module docstring) over `left`, the free
    resource vector (a list, consumed): {job: [workers, PS]}, [0, 0] for a job whose minimum
    does not fit. `jobs` in arrival order."""
    nres = len(left)
    all_dims = tuple(range(nres))

    def fits(v, dims) -> bool:
        for i in dims:
            if v[i] > left[i] + _EPS:
                return False
        return True

    def take(v, dims) -> None:
        for i in dims:
            left[i] -= v[i]

    alloc: dict[str, list[int]] = {}
    elastic: dict[str, tuple] = {}
    for job in jobs:
        if job.rigid is not None:
            if fits(job.rigid, all_dims):
                alloc[job.job_id] = list(job.rigid_shape)
                take(job.rigid, all_dims)
            else:
                alloc[job.job_id] = [0, 0]
            continue
        wv, pv = job.worker, job.ps
        wd = tuple(i for i in all_dims if wv[i] > _EPS)
        pd = () if pv is None else tuple(i for i in all_dims if pv[i] > _EPS)
        if fits(wv, wd) and (pv is None or fits([wv[i] + pv[i] for i in all_dims], all_dims)):
            alloc[job.job_id] = [1, 0 if pv is None else 1]
            take(wv, wd)
            if pv is not None:
                take(pv, pd)
            elastic[job.job_id] = (job, wd, pd)
        else:
            alloc[job.job_id] = [0, 0]

    heap: list = []
    heappush = list.append                     # the first pushes: one heapify after them

    def push(jid: str, job: AllocJob, w: int, p: int, t0: float) -> None:
        # t0 = time(w, p); each entry carries the time after its step, the next push's t0
        if w < job.cap:
            t1 = job.time(w + 1, p)
            g = (t0 - t1) * job.kw
            if g > 0:
                heappush(heap, (-g, jid, 0, w, p, t1))
        if job.ps is not None and p < w:       # never more PS than workers
            t1 = job.time(w, p + 1)
            g = (t0 - t1) * job.kp
            if g > 0:
                heappush(heap, (-g, jid, 1, w, p, t1))

    for jid, (job, _, _) in elastic.items():
        w, p = alloc[jid]
        push(jid, job, w, p, job.time(w, p))
    heapq.heapify(heap)
    heappush = heapq.heappush
    heappop = heapq.heappop
    while heap:
        _, jid, role, w, p, t1 = heappop(heap)
        a = alloc[jid]
        if a[0] != w or a[1] != p:
            continue                           # stale: the job's gains were recomputed
        job, wd, pd = elastic[jid]
        v, dims = (job.worker, wd) if role == 0 else (job.ps, pd)
        if not fits(v, dims):
            continue                           # does not fit any more (resources only shrink)
        a[role] += 1
        take(v, dims)
        push(jid, job, a[0], a[1], t1)
    return alloc


@register("allocate", "optimus",
          source="Peng et al., EuroSys 2018 (Optimus, seed 001); petuum/adaptdl simulator/optimus.py")
class OptimusAllocate(Allocate):
    """Re-allocate workers / PS of every active DL job by marginal gain per dominant share: the
    tasks each should hold after the round (a new shape for a running job is a resize, none is
    a suspend), carried out by the placer `optimus_place`."""
    resizes = True
    needs = frozenset(('preemption', 'resize'))  # backend capabilities (dlsched.scheduler.backend)
    #: keep the rigid jobs' allocation between rounds (False: every round from scratch; tests)
    incremental = True

    def __init__(self, speed: str = "oracle", remaining: str = "oracle", early_factor: float = 0.95,
                 min_samples: int = 3, max_workers: int = 0, settle: bool = True) -> None:
        if speed not in SPEEDS:
            raise ValueError(f"speed must be one of {', '.join(SPEEDS)}, got {speed!r}")
        if remaining not in REMAININGS:
            raise ValueError(f"remaining must be one of {', '.join(REMAININGS)}, got {remaining!r}")
        if not 0 < early_factor <= 1:
            raise ValueError(f"early_factor must be in (0, 1], got {early_factor}")
        if min_samples < 1:
            raise ValueError(f"min_samples must be >= 1, got {min_samples}")
        if max_workers < 0:
            raise ValueError(f"max_workers must be >= 0 (0: from the batch size), got {max_workers}")
        self.speed = speed
        self.remaining = remaining
        self.early_factor = float(early_factor)
        self.min_samples = int(min_samples)
        self.max_workers = int(max_workers)
        self.settle = bool(settle)
        self._cluster = None
        self._model = None           # SpeedModel of the cluster (oracle iteration times)
        self._iter: dict[tuple[str, int, int], float] = {}
        self._samples: dict[str, dict[tuple[int, int], float]] = {}   # job -> (w, p) -> iter/s
        self._fits: dict[str, object] = {}
        self._conv: dict[str, object] = {}
        self.fit_errors: list[tuple[float, str, int, float]] = []   # see _observe
        self._last_alloc: dict[str, tuple[int, int]] | None = {}
        self._static: dict[str, tuple] = {}   # per job: demands, shares, cap (see _info)
        self._rigid: dict[str, AllocJob] = {}  # per rigid job: its entry (total demand, shape)
        self._inv_kept: tuple | None = None
        self._by_tasks: dict[int, tuple] = {}   # id(task list) -> (list, inv, its part of _info)
        self._caps: dict[tuple, int] = {}       # (model, batch, workers) -> cap
        self._need_by_tasks: dict[int, tuple] = {}   # id(task list) -> (list, summed demand)
        self._reset_kept(None, None)
        self.kept_rebuilds = 0       # times a check found the kept view off the records (tests)

    # -- estimates --------------------------------------------------------------------------------
    def _speed_model(self, cluster):
        if self._cluster is not cluster:     # a new cluster: estimates and per-job shares anew
            from dlsched.workload.speed import SpeedModel
            self._cluster, self._model, self._iter, self._static = cluster, SpeedModel(cluster), {}, {}
        return self._model

    @staticmethod
    def _shape_of(spec) -> tuple:
        """What an oracle iteration time depends on besides (w, p): jobs of one model, batch and
        demands share their estimates."""
        return (spec.model, spec.batch_size, spec.comm, spec.gpu_type, spec.tasks[0].demand,
                spec.tasks[-1].demand)

    def oracle_iter_time(self, spec, w: int, p: int, cluster) -> float:
        """Seconds per iteration with w workers and p PS alone on a packed placement (cached
        per job shape); for a model the speed model has no profile of, the prior shape of the
        fitted model (optimus_fit.PRIOR_THETA: only its shape is used, see there)."""
        self._speed_model(cluster)
        shape_key = (self._shape_of(spec), w, p)
        t = self._iter.get(shape_key)
        if t is None:
            from dataclasses import replace

            from dlsched.policies.order.srtf import packed_placement
            sm = self._speed_model(cluster)
            trial = replace(spec, tasks=job_tasks(spec, w, p))
            pl = packed_placement(trial, cluster)
            if pl is None:
                t = math.inf
            elif sm.profile(trial, pl) is None:       # a model the speed model does not know
                from dlsched.policies.actions.optimus_fit import prior_iter_time
                t = prior_iter_time(trial, w, p)
            else:
                t = sm.isolated_iter_time(trial, pl)
            self._iter[shape_key] = t
        return t

    def iter_time(self, rec, w: int, p: int, cluster) -> float:
        if w <= 0:
            return math.inf
        if self.speed == "oracle":
            return self.oracle_iter_time(rec.spec, w, p, cluster)
        from dlsched.policies.actions.optimus_fit import fitted_iter_time
        return fitted_iter_time(self, rec, w, p, cluster)

    def remaining_iters(self, rec, ctx) -> float:
        stats = ctx.stats(rec.job_id) if ctx.stats is not None else None
        if self.remaining == "fitted":
            from dlsched.policies.actions.optimus_fit import fitted_remaining
            return fitted_remaining(self, rec, ctx, stats)
        if stats is not None and stats.get("remaining") is not None:
            return float(stats["remaining"])
        return float(rec.spec.iterations or 0.0)

    def early(self, rec) -> bool:
        return len(self._samples.get(rec.job_id, ())) < self.min_samples

    def cap(self, spec) -> int:
        """Most workers a job may get: max_workers, else its batch over the smallest per-GPU
        batch its model can train with (Pollux: target_batch_size // min_local_bsz)."""
        if self.max_workers:
            return self.max_workers
        key = (spec.model, spec.batch_size, spec.num_workers)
        c = self._caps.get(key)
        if c is None:
            c = self._caps[key] = self._cap(spec)
        return c

    @staticmethod
    def _cap(spec) -> int:
        from dlsched.workload.measured import POLLUX_APPS, app_profile
        model = (spec.model or "").lower()
        if model in POLLUX_APPS and spec.batch_size:
            return max(min(POLLUX_MAX_REPLICAS.get(model, 1 << 30),
                           int(spec.batch_size) // app_profile(model).min_local_bsz), 1)
        if spec.batch_size:
            return max(int(spec.batch_size), 1)
        return max(4 * spec.num_workers, 1)

    def _observe(self, ctx) -> None:
        """Record each running job's speed at its current (w, p). With the fitted speed model, a
        (w, p) the job shows for the first time is first predicted from the samples it had: the
        relative error of that prediction goes to `fit_errors` (now, job, samples before, error),
        the fit's error as it converges."""
        if ctx.stats is None:
            return
        for rec in ctx.running:
            if rec.spec.kind != "dl" or rec.spec.iterations is None:
                continue            # a run time, no iterations: rigid, its speed is never fitted
            rate = ctx.stats(rec.job_id)["rate"] or 0.0
            if rate > 0:
                mine = self._samples.setdefault(rec.job_id, {})
                wp = shape(rec.tasks)
                if self.speed == "fitted" and mine and wp not in mine:
                    t = self.iter_time(rec, wp[0], wp[1], ctx.cluster)
                    if math.isfinite(t):
                        self.fit_errors.append((ctx.now, rec.job_id, len(mine), abs(t * rate - 1.0)))
                mine[wp] = float(rate)

    # -- kept between rounds (rigid jobs; see _allocate_kept) -----------------------------------------
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
    def _info(self, rec, cluster, inv) -> tuple:
        """Per job, computed once: (worker demand, PS demand or None, their nonzero resources,
        dominant shares, worker cap, rigid)."""
        info = self._static.get(rec.job_id)
        if info is None:
            spec = rec.spec
            tasks = spec.tasks
            # what depends on the task list alone, shared by the jobs of one list (a trace
            # reader shares one per shape) while `inv` is the same list
            hit = self._by_tasks.get(id(tasks))
            if hit is not None and hit[0] is tasks and hit[1] is inv:
                part = hit[2]
            else:
                wv = next(t for t in tasks if t.role is Role.WORKER).demand
                pt = next((t for t in tasks if t.role is Role.PS), None)
                pv = None if pt is None else pt.demand
                wd = tuple(i for i, x in enumerate(wv) if x > _EPS)
                pd = () if pv is None else tuple(i for i, x in enumerate(pv) if x > _EPS)
                dw = max((wv[i] * inv[i] for i in wd), default=0.0)
                dp = max((pv[i] * inv[i] for i in pd), default=0.0) if pv is not None else 0.0
                part = (wv, pv, wd, pd, max(dw, _EPS), max(dp, _EPS))
                if len(self._by_tasks) > 10_000:
                    self._by_tasks.clear()
                self._by_tasks[id(tasks)] = (tasks, inv, part)   # the list kept: its id stays its own
            pv = part[1]
            rigid = spec.iterations is None or \
                self.iter_time(rec, 1, 1 if pv is not None else 0, cluster) == math.inf
            info = self._static[rec.job_id] = (*part, self.cap(spec), rigid)
        return info

    def _time_fn(self, rec, cluster, cache, oracle: bool) -> Callable[[int, int], float]:
        """(w, p) -> seconds per iteration of this job (oracle: a lookup in the shape cache)."""
        if oracle:
            shp = self._shape_of(rec.spec)

            def t(w: int, p: int) -> float:
                v = cache.get((shp, w, p))
                return v if v is not None else self.iter_time(rec, w, p, cluster)
            return t
        return lambda w, p: self.iter_time(rec, w, p, cluster)

    def quiet_until(self, now: float, running) -> float:
        """Rigid jobs (no speed model: a trace's run time) get their request or nothing, in
        arrival order, from the free resources alone: with only those active, a round without
        an event decides what the last one did. An elastic job's marginal gains move as it
        progresses (and as its speed is fitted): never quiet then."""
        return -math.inf if getattr(self, "_elastic", True) else math.inf

    def allocate(self, jobs, ctx) -> dict:
        """{job_id: tasks} for every active DL job, running and waiting (`jobs` is the waiting
        queue; the running ones are read from ctx.running): its current tasks when its (w, p)
        stays, a new task list when it changes, () when it gets nothing (a running job is then
        suspended, a waiting one keeps waiting). Jobs of other kinds are left to the per-task
        loop. Records each running job's measured speed first (the samples are a pure function
        of the view, so a round run twice records the same).

        With only rigid jobs active, the allocation kept from the last round is brought up to
        date for what changed (`_allocate_kept`, the same result); otherwise, and for a round
        built by hand, it is computed from scratch."""
        if ctx.notes:
            ctx.notes.pop(_HINT, None)
        if self.incremental:
            out = self._allocate_kept(jobs, ctx)
            if out is not None:
                return out
        return self._allocate_scratch(jobs, ctx)

    def _allocate_scratch(self, jobs, ctx) -> dict:
        """The allocation computed from the records (every active job's entry, then
        greedy_allocate)."""
        self._gvalid = False                  # the kept allocation is rebuilt next time
        txn, cluster = ctx.txn, ctx.cluster
        self._observe(ctx)
        running = [r for r in ctx.running if r.spec.kind == "dl"]
        waiting = [r for r in jobs if r.spec.kind == "dl" and r.state in (JobState.PENDING, JobState.SUSPENDED)
                   and r.job_id not in txn.decided]
        active = sorted(running + waiting, key=lambda r: (r.submit_time_s, r.job_id))
        if not active:
            self.last_alloc = {}
            self._elastic = False
            return {}
        self._speed_model(cluster)           # a new cluster resets the caches before they are read
        up = ctx.snap.up
        cap = cluster.capacity[up].sum(axis=0)
        inv = [1.0 / c if c > 0 else 0.0 for c in cap.tolist()]
        left = txn.free[up].sum(axis=0).tolist()
        for r in running:                     # Python floats: the same sums, task by task
            for tp in r.placed.values():
                d = r.tasks[tp.task].demand
                for i in range(len(left)):
                    left[i] += d[i]
        oracle = self.speed == "oracle"
        cache = self._iter
        entries = []
        held = {r.job_id for r in running} if self.settle else ()
        for rec in active:
            wv, pv, wd, pd, dw, dp, cap_w, rigid = self._info(rec, cluster, inv)
            if rec.job_id in held and not rigid:
                wp = shape(rec.tasks)
                if wp not in self._samples.get(rec.job_id, ()):
                    # settle: a running job that has not yet shown its speed with the tasks it
                    # holds keeps them (a resize before then restarts it for a guess, and again
                    # next round)
                    entries.append(AllocJob(rec.job_id, wv, pv, 0, 0.0, 0.0, None,
                                            self._need(rec.tasks, len(left)), wp))
                    continue
            if rigid:                        # request or nothing: one entry for good
                entries.append(self._rigid_entry(rec, (wv, pv)))
                continue
            q = self.remaining_iters(rec, ctx)
            factor = self.early_factor if self.early(rec) else 1.0
            entries.append(AllocJob(rec.job_id, wv, pv, cap_w, q * factor / dw, q * factor / dp,
                                    self._time_fn(rec, cluster, cache, oracle)))
        alloc = greedy_allocate(entries, left)
        self.last_alloc = {jid: tuple(a) for jid, a in alloc.items()}
        self._elastic = any(e.rigid is None for e in entries)
        out = {}
        for rec in active:
            w, p = alloc[rec.job_id]
            out[rec.job_id] = () if w == 0 else rec.tasks if (w, p) == shape(rec.tasks) \
                else job_tasks(rec.spec, w, p)
        return out
