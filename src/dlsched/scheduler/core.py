"""The Scheduler: one object that turns events into rounds and rounds into Plans.

Run loop (`Scheduler.run(backend)`):

    while (events := backend.poll()) is not None:
        handle every event (arrival, finish, stop, node up/down, tick) -> job records
        if something changed (or a periodic tick came): plan = round(backend.snapshot())
        backend.apply(plan); record the utilisation sample

A round (`Scheduler.round`):
    1. order:    waiting jobs sorted by profile.order's key + (submit_time_s, job_id)
    2. allocate: how many tasks each waiting job gets (default: what it asked for)
    3. place:    for each job in order, each unplaced task: filters -> candidate nodes ->
                 scorers (weighted) -> best node (ties: lowest node id) -> txn.reserve
                 then txn.commit(job, gang=profile.gang); with profile.blocking, the first job
                 that is not fully placed ends the placement phase (strict order)
    4. actions:  each action's act(ctx) (may suspend / migrate / launch through ctx.txn)
The wall-clock time of steps 1-4 is the round's scheduling time.

Policy errors. A backend whose `contain_policy_errors` is true (the real runtime: one bad job
must not take a shared cluster's scheduler down) gets `Scheduler.run` to contain an exception
raised in a round: the job it is attributed to (see `_culprit`) is put on hold through
`backend.policy_error(job_id, reason)` (the backend stops it if it runs and records the reason)
and the round is run again without it; a round that cannot be attributed to one job keeps the
previous plan (nothing changes) and says so through `backend.policy_error(None, reason)`. The
simulator does not contain errors: a policy bug there must stop the run loudly.

A non-gang profile places a DL job's workers one at a time; a job that got only some of them
holds them while it waits for the rest (it cannot train: "partial hold", the waste seed 002
describes, measured in partial_hold_gpu_s).
"""
from __future__ import annotations

import bisect
import enum
import logging
import math
import re
import time as _time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from dlsched.cluster.state import Snapshot
from dlsched.core.errors import ConfigError
from dlsched.core.types import GPU, JobSpec, Plan, Status, TaskPlacement, TaskSpec
from dlsched.scheduler import events as ev
from dlsched.scheduler.framework import REGISTRY, ProfileSpec, build
from dlsched.scheduler.transaction import Transaction

_EPS = 1e-9
log = logging.getLogger("dlsched.scheduler")
_JOB_ID_RE = re.compile(r"\b[\w.-]+\b")


class JobState(enum.Enum):
    PENDING = "pending"        # nothing placed yet
    PARTIAL = "partial"        # some tasks placed (non-gang profiles); holds them
    RUNNING = "running"        # every task placed
    SUSPENDED = "suspended"    # preempted or stopped; waits to be placed again
    DONE = "done"
    HELD = "held"              # stopped by an operator (real runtime); not queued until released
    REJECTED = "rejected"      # can never fit this cluster


_SETTLED = (JobState.DONE, JobState.HELD, JobState.REJECTED)   # not in the queue, not running


@dataclass(eq=False)
class JobRecord:
    """The scheduler's view of one job."""
    spec: JobSpec
    tasks: tuple[TaskSpec, ...]
    state: JobState = JobState.PENDING
    placed: dict[int, TaskPlacement] = field(default_factory=dict)
    done_tasks: set[int] = field(default_factory=set)
    first_start_s: float | None = None
    finish_s: float | None = None
    preemptions: int = 0
    migrations: int = 0
    attained_gpu_s: float = 0.0      # GPU-seconds of service so far (LAS, Tiresias)
    _service_since: float | None = None
    reject_reason: str = ""
    key: tuple = ()
    queued: bool = False             # in Scheduler.queue (kept by _enqueue / _remove_from_queue)

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def submit_time_s(self) -> float:
        return self.spec.submit_time_s

    def unplaced(self) -> list[TaskSpec]:
        return [t for t in self.tasks if t.index not in self.placed and t.index not in self.done_tasks]

    def held_gpus(self) -> float:
        return float(sum(self.tasks[i].demand[GPU] for i in self.placed))

    def attained(self, now: float) -> float:
        extra = 0.0
        if self._service_since is not None:
            extra = (now - self._service_since) * self.held_gpus()
        return self.attained_gpu_s + extra


