"""Job records and the round's context: what the Scheduler keeps per job, and what a policy sees.

Job states are part of the policy contract (JobState); records are owned by the Scheduler and
read by policies, never written by them (the conformance suite checks a round leaves them as
they were)."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable

import numpy as np

from dlsched.cluster.state import Snapshot
from dlsched.core.types import GPU, JobSpec, Status, TaskPlacement, TaskSpec
from dlsched.scheduler.transaction import Transaction


class JobState(enum.Enum):
    PENDING = "pending"        # nothing placed yet
    PARTIAL = "partial"        # some tasks placed (non-gang profiles); holds them
    RUNNING = "running"        # every task placed
    SUSPENDED = "suspended"    # preempted or stopped; waits to be placed again
    DONE = "done"
    HELD = "held"              # stopped by an operator (real runtime); not queued until released
    REJECTED = "rejected"      # can never fit this cluster


_EMPTY = MappingProxyType({})
_NO_TASKS: frozenset = frozenset()
_SETTLED = (JobState.DONE, JobState.HELD, JobState.REJECTED)   # not in the queue, not running


class WhyBox:
    """One scheduler's last round's explanation (placing.Explained), shared by its records: a
    new round replaces `ex`, and no record is touched (a deep queue's round would otherwise cost
    a write per waiting job). `rest`: the last admission walk's refusals answered at once
    (dlsched.tenancy.view.RestWhy), likewise read when asked."""
    __slots__ = ("ex", "rest")

    def __init__(self) -> None:
        self.ex = None
        self.rest = None


@dataclass(eq=False, slots=True)
class JobRecord:
    """The scheduler's view of one job."""
    spec: JobSpec
    tasks: tuple[TaskSpec, ...]
    state: JobState = JobState.PENDING
    placed: dict[int, TaskPlacement] = field(default_factory=dict)
    # tasks of a bag that ended: one shared empty frozenset until the first ends (a 1M-job run
    # keeps 1M records; an empty set each was 216 bytes), then a set of the job's own
    done_tasks: set[int] | frozenset = _NO_TASKS
    first_start_s: float | None = None
    finish_s: float | None = None
    preemptions: int = 0
    migrations: int = 0
    attained_gpu_s: float = 0.0      # GPU-seconds of service so far (LAS, Tiresias)
    _service_since: float | None = None
    reject_reason: str = ""
    key: tuple = ()
    queued: bool = False             # in Scheduler.queue (kept by _enqueue / _remove_from_queue)
    # why the last round left it waiting: `why` (a property) reads the round's Explained (its
    # box: the scheduler's, shared by its records) and falls back to the reason set by hand
    _why: str = ""
    _box: "WhyBox | None" = None
    _need: tuple | None = None       # (tasks, GPUs of them all, GPUs of the first): gpu_need's
    _held: tuple | None = None       # (placed, its size, tasks, GPUs): held_gpus's
    # the spec's, kept as a field: read for every waiting job in every round's loops (a
    # property cost 7 s of a deep-queue run's 80 under the profiler; bench_policies.py --deep)
    job_id: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.job_id = self.spec.job_id

    @property
    def why(self) -> str:
        """Why the last round left it waiting ("why pending?"): the placement's reason for a job
        the round tried, "" for one it decided, the round's word for the others of its queue
        (dlsched.scheduler.placing.Explained), the admission walk's for the jobs it refused at
        once (dlsched.tenancy.view.RestWhy), else the reason last set (tenancy's refusals)."""
        box = self._box
        if box is None:
            return self._why
        ex = box.ex
        if ex is not None:
            r = ex.reason(self.job_id)
            if r is not None:
                return r
        rest = box.rest
        if rest is not None:
            r = rest.reason(self.job_id)
            if r is not None:
                return r
        return self._why

    @why.setter
    def why(self, value: str) -> None:
        self._why = value

    @property
    def submit_time_s(self) -> float:
        return self.spec.submit_time_s

    def unplaced(self) -> list[TaskSpec]:
        if not self.placed and not self.done_tasks:      # (most calls: a job not placed yet)
            return list(self.tasks)
        if not self.done_tasks and len(self.placed) == len(self.tasks):   # placed whole
            return []
        return [t for t in self.tasks if t.index not in self.placed and t.index not in self.done_tasks]

    def gpu_need(self) -> tuple[float, float]:
        """(GPUs all its unplaced tasks ask for, GPUs the first of them asks for), kept while
        nothing of the job is placed (the deep-queue checks: Placing.cannot_fit, Preempt)."""
        if self.placed or self.done_tasks:
            todo = self.unplaced()
            return float(sum(t.demand[GPU] for t in todo)), (float(todo[0].demand[GPU]) if todo else 0.0)
        c = self._need
        if c is None or c[0] is not self.tasks:
            tasks = self.tasks
            c = self._need = (tasks, float(sum(t.demand[GPU] for t in tasks)),
                              float(tasks[0].demand[GPU]) if tasks else 0.0)
        return c[1], c[2]

    def held_gpus(self) -> float:
        """The GPUs its placed tasks ask for, kept until its placement changes (`_held`: the
        scheduler drops it wherever it settles the job's service, before every change to
        `placed`; the dict, its size and `tasks` are checked too). Asked of every running job
        several times a round by SRTF's and preempt's walks (bench_policies.py --deep)."""
        placed, tasks = self.placed, self.tasks
        if not placed:
            return 0.0       # (not kept: a finished job's record keeps no cache, 96 B of each at 1M jobs)
        c = self._held
        if c is not None and c[0] is placed and c[1] == len(placed) and c[2] is tasks:
            return c[3]
        v = float(sum([tasks[i].demand[GPU] for i in placed]))   # (a list: the same sum, same order)
        self._held = (placed, len(placed), tasks, v)
        return v

    def attained(self, now: float) -> float:
        extra = 0.0
        if self._service_since is not None:
            extra = (now - self._service_since) * self.held_gpus()
        return self.attained_gpu_s + extra


