"""The Scheduler: one object that turns events into rounds and rounds into Plans.

Run loop (`Scheduler.run(backend)`):

    while (events := backend.poll()) is not None:
        handle every event (arrival, finish, stop, node up/down, tick) -> job records
        if something changed (or a periodic tick came): plan = round(backend.snapshot())
        backend.apply(plan); record the utilisation sample

A round (`Scheduler.round`):
    1. order:    waiting jobs sorted by profile.order's key + (submit_time_s, job_id)
    2. allocate: the tasks each job should hold (default: what it asked for), as ctx.allocation;
                 a resizing allocator's is carried out by a placer (Optimus)
    3. place:    for each job in order, each unplaced task: filters -> candidate nodes ->
                 scorers (weighted) -> best node (ties: lowest node id) -> txn.reserve
                 then txn.commit(job, gang=profile.gang); with profile.blocking, the first job
                 that is not fully placed ends the placement phase (strict order)
    4. actions:  each action's act(ctx) (may suspend / migrate / launch through ctx.txn)
The wall-clock time of steps 1-4 is the round's scheduling time.

Policy errors. A backend whose `contain_policy_errors` is true (the real runtime: one bad job
must not take a shared cluster's scheduler down) gets `Scheduler.run` to contain an exception
raised in a round: the job it is attributed to (see dlsched.scheduler.contain.culprit) is put on hold through
`backend.policy_error(job_id, reason)` (the backend stops it if it runs and records the reason)
and the round is run again without it; a round that cannot be attributed to one job keeps the
previous plan (nothing changes) and says so through `backend.policy_error(None, reason)`. The
simulator does not contain errors: a policy bug there must stop the run loudly.

A non-gang profile places a DL job's workers one at a time; a job that got only some of them
holds them while it waits for the rest (it cannot train: "partial hold", the waste seed 002
describes, measured in partial_hold_gpu_s).

Rooms: one job's placement (filters, scorers, the best node, the commit, and why a job still
waits) is dlsched.scheduler.placing (Placing); the hand-tuned speed-ups of the loop (log records
built with tuple.__new__, fewer gen-0 collections while it runs) are dlsched.scheduler.hotpath
(LogWriter, fewer_collections). Both are mixed into or called by Scheduler, here.
"""
from __future__ import annotations

import copy
import logging
import math
import time as _time
from types import MappingProxyType
from typing import Callable

import numpy as np
from sortedcontainers import SortedKeyList

from dlsched.cluster.state import Snapshot
from dlsched.core.errors import DlschedError
from dlsched.core.types import Launch, Migrate, Plan, Resize, Resume, Suspend
from dlsched.scheduler import events as ev
from dlsched.scheduler.admission import NeverFits
from dlsched.scheduler.backend import capabilities_of, capability_gap
from dlsched.scheduler.context import _SETTLED, JobRecord, JobState, RoundContext, WhyBox  # noqa: F401 (re-exported)
from dlsched.scheduler.contain import contained_round
from dlsched.scheduler.eventlog import CompactLog, LogRecord, Rounds, Timeline, placed_detail
from dlsched.scheduler.fastplace import FastPlacer
from dlsched.scheduler.kept_order import KeptOrder
from dlsched.scheduler.user_order import ByUser
from dlsched.scheduler.refusal import RefusalIndex
from dlsched.scheduler.hotpath import LogWriter, fewer_collections
from dlsched.scheduler.placing import Placing, _key_of
from dlsched.scheduler.profile import Profile, build_profile, overrides as _overrides  # noqa: F401 (re-exported)
from dlsched.scheduler.transaction import Transaction

_EPS = 1e-9
log = logging.getLogger("dlsched.scheduler")

_KIND = {Launch: "launch", Resume: "resume", Migrate: "migrate", Resize: "resize", Suspend: "suspend"}