@dataclass
class RoundContext:
    """What a policy sees in a round. `txn` is the only thing it may change."""
    snap: Snapshot
    txn: Transaction
    now: float
    jobs: dict[str, JobRecord]
    queue: list[JobRecord]
    rng: np.random.Generator
    scheduler: "Scheduler"
    # the backend's per-job counters (Backend.job_stats: progress, rate, ...); None outside a run
    stats: Callable[[str], dict] | None = None

    @property
    def cluster(self):
        return self.snap.cluster

    @property
    def running(self) -> list[JobRecord]:
        """Jobs holding all their tasks (in arrival order of their records)."""
        return list(self.scheduler.running.values())


class Profile:
    """A built ProfileSpec: component instances ready for rounds."""

    def __init__(self, spec: ProfileSpec, overrides: dict[str, Any] | None = None):
        over = dict(overrides or {})
        params = {**spec.params, **over.pop("params", {})}
        self.spec = spec
        self.name = spec.name
        self.gang = bool(over.pop("gang", spec.gang))
        self.blocking = bool(over.pop("blocking", spec.blocking))
        self.round_s = over.pop("round_s", spec.round_s)
        self.event_rounds = bool(over.pop("event_rounds", spec.event_rounds))
        if over:
            raise ConfigError(f"policies.{spec.name}.{sorted(over)[0]}",
                              "unknown key (allowed: gang, blocking, round_s, event_rounds, params)")
        if self.round_s is not None and (isinstance(self.round_s, bool)
                                         or not isinstance(self.round_s, (int, float)) or self.round_s <= 0):
            raise ConfigError(f"policies.{spec.name}.round_s", f"must be a number > 0, got {self.round_s!r}")
        if not self.event_rounds and not self.round_s:
            raise ConfigError(f"policies.{spec.name}.event_rounds",
                              "false needs round_s (rounds would never run)")
        base = f"policies.{spec.name}.params"
        names = [name for _, name in spec.components()]
        used = set(names)
        shared = sorted({n for n in names if names.count(n) > 1} & set(params))
        if shared:
            # params are keyed by component name: two kinds with one name cannot be told apart
            raise ConfigError(f"{base}.{shared[0]}", "ambiguous: components of two kinds share this name")
        for cname in params:
            if cname not in used:
                raise ConfigError(f"{base}.{cname}", f"not a component of this profile "
                                  f"(components: {', '.join(sorted(used))})")

        def mk(kind, name):
            return build(kind, name, params.get(name), f"{base}.{name}")
        self.order = mk("order", spec.order)
        self.allocator = mk("allocate", spec.allocate)
        self.filters = [mk("filter", f) for f in spec.filters]
        self.scorers = [(mk("score", s), float(w)) for s, w in spec.scores]
        self.actions = [mk("action", a) for a in spec.actions]


def build_profile(name: str, overrides: dict | None = None) -> Profile:
    return Profile(REGISTRY.get("profile", name), overrides)