class RoundContext:
    """What a policy sees in a round: read-only views plus the transaction, the only thing a
    round may change (see dlsched.scheduler.framework for each hook's contract).

    snap     the cluster (immutable Snapshot: free, up, gpu_load, capacity, now)
    txn      the round's Transaction (reserve, commit through `commit`, release, migrate...)
    now      the round's time (seconds)
    jobs     every job's record by id (read-only mapping; records are read, never written)
    queue    the waiting jobs in the order's order (a list the round owns)
    running  the jobs holding all their tasks, in arrival order of their records
    rng      the run's seeded numpy Generator
    allocation  the round's allocation (read-only {job_id: tasks}, see framework.Allocate):
             empty until the allocator ran and for allocators that never resize
    stats    the backend's per-job counters: stats(job_id) -> dict with the keys of
             dlsched.scheduler.backend.STATS_KEYS; None outside a run
    goodput  the backend's fitted goodput of a job whose model it measures (the runtime's
             `goodput_model(job_id, init_batch, max_batch)`: dlsched.runtime.goodput), or None
    notes    None, or a dict through which one component of the profile tells a later one a
             fact of this round (Optimus's allocator tells its placer which jobs may need
             anything); it goes with the round
    keyed    whether `queue` is in its records' key order (r.key ascending): False under a
             tenancy, whose admission walk orders the queue by queues and shares
    keys_fall  whether the order says a running job's key never rises while it runs and a
             waiting job's stays as keyed (SRTF, SJF: `running_keys_fall`), with `keyed`
    """
    __slots__ = ("snap", "txn", "now", "jobs", "queue", "rng", "stats", "allocation", "notes", "goodput",
                 "keyed", "keys_fall", "_sched")

    def __init__(self, snap: Snapshot, txn: Transaction, now: float, jobs, queue: list, rng: np.random.Generator,
                 sched, stats: Callable[[str], dict] | None = None):
        self.snap, self.txn, self.now = snap, txn, now
        self.jobs = jobs if isinstance(jobs, MappingProxyType) else MappingProxyType(jobs)
        self.queue, self.rng, self.stats, self._sched = queue, rng, stats, sched
        self.allocation = _EMPTY
        self.notes: dict | None = None
        self.goodput = getattr(sched, "_goodput", None)
        self.keyed = getattr(sched, "tenancy", None) is None
        order = getattr(getattr(sched, "profile", None), "order", None)
        self.keys_fall = self.keyed and bool(getattr(order, "running_keys_fall", False))

    @property
    def cluster(self):
        return self.snap.cluster

    @property
    def running(self) -> list[JobRecord]:
        """Jobs holding all their tasks (in arrival order of their records)."""
        return list(self._sched.running.values())

    def is_running(self, job_id: str) -> bool:
        return job_id in self._sched.running

    @property
    def n_running(self) -> int:
        return len(self._sched.running)

    @property
    def n_waiting(self) -> int:
        return len(self._sched.queue)

    def commit(self, rec: JobRecord, *, gang: bool | None = None) -> Status:
        """Commit what this round reserved for `rec` (gang: the profile's, unless given): a Launch
        or Resume decision, or, for a gang that is not whole, nothing (its reservations are
        given back)."""
        return self._sched.commit(rec, self, gang=gang)

    def order_key(self, rec: JobRecord) -> tuple:
        """The profile order's full key of a job (with (submit_time_s, job_id) appended)."""
        return (*self._sched.profile.order.key(rec, self), rec.submit_time_s, rec.job_id)

    def order_keys(self, recs: list[JobRecord]) -> list[tuple]:
        """`order_key` of each record, in one call to the order (`Order.keys`)."""
        return [(*k, r.spec.submit_time_s, r.job_id)
                for k, r in zip(self._sched.profile.order.keys(recs, self), recs)]

    def feasible(self, job: JobSpec, task: TaskSpec, free: np.ndarray) -> np.ndarray:
        """Nodes that are up and pass every filter of the profile for this task on `free`."""
        ok = self.snap.up.copy()
        for f in self._sched.profile.filters:
            ok &= f.filter(self, job, task, free).ok
        return ok

    def action(self, cls):
        """The profile's component that is an instance of `cls` (an action or a placer), or
        None: components of one system cooperate through it (Gandiva's time slicing and
        packing)."""
        prof = self._sched.profile
        for a in (*prof.actions, *prof.placers):
            if isinstance(a, cls):
                return a
        return None

    def choose_node(self, job: JobSpec, task: TaskSpec, *, txn: Transaction | None = None,
                    allowed: np.ndarray | None = None) -> tuple[int | None, str]:
        """The profile's placement engine for one task: (node, "") or (None, why).

        The choice the round's own per-task placement makes (Scheduler.choose_node): the nodes
        that are up, in `allowed` (a bool mask over all nodes; None: every node) and pass every
        filter of the profile, then the profile's scorers by weight, ties to the lowest node id.
        It is evaluated on `txn` (None: the round's transaction): its `free` array, and its
        reservations, which filters such as co-location read. Policies that try placements
        (preemption's "would they fit?", migration, defragmentation) call it on a fork
        (`ctx.txn.fork()`), reserve the answer there, and turn the trial into decisions on
        `ctx.txn` only once the whole job fits: one placement engine for trials and decisions.

        Pure: reads the given transaction and the round's view, reserves nothing and changes
        neither transaction (the caller reserves); the same arguments on the same state give
        the same answer."""
        view = self
        if txn is not None and txn is not self.txn:
            view = RoundContext.__new__(RoundContext)     # the same view over the trial transaction
            for attr in RoundContext.__slots__:
                if hasattr(self, attr):
                    setattr(view, attr, getattr(self, attr))
            view.txn = txn
        return self._sched.choose_node(view, job, task, None, allowed)
