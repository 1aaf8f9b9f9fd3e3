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
       the tasks it holds (no rate measured at its current (w, p), or none yet in its current
       run) keeps them, as a rigid job keeps its request. Without it a job resized or started just before a round is resized
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

Rooms: the allocation pass over entries and the task lists of a shape are
dlsched.policies.allocate.optimus_greedy; the allocation kept between rounds while every active
job is rigid (the same result, computed incrementally) is dlsched.policies.allocate.optimus_kept.
Their names are importable from here.
"""
from __future__ import annotations

import math
from typing import Callable

from dlsched.core.types import Role
from dlsched.policies.allocate.optimus_greedy import AllocJob, greedy_allocate, job_tasks, shape  # noqa: F401
from dlsched.policies.allocate.optimus_kept import _HINT, KeptAllocation, placer_hint  # noqa: F401 (re-exported)
from dlsched.scheduler.context import JobState
from dlsched.scheduler.framework import Allocate, register

_EPS = 1e-9
SPEEDS = ("oracle", "fitted")
REMAININGS = ("oracle", "fitted")
# Pollux's simulator (simulator.py, get_optimus_job_info): ncf jobs never get more than 1 replica.
POLLUX_MAX_REPLICAS = {"ncf": 1}


@register("allocate", "optimus",
          source="Peng et al., EuroSys 2018 (Optimus, seed 001); petuum/adaptdl simulator/optimus.py")
class OptimusAllocate(KeptAllocation, Allocate):
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
        self._rate_now: dict[str, float] = {}    # job -> its rate in its current run (_observe)
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
            self._rate_now[rec.job_id] = rate
            if rate > 0:
                mine = self._samples.setdefault(rec.job_id, {})
                wp = shape(rec.tasks)
                if self.speed == "fitted" and mine and wp not in mine:
                    t = self.iter_time(rec, wp[0], wp[1], ctx.cluster)
                    if math.isfinite(t):
                        self.fit_errors.append((ctx.now, rec.job_id, len(mine), abs(t * rate - 1.0)))
                mine[wp] = float(rate)


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
                if wp not in self._samples.get(rec.job_id, ()) or \
                        self._rate_now.get(rec.job_id, 1.0) <= 0:
                    # settle: a running job that has not yet shown its speed with the tasks it
                    # holds, in this run, keeps them (a resize before then restarts it for a
                    # guess, and again next round; or, back at a shape it once ran, bounces it
                    # out again before its first step)
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