class Scheduler:
    def __init__(self, profile: Profile, *, seed: int = 0, check_scores: bool = True):
        self.profile = profile
        self.rng = np.random.default_rng(seed)
        self.check_scores = check_scores
        self.jobs: dict[str, JobRecord] = {}
        self.queue: list[JobRecord] = []          # waiting: PENDING, PARTIAL, SUSPENDED
        self.running: dict[str, JobRecord] = {}   # RUNNING (and PARTIAL tasks jobs that run)
        self.rounds: list[tuple[float, float, int]] = []   # (time_s, wall_s, queued jobs) per round
        self.log: list[tuple] = []
        self.timeline: list[tuple[float, float, float, float, int, int]] = []
        self.n_done = 0                           # finished or rejected
        self._dirty = False
        self._static = bool(getattr(profile.order, "static", False))
        self._first_fit = (len(profile.scorers) == 1 and getattr(profile.scorers[0][0], "first_fit", False))
        self._fit_cache: dict = {}
        self._local_scores = all(getattr(sc, "node_local", False) for sc, _ in profile.scorers)
        self._dynamic = bool(getattr(profile.order, "dynamic", False))
        self._pre_actions = [a for a in profile.actions if hasattr(a, "before_place")]
        self._next_tick: float | None = None
        self._ticked = False
        self._stats: Callable[[str], dict] | None = None
        self._cap_max: np.ndarray | None = None
        self._cap_total: np.ndarray | None = None
        self.round_errors: list[tuple[float, str | None, str]] = []   # (time, job or None, error)

    # -- events ------------------------------------------------------------------------------
    def handle(self, e, backend) -> None:
        if isinstance(e, ev.JobArrival):
            self._on_arrival(e, backend)
        elif isinstance(e, ev.TaskFinish):
            rec = self.jobs[e.job_id]
            self._settle_service(rec, e.time)
            rec.placed.pop(e.task, None)
            rec.done_tasks.add(e.task)
            self._dirty = True
        elif isinstance(e, ev.JobFinish):
            rec = self.jobs[e.job_id]
            self._settle_service(rec, e.time)
            rec.placed.clear()
            rec.state = JobState.DONE
            rec.finish_s = e.time
            self.n_done += 1
            self.running.pop(rec.job_id, None)
            self._remove_from_queue(rec)
            self.log.append((e.time, "finish", rec.job_id, ""))
            self._dirty = True
        elif isinstance(e, ev.JobStopped):
            rec = self.jobs[e.job_id]
            self._settle_service(rec, e.time)
            rec.placed.clear()
            self.running.pop(rec.job_id, None)
            if rec.state is not JobState.SUSPENDED:
                rec.state = JobState.SUSPENDED
                rec.preemptions += 1
                self._enqueue(rec)
            self.log.append((e.time, "stopped", rec.job_id, e.reason))
            self._dirty = True
        elif isinstance(e, ev.JobHeld):
            rec = self.jobs[e.job_id]
            self._settle_service(rec, e.time)
            if rec.placed:
                rec.preemptions += 1
            rec.placed.clear()
            self.running.pop(rec.job_id, None)
            self._remove_from_queue(rec)
            rec.state = JobState.HELD
            self.log.append((e.time, "held", rec.job_id, e.reason))
            self._dirty = True
        elif isinstance(e, ev.JobReleased):
            rec = self.jobs[e.job_id]
            if rec.state is JobState.HELD:
                # a job that ran before resumes from its checkpoint; one that never ran launches
                rec.state = JobState.SUSPENDED if rec.first_start_s is not None else JobState.PENDING
                self._enqueue(rec)
                self.log.append((e.time, "released", rec.job_id, ""))
                self._dirty = True
        elif isinstance(e, (ev.NodeDown, ev.NodeUp)):
            self.log.append((e.time, type(e).__name__, "", str(e.node)))
            self._dirty = True
        elif isinstance(e, ev.RoundTick):
            self._next_tick = None
            self._dirty = True
            self._ticked = True

    def _on_arrival(self, e: ev.JobArrival, backend) -> None:
        job = e.job
        rec = JobRecord(job, job.tasks)
        self.jobs[job.job_id] = rec
        self.log.append((e.time, "arrival", job.job_id, ""))
        reason = self._never_fits(job, backend)
        if reason:
            rec.state = JobState.REJECTED
            rec.reject_reason = reason
            self.n_done += 1
            self.log.append((e.time, "rejected", job.job_id, reason))
            return
        self._enqueue(rec)
        self._dirty = True

    def _never_fits(self, job: JobSpec, backend) -> str:
        """Why the job can never run on this cluster ("" when it can). Cached by the job's
        multiset of task demands: trace jobs repeat a handful of shapes."""
        counts: dict[tuple, int] = {}
        for t in job.tasks:
            counts[t.demand] = counts.get(t.demand, 0) + 1
        key = (job.kind, tuple(sorted(counts.items())))
        hit = self._fit_cache.get(key)
        if hit is not None:
            return hit
        if self._cap_max is None:
            cap = backend.snapshot().capacity
            self._cap_max = cap.max(axis=0)
            self._cap_total = cap.sum(axis=0)
        reason = ""
        need = np.zeros_like(self._cap_total)
        for demand, n in counts.items():
            v = np.asarray(demand, dtype=np.float64)
            if (v > self._cap_max + _EPS).any():
                reason = "a task is larger than any node"
                break
            need += n * v
        if not reason and job.kind == "dl" and (need > self._cap_total + _EPS).any():
            reason = "the job needs more than the whole cluster"
        if not reason:
            cluster = backend.snapshot().cluster
            for f in self.profile.filters:
                if hasattr(f, "never_fits"):
                    reason = f.never_fits(job, cluster)
                    if reason:
                        break
        self._fit_cache[key] = reason
        return reason

    def _enqueue(self, rec: JobRecord) -> None:
        if rec.queued:
            return
        rec.queued = True
        if self._static:
            rec.key = (*self.profile.order.key(rec, None), rec.submit_time_s, rec.job_id)
            bisect.insort(self.queue, rec, key=lambda r: r.key)
        else:
            self.queue.append(rec)

    def _remove_from_queue(self, rec: JobRecord) -> None:
        if not rec.queued:
            return
        rec.queued = False
        if self._static:
            i = bisect.bisect_left(self.queue, rec.key, key=lambda r: r.key)
            if i < len(self.queue) and self.queue[i] is rec:
                del self.queue[i]
                return
        self.queue.remove(rec)

    def _settle_service(self, rec: JobRecord, now: float) -> None:
        if rec._service_since is not None:
            rec.attained_gpu_s += (now - rec._service_since) * rec.held_gpus()
            rec._service_since = None

    # -- the round ---------------------------------------------------------------------------
    def round(self, snap: Snapshot) -> Plan:
        t0 = _time.perf_counter()
        txn = Transaction(snap)
        ctx = RoundContext(snap, txn, snap.now, self.jobs, [], self.rng, self, self._stats)
        if self._static:
            queue = list(self.queue)
        else:
            key = self.profile.order.key
            for rec in self.queue:
                rec.key = (*key(rec, ctx), rec.submit_time_s, rec.job_id)
            queue = sorted(self.queue, key=lambda r: r.key)
        ctx.queue = queue
        allocs = self.profile.allocator.allocate(queue, ctx)
        if allocs:
            for rec in queue:
                new_tasks = allocs.get(rec.job_id)
                if new_tasks is not None and new_tasks != rec.tasks and not rec.placed:
                    rec.tasks = tuple(new_tasks)
        for action in self._pre_actions:
            action.before_place(ctx)
        if self._dynamic:
            # Re-pick the smallest key after every placement (progressive filling).
            key = self.profile.order.key
            pending = [r for r in queue if r.job_id not in txn.decided]
            while pending:
                rec = min(pending, key=lambda r: (*key(r, ctx), r.submit_time_s, r.job_id))
                pending.remove(rec)
                if not self.place(rec, ctx).ok and self.profile.blocking:
                    break
        else:
            for rec in queue:
                if rec.job_id in txn.decided:
                    continue
                if not self.place(rec, ctx).ok and self.profile.blocking:
                    break
        for action in self.profile.actions:
            action.act(ctx)
        self.rounds.append((snap.now, _time.perf_counter() - t0, len(queue)))
        return txn.plan

    def place(self, rec: JobRecord, ctx: RoundContext) -> Status:
        """Place the job's unplaced tasks one at a time, then commit (gang: all or nothing)."""
        txn = ctx.txn
        status = Status.success()
        memo: dict = {}     # scores kept across the job's identical tasks (see choose_node)
        todo = rec.unplaced()
        if self.profile.gang and rec.spec.is_gang and len(todo) > 1:
            # All or nothing: a gang whose total demand exceeds the cluster's free total cannot
            # be placed; say so without trying its tasks one by one.
            need = np.sum([t.vector for t in todo], axis=0)
            if (need > txn.free.sum(axis=0) + _EPS).any():
                return Status.unschedulable("gang: its tasks need more than the cluster has free")
        for task in todo:
            node, why = self.choose_node(ctx, rec.spec, task, memo)
            if node is None:
                status = Status.unschedulable(why)
                break
            txn.reserve(rec.job_id, task, node)
            memo["last"] = node
        committed = self.commit(rec, ctx)
        return status if committed.ok and not status.ok else committed

    def commit(self, rec: JobRecord, ctx: RoundContext, *, gang: bool | None = None) -> Status:
        """Commit what the round reserved for this job (gang: the profile's, unless given)."""
        gang = self.profile.gang if gang is None else gang
        total = len(rec.tasks) - len(rec.done_tasks)
        return ctx.txn.commit(rec.job_id, total_tasks=total, already_placed=len(rec.placed),
                              # a bag of independent tasks is never a gang: its tasks need not co-run
                              gang=gang and rec.spec.is_gang,
                              resume=rec.state is JobState.SUSPENDED)

    def choose_node(self, ctx: RoundContext, job: JobSpec, task: TaskSpec,
                    memo: dict | None = None) -> tuple[int | None, str]:
        """The best node for the task, or (None, why). With `memo` (one per job in a round) and
        only node-local scorers (a node's score depends on that node alone), the scores of the
        previous identical task are reused and only the node it went to is re-scored: placing a
        task changes nothing else, and free resources only shrink while a job is placed, so the
        candidates can only shrink too."""
        free = ctx.txn.free
        ok = ctx.snap.up.copy()
        for f in self.profile.filters:
            m = f.filter(ctx, job, task, free)
            ok &= m.ok
            if not ok.any():
                return None, m.reason or f"filter {f.name}"
        if self._first_fit:
            return int(np.argmax(ok)), ""   # the first node that fits (ok.any() holds here)
        if memo is not None and self._local_scores and memo.get("demand") == task.demand:
            full = memo["scores"]
            n = memo["last"]
            full[n] = self._combined(ctx, job, task, free, np.array([n]))[0] if ok[n] else -np.inf
            masked = np.where(ok, full, -np.inf)
            return int(np.argmax(masked)), ""
        cand = np.flatnonzero(ok)
        total = self._combined(ctx, job, task, free, cand)
        if memo is not None and self._local_scores:
            full = np.full(len(ok), -np.inf)
            full[cand] = total
            memo["demand"], memo["scores"] = task.demand, full
        return int(cand[int(np.argmax(total))]), ""

    def _combined(self, ctx, job, task, free, cand) -> np.ndarray:
        """Weighted sum of the profile's scorers over candidate nodes (each checked in [0, 1])."""
        total = np.zeros(len(cand))
        for scorer, w in self.profile.scorers:
            s = np.asarray(scorer.score(ctx, job, task, free, cand), dtype=np.float64)
            if self.check_scores and (s.shape != cand.shape or (s < -1e-9).any() or (s > 1 + 1e-9).any()
                                      or np.isnan(s).any()):
                raise AssertionError(f"scorer {scorer.name} returned scores outside [0, 1]: {s[:5]}")
            total += w * s
        return total

    # -- applying a plan's effects to the records ----------------------------------------------
    def _after_apply(self, plan: Plan, now: float) -> None:
        for d in plan.ordered():
            rec = self.jobs[d.job_id]
            kind = type(d).__name__.lower()
            if kind == "suspend":
                self._settle_service(rec, now)
                rec.placed.clear()
                self.running.pop(rec.job_id, None)
                rec.state = JobState.SUSPENDED
                rec.preemptions += 1
                self._enqueue(rec)
                self.log.append((now, "suspend", rec.job_id, ""))
                continue
            self._settle_service(rec, now)
            if kind == "migrate":
                rec.placed = {tp.task: tp for tp in d.placements}
                rec.migrations += 1
            elif kind == "resize":
                rec.tasks = d.tasks
                rec.placed = {tp.task: tp for tp in d.placements}
            else:  # launch / resume
                for tp in d.placements:
                    rec.placed[tp.task] = tp
            self.log.append((now, kind, rec.job_id,
                             ";".join(f"{tp.task}@{tp.node}" for tp in d.placements)))
            whole = not rec.unplaced()
            if whole or rec.spec.kind == "tasks":
                if rec.first_start_s is None:
                    rec.first_start_s = now
                rec.state = JobState.RUNNING
                self.running[rec.job_id] = rec
                rec._service_since = now
            else:
                rec.state = JobState.PARTIAL
            if whole:
                self._remove_from_queue(rec)

    def execute(self, plan: Plan, backend) -> None:
        """Apply a plan made outside a round (an operator's migrate, a runtime re-attaching to
        jobs that kept running while its server was down) and record its effects."""
        if len(plan):
            backend.apply(plan)
            self._after_apply(plan, backend.now())

    # -- policy errors (real runtime) ------------------------------------------------------
    def _contained_round(self, backend, now: float) -> Plan:
        """`round`, with an exception in it contained (see the module docstring). Each retry
        holds one more job, so this ends after at most one round per job plus one."""
        name = self.profile.spec.name
        for _ in range(len(self.jobs) + 1):
            try:
                return self.round(backend.snapshot())
            except Exception as e:                     # a policy bug: contain it
                job_id = self._culprit(e)
                err = f"{type(e).__name__}: {e}"
                self.round_errors.append((now, job_id, err))
                if job_id is None:
                    reason = f"policy {name} failed in a round not attributable to one job ({err}); previous plan kept"
                    log.error("%s", reason, exc_info=True)
                    backend.policy_error(None, reason)
                    return Plan([])
                reason = f"policy {name} failed on this job: {err}"
                log.error("policy %s failed on job %s; job put on hold: %s", name, job_id, err, exc_info=True)
                backend.policy_error(job_id, reason)
                self.handle(ev.JobHeld(now, job_id, reason), backend)
        return Plan([])

    def _culprit(self, e: BaseException) -> str | None:
        """The job an exception raised in a round is about: the innermost frame below `round`
        that holds a job (a JobRecord or JobSpec local, or a job-id string local), else a known
        job id named in the message. Frames of `round` itself are skipped: its loop variables
        may name a job the error has nothing to do with."""
        frames = []
        tb, below = e.__traceback__, False
        while tb is not None:
            if below:
                frames.append(tb.tb_frame)
            elif tb.tb_frame.f_code is Scheduler.round.__code__:
                below = True
            tb = tb.tb_next
        for fr in reversed(frames):                 # innermost first
            for v in fr.f_locals.values():
                jid = (v.job_id if isinstance(v, (JobRecord, JobSpec))
                       else v if isinstance(v, str) and v in self.jobs else None)
                if jid is not None and jid in self.jobs and self.jobs[jid].state not in _SETTLED:
                    return jid
        named = [w for w in _JOB_ID_RE.findall(str(e)) if w in self.jobs]
        return named[0] if len(set(named)) == 1 else None

    # -- the loop ---------------------------------------------------------------------------
    def run(self, backend, *, progress: Callable[[float, int], None] | None = None) -> None:
        n_batches = 0
        self._stats = backend.job_stats
        while True:
            batch = backend.poll()
            if batch is None:
                break
            for e in batch:
                self.handle(e, backend)
            now = backend.now()
            round_s = self.profile.round_s
            # Without event rounds a change waits (dirty) for the next multiple of round_s.
            if self.profile.event_rounds or self._ticked or now % round_s == 0:
                if self._dirty and self.queue or self._dirty and self.profile.actions:
                    plan = (self._contained_round(backend, now)
                            if getattr(backend, "contain_policy_errors", False)
                            else self.round(backend.snapshot()))
                    if len(plan):
                        backend.apply(plan)
                        self._after_apply(plan, now)
                self._dirty = False
            self._ticked = False
            if round_s and self._next_tick is None and (self.queue or self.running):
                rs = float(round_s)
                self._next_tick = now + rs if self.profile.event_rounds else (math.floor(now / rs) + 1) * rs
                backend.wake_at(self._next_tick)
            alloc, eff, partial = backend.usage()
            last = self.timeline[-1] if self.timeline else None
            sample = (now, alloc, eff, partial, len(self.running), len(self.queue))
            if last is None or last[1:] != sample[1:]:
                if last is not None and last[0] == now:
                    self.timeline[-1] = sample
                else:
                    self.timeline.append(sample)
            n_batches += 1
            if progress is not None and n_batches % 512 == 0:
                progress(now, self.n_done)
        if progress is not None:
            progress(backend.now(), self.n_done)