class Scheduler(LogWriter, Placing):
    """The run loop and the round of the module's docstring, over one record per job."""

    def __init__(self, profile: Profile, *, seed: int = 0, check_scores: bool = True, tenancy=None):
        self.profile = profile
        self.rng = np.random.default_rng(seed)
        self.check_scores = check_scores
        self.jobs: dict[str, JobRecord] = {}
        self._jobs_view = MappingProxyType(self.jobs)   # what policies see (read-only)
        self._fixed: set[str] = set()       # non-preemptible jobs (JobSpec.preemptible False)
        self._static = bool(profile.order.static)
        # waiting: PENDING, PARTIAL, SUSPENDED. A static order keeps them sorted by key; where the
        # list is lent (run: the simulator) in a SortedKeyList, whose insert and delete do not
        # move every record after the place as a list's do (half a million waiting: `python
        # benchmarks/bench_scale.py --jobs "" --million --networks 8`; docs/decisions/0061)
        self.queue: list[JobRecord] = []
        self.running: dict[str, JobRecord] = {}   # RUNNING (and PARTIAL tasks jobs that run)
        self.rounds = Rounds()                    # (time_s, wall_s, queued jobs) per round, in columns
        self._last_round: tuple[float, float, int] | None = None   # the round not yet committed
        self.log = CompactLog()                   # the typed event log (dlsched.scheduler.eventlog), in columns
        self.sink: Callable[[LogRecord], None] | None = None   # sees every record as it is written
        self.timeline = Timeline()    # (time, allocated, effective, partial GPUs, running, queued), in columns
        self.n_done = 0                           # finished or rejected
        self._dirty = False
        self._lend = False                        # set by run (the backend's lend_queue)
        self._first_fit = len(profile.scorers) == 1 and bool(profile.scorers[0][0].first_fit)
        self.never_fits = NeverFits(profile.filters)   # also asked at submit (the runtime)
        self._local_scores = all(sc.node_local for sc, _ in profile.scorers)
        self._fast = FastPlacer.for_profile(profile) if self._local_scores else None
        self._fits_only = len(profile.filters) == 1 and type(profile.filters[0]).__name__ == "FitsFilter"
        self._room: tuple | None = None           # Placing._refuse: the free GPUs of this round
        self._said: dict = {}                     # and its answers, by job shape and free GPUs
        self._dynamic = bool(profile.order.dynamic)
        self._kept = KeptOrder(profile.order) if not (self._static or self._dynamic) and \
            getattr(profile.order, "waiting_keys_kept", False) else \
            ByUser(profile.order, rekey=bool(profile.actions)) \
            if self._dynamic and getattr(profile.order, "key_per_user", False) else None
        # hooks with a body (the declared defaults do nothing: calling them would only cost)
        self._begin = _overrides(profile.order, "begin_round")
        self._pre_actions = [a for a in profile.actions if _overrides(a, "before_place")]
        self._post_actions = [a for a in profile.actions if _overrides(a, "act")]
        self._observers = [c for c in profile.components() if _overrides(c, "observe")]
        self._wakers = [c for c in profile.components() if _overrides(c, "next_wake")]
        self._stateful = [c for c in profile.components() if c.round_state]
        self._acts_on_running = bool(profile.actions or profile.placers)
        self._saved: list | None = None    # round_state before the last round not carried out yet
        self._next_tick: float | None = None
        self._ticked = False
        # Periodic rounds are skipped while quiet (see Component.quiet_until): _quiet_since is
        # the time of the last round, if it decided nothing and nothing happened since; the
        # time it is quiet until is asked of the components lazily, at the first periodic round
        # that could be skipped (most empty rounds are followed by an event, which resets it).
        self._quiet = [c for c in profile.components() if _overrides(c, "quiet_until")]
        self._can_be_quiet = len(self._quiet) == len(profile.components())
        self._quiet_since: float | None = None
        self._quiet_until: float | None = None
        self.rounds_skipped = 0
        self._stats: Callable[[str], dict] | None = None
        self._goodput = None
        self.round_errors: list[tuple[float, str | None, str]] = []   # (time, job or None, error)
        self._why_box = WhyBox()                  # the last round's "why pending?" (_explain)
        self._queue_extra: tuple | None = None    # queue_order's tail: (waiting, tenancy's refused)
        self._tried: set[str] = set()             # jobs the round's queue loop tried (_explain)
        self._skipped: tuple | None = None        # where the loop stopped, nothing fits (_stopped)
        self._refusal = RefusalIndex(profile.gang, self._fits_only)   # what could start (_stopped)
        # quotas and fair share over a queue tree (dlsched.tenancy.engine): None, one tenant
        self.tenancy = tenancy
        if tenancy is not None:
            tenancy.bind(self)
            self._observers.append(tenancy)
            self._wakers.append(tenancy)
            self._can_be_quiet = self._can_be_quiet and tenancy.can_be_quiet
            self._quiet.append(tenancy)

    def check_backend(self, backend) -> None:
        """Refuse to run a profile on a backend that cannot carry out what it decides (both
        named): never a silent degradation."""
        gap = capability_gap(self.profile.needs(), capabilities_of(backend))
        if gap:
            raise DlschedError(f"profile {self.profile.name} needs what backend {type(backend).__name__} "
                               f"cannot do: {gap}")

    def context(self, snap: Snapshot, txn: Transaction | None = None) -> RoundContext:
        """A round's context over `snap` (tests and tools build rounds by hand through this)."""
        return RoundContext(snap, txn or Transaction(snap), snap.now, self._jobs_view, [], self.rng, self, self._stats)

    def observe(self, now: float, events: list, applied: Plan | None) -> None:
        for c in self._observers:
            c.observe(now, events, applied)

    # -- the loop ---------------------------------------------------------------------------
    def run(self, backend, *, progress: Callable[[float, int], None] | None = None) -> None:
        self.check_backend(backend)
        use = getattr(backend, "use_capabilities", None)   # optional: modes a backend turns on
        if use is not None:
            use(frozenset(self.profile.needs()))
        self._stats = backend.job_stats
        self._goodput = getattr(backend, "goodput_model", None)    # optional (the runtime's)
        # skipping quiet rounds needs a backend whose state changes only through events
        self._can_be_quiet = self._can_be_quiet and bool(getattr(backend, "quiet_rounds", False))
        # a static order's round may read the waiting list itself where nothing reads the records
        # from another thread (the simulator; the runtime's API threads read the last round's)
        self._lend = bool(getattr(backend, "lend_queue", False))
        if self._lend and self._static and type(self.queue) is list:
            self.queue = SortedKeyList(self.queue, key=_key_of)
        with fewer_collections():           # (dlsched.scheduler.hotpath: a speed-up, not logic)
            # a backend may run the whole loop itself where it has a compiled one for this
            # profile (the simulator: dlsched.sim.fastloop), with the same records
            drive = getattr(backend, "drive", None)
            if drive is None or not drive(self, progress):
                self._run(backend, progress)

    def _run(self, backend, progress) -> None:
        n_batches = 0
        # what stays the same for the whole run, read once (the loop runs once per event time)
        poll, handle, usage, timeline = backend.poll, self.handle, backend.usage, self.timeline
        contain = getattr(backend, "contain_policy_errors", False)
        event_rounds, round_s = self.profile.event_rounds, self.profile.round_s
        # the timeline's last sample, as appended (the loop compares each new sample with it;
        # reading it back from the columns each time cost a tuple per event)
        last = timeline[-1] if len(timeline) else None
        while True:
            batch = poll()
            if batch is None:
                break
            for e in batch:
                handle(e, backend)
            now = backend.now()
            if self._observers:
                self.observe(now, batch, None)
            # Without event rounds a change waits (dirty) for the next multiple of round_s.
            if event_rounds or self._ticked or now % round_s == 0:
                # actions and placers may decide about running jobs with nobody waiting
                if self._dirty and self._is_quiet(now):
                    self.rounds_skipped += 1      # nothing happened and nothing can change yet
                elif self._dirty and (self.queue or self._acts_on_running):
                    plan = (contained_round(self, backend, now) if contain
                            else self.round(backend.snapshot()))
                    self.commit_round()
                    decided = len(plan.decisions)
                    if decided:
                        backend.apply(plan)
                        self._after_apply(plan, now)
                    for c in self._wakers:
                        t = c.next_wake(now)
                        if t is not None and t > now + _EPS:
                            backend.wake_at(t)
                    self._quiet_since, self._quiet_until = (None if decided else now), None
                self._dirty = False
            self._ticked = False
            # (no periodic round while nothing runs and only an event could change a round's
            # outcome: a queue its tenancy never admits ticked for ever)
            if round_s and self._next_tick is None and (self.queue or self.running) and \
                    (self.running or self._quiet_time() < math.inf):
                rs = float(round_s)
                self._next_tick = now + rs if event_rounds else (math.floor(now / rs) + 1) * rs
                backend.wake_at(self._next_tick)
            alloc, eff, partial = usage()
            n_run, n_queue = len(self.running), len(self.queue)
            if last is not None:
                if last[1:] != (alloc, eff, partial, n_run, n_queue):
                    sample = (now, alloc, eff, partial, n_run, n_queue)
                    if last[0] == now:
                        timeline[-1] = sample
                    else:
                        timeline.append(sample)
                    last = sample
            else:
                last = (now, alloc, eff, partial, n_run, n_queue)
                timeline.append(last)
            n_batches += 1
            if progress is not None and n_batches % 512 == 0:
                progress(now, self.n_done)
        if progress is not None:
            progress(backend.now(), self.n_done)

    # -- events ------------------------------------------------------------------------------
    def handle(self, e, backend) -> None:
        if not isinstance(e, ev.RoundTick):
            self._quiet_since = None          # something happened: the next round runs
        if isinstance(e, ev.JobArrival):
            self._on_arrival(e, backend)
        elif isinstance(e, ev.TaskFinish):
            rec = self.jobs[e.job_id]
            self._settle_service(rec, e.time)
            rec.placed.pop(e.task, None)
            if not rec.done_tasks:
                rec.done_tasks = set()         # the shared empty frozenset until now
            rec.done_tasks.add(e.task)
            self._log(e.time, "task_finish", rec.job_id, str(e.task))
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
            rec.key = ()                      # (a done job is never keyed again: 56 B of each)
            rec._need = None                  # (nor asked its need: 88 B of each; bench_scale.py --million)
            self._log(e.time, "finish", rec.job_id, "")
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
            self._log(e.time, "stopped", rec.job_id, e.reason)
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
            self._log(e.time, "held", rec.job_id, e.reason)
            self._dirty = True
        elif isinstance(e, ev.JobReleased):
            rec = self.jobs[e.job_id]
            if rec.state is JobState.HELD:
                # a job that ran before resumes from its checkpoint; one that never ran launches
                rec.state = JobState.SUSPENDED if rec.first_start_s is not None else JobState.PENDING
                self._enqueue(rec)
                self._log(e.time, "released", rec.job_id, "")
                self._dirty = True
        elif isinstance(e, (ev.NodeDown, ev.NodeUp)):
            self._log(e.time, type(e).__name__, "", str(e.node))
            self._dirty = True
        elif isinstance(e, ev.RoundTick):
            if self._next_tick is not None and e.time >= self._next_tick - _EPS:
                self._next_tick = None      # the periodic tick (not a component's wake)
            else:
                self._quiet_since = None        # a component's wake, a restarted server's kick
            self._dirty = True
            self._ticked = True

    def _on_arrival(self, e: ev.JobArrival, backend) -> None:
        job = e.job
        rec = JobRecord(job, job.tasks)
        rec._box = self._why_box
        self.jobs[job.job_id] = rec
        if not job.preemptible:
            self._fixed.add(job.job_id)
        self._log_rec((e.time, "arrival", job.job_id, "", (), None, False, job, None))
        reason = self.never_fits(job, backend)
        if not reason and self.tenancy is not None:
            reason = self.tenancy.never_fits(job)        # above its queue's limits: never admitted
        if reason:
            rec.state = JobState.REJECTED
            rec.reject_reason = reason
            self.n_done += 1
            self._log(e.time, "rejected", job.job_id, reason)
            return
        self._enqueue(rec)
        self._dirty = True

    def _settle_service(self, rec: JobRecord, now: float) -> None:
        """Called before every change to rec.placed, so held_gpus's cache goes (after its read)."""
        if rec._service_since is not None:
            rec.attained_gpu_s += (now - rec._service_since) * rec.held_gpus()
            rec._service_since = None
        rec._held = None       # (after the read: else kept on every finished record; bench_scale.py --million)

    # -- the round ---------------------------------------------------------------------------
    def round(self, snap: Snapshot) -> Plan:
        """One round over `snap`: the plan (not applied). Only what `commit_round` confirms
        stays: a round run again before that starts from the same policy state (idempotent)."""
        t0 = _time.perf_counter()
        if self._stateful:
            if self._saved is None:
                self._saved = [(c, {a: copy.deepcopy(getattr(c, a)) for a in c.round_state})
                               for c in self._stateful]
            else:                                  # the last round was not carried out: undo it
                for c, st in self._saved:
                    for a, v in st.items():
                        setattr(c, a, copy.deepcopy(v))
        txn = Transaction(snap)
        txn.fixed = self._fixed
        ctx = RoundContext(snap, txn, snap.now, self._jobs_view, [], self.rng, self, self._stats)
        if self._begin:
            ctx.queue = list(self.queue)          # the waiting jobs, not yet in order
            self.profile.order.begin_round(ctx)
        keyed_at = None                            # (decided, decisions) when the queue was keyed
        if self._static:
            # itself where lent (its changes until the next round are noted: Placing._note)
            queue = self.queue if self._lend else list(self.queue)
        elif self._kept is not None:
            queue = self._kept.ordered(ctx)           # kept_order.py, user_order.py
            keyed_at = (len(txn.decided), len(txn.plan.decisions))
        else:
            for rec, k in zip(self.queue, self.profile.order.keys(self.queue, ctx)):
                rec.key = (*k, rec.spec.submit_time_s, rec.job_id)
            queue = sorted(self.queue, key=lambda r: r.key)
            keyed_at = (len(txn.decided), len(txn.plan.decisions))
        waiting = queue
        if self.tenancy is not None:
            queue = self.tenancy.admit(queue, ctx)     # the admitted ones, in the walk's order
        ctx.queue = queue
        ctx.allocation = MappingProxyType(self.profile.allocator.allocate(queue, ctx))
        for action in self._pre_actions:
            action.before_place(ctx)
        for placer in self.profile.placers:
            placer.place(ctx)
        head = None                                # the job a blocking profile stopped at
        if self._dynamic:
            head = self._place_dynamic(queue, ctx, keyed_at if self.tenancy is None else None)
        elif self.tenancy is not None:
            self._place_per_queue(queue, ctx)
        else:
            head = self._place_in_order(queue, ctx)
        for action in self._post_actions:
            action.act(ctx)
        self._explain(queue, txn, head)
        if self.tenancy is not None:
            self._queue_extra = (tuple(waiting), self.tenancy.refused)   # (read in queue_order)
            self._walked = txn             # the accounts read its decisions once it is carried out
        self._last_round = (snap.now, _time.perf_counter() - t0, len(queue))
        self.rounds.append(self._last_round)
        return txn.plan

    # -- applying a plan's effects to the records ----------------------------------------------
    def _after_apply(self, plan: Plan, now: float) -> None:
        # a sink (the runtime's store) sees each record whole, as it is written
        append_placed = getattr(self.log, "append_placed", None) if self.sink is None else None
        for d in plan.ordered():
            rec = self.jobs[d.job_id]
            kind = _KIND.get(type(d)) or type(d).__name__.lower()
            if kind == "suspend":
                self._settle_service(rec, now)
                rec.placed.clear()
                self.running.pop(rec.job_id, None)
                rec.state = JobState.SUSPENDED
                rec.preemptions += 1
                self._enqueue(rec)
                self._log(now, "suspend", rec.job_id, d.reason, cost=d.cost)
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
            packed = isinstance(d, (Launch, Resume)) and d.packed
            if append_placed is not None:          # the detail is made when the record is read
                append_placed(now, kind, rec.job_id, d.placements, d.cost, packed)
            else:
                self._log_rec((now, kind, rec.job_id, placed_detail(d.placements), d.placements, d.cost,
                               packed, None, None))
            whole = not rec.unplaced()
            if whole or rec.spec.kind == "tasks":
                if rec.first_start_s is None:
                    rec.first_start_s = now
                rec.state = JobState.RUNNING
                self.running[rec.job_id] = rec
                rec._service_since = now
            else:
                rec.state = JobState.PARTIAL
                self._refusal.touch(rec)
            if whole:
                self._remove_from_queue(rec)
        if self._observers:
            self.observe(now, [], plan)

    def commit_round(self) -> None:
        """The last round's plan is the one carried out: its policy state changes stay, and the
        round goes into the log (a `round` record: its wall seconds and queued jobs)."""
        self._saved = None
        if self.tenancy is not None and getattr(self, "_walked", None) is not None:
            txn = self._walked
            self.tenancy.committed(txn.snap.now, txn.decided)
            self._walked = None
        if self._last_round is not None:
            now, wall, queued = self._last_round
            self._log_rec((now, "round", "", "", (), None, False, None, (wall, queued)))
            self._last_round = None

    def _is_quiet(self, now: float) -> bool:
        """Would a round now decide nothing? True only when the last round decided nothing,
        nothing happened since, and no component could decide otherwise before `now`."""
        return now < self._quiet_time()

    def _quiet_time(self) -> float:
        """Until when a round would decide nothing if no event comes (-inf: not quiet)."""
        if self._quiet_since is None or not self._can_be_quiet or not (self.queue or self._acts_on_running):
            return -math.inf  # (nobody waiting, nothing to do to running jobs: the round is cheap)
        if self._quiet_until is None:
            running = list(self.running.values())
            self._quiet_until = min((c.quiet_until(self._quiet_since, running) for c in self._quiet),
                                    default=math.inf)
        return self._quiet_until

    def execute(self, plan: Plan, backend) -> None:
        """Apply a plan made outside a round (an operator's migrate, a runtime re-attaching to
        jobs that kept running while its server was down) and record its effects."""
        if len(plan):
            self._quiet_since = None
            backend.apply(plan)
            self._after_apply(plan, backend.now())
