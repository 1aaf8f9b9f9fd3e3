"""What Gandiva's mechanisms share (Xiao et al., "Gandiva: Introspective Cluster Scheduling for
Deep Learning", OSDI 2018; seed 001): decisions that carry their switch cost, transaction
helpers that issue them, affinity-aware GPU picking, trial placement of a whole job through
the profile's placement engine on a fork of the round's transaction (migration,
defragmentation), and a clock of each job's last restart.

Costed decisions. Without a cost, the simulator charges its run-wide restart_delay_s for every
resume. Gandiva's suspend / resume is much cheaper (GPU memory to host memory at a mini-batch
boundary) and its migration costs a checkpoint transfer, so its actions fill the decisions'
`cost` field (dlsched.workload.packing.SwitchCost), and the simulator charges that instead
(dlsched.sim.switch_cost documents how). `packed = True` on a Launch / Resume starts the job in
packing mode (it runs beside the job already on its GPUs). A Resume on another server than the
one the job last ran on also pays the checkpoint's transfer: the simulator knows where it lies.

No module here is registered: it is a library for the gandiva_* actions.
"""
from __future__ import annotations

import numpy as np

from dlsched.core import types as T
from dlsched.core.types import GPU, Launch, Migrate, Resize, Resume
from dlsched.scheduler.events import JobArrival, JobFinish
from dlsched.workload.packing import SwitchCost

_EPS = 1e-9


# -- transaction helpers --------------------------------------------------------------------------
def demands(rec, placements) -> list:
    return [rec.tasks[tp.task].vector for tp in placements]


def suspend(txn, rec, cost: SwitchCost) -> None:
    """Suspend a running job (as Transaction.release, with a costed Suspend)."""
    placements = list(rec.placed.values())
    txn.release(rec.job_id, placements, demands(rec, placements), cost=cost)


def fits_except_gpu(free: np.ndarray, tasks, placements) -> bool:
    """Do these tasks fit their placements' nodes in every resource but GPUs (which time slicing
    and packing share)?"""
    need: dict[int, np.ndarray] = {}
    for task, tp in zip(tasks, placements):
        need[tp.node] = need.get(tp.node, 0.0) + task.vector
    return all((free[n, GPU + 1:] >= v[GPU + 1:] - _EPS).all() for n, v in need.items())


def start_on(ctx, rec, home, cost: SwitchCost, *, packed: bool = False) -> bool:
    """Start (Launch, or Resume if suspended) a waiting job on exactly `home` (task i on home[i]'s
    node and GPUs) with a costed decision; False (nothing reserved) when it does not fit in
    anything but GPUs."""
    txn = ctx.txn
    tasks = [rec.tasks[tp.task] for tp in home]
    if len(tasks) != len(rec.unplaced()) or not fits_except_gpu(txn.free, tasks, home):
        return False
    for task, tp in zip(tasks, home):
        txn.reserve(rec.job_id, task, tp.node, gpu_ids=tp.gpu_ids)
    if not ctx.commit(rec, gang=True).ok:   # pragma: no cover - all reserved
        return False
    _cost_last(txn, rec.job_id, cost, packed)
    return True


def _cost_last(txn, job_id: str, cost: SwitchCost, packed: bool = False) -> None:
    """Replace the plain Launch / Resume the commit just added for `job_id` by its costed twin."""
    decisions = txn.plan.decisions
    for i in range(len(decisions) - 1, -1, -1):
        d = decisions[i]
        if d.job_id == job_id and isinstance(d, (T.Launch, T.Resume)):
            cls = Resume if isinstance(d, T.Resume) else Launch
            decisions[i] = cls(d.job_id, d.placements, cost=cost, packed=packed)
            return


def move(txn, rec, new_placements, cost: SwitchCost) -> None:
    """Migrate a job (running or suspended) to new placements (as Transaction.migrate, costed)."""
    old = list(rec.placed.values())
    txn.unhold(old, demands(rec, old))
    txn.hold(new_placements, [rec.tasks[tp.task].vector for tp in new_placements])
    txn.decided.add(rec.job_id)
    txn.plan.add(Migrate(rec.job_id, tuple(new_placements), cost=cost))


def resize(txn, rec, new_tasks, new_placements, cost: SwitchCost) -> None:
    """Give a running job a new task set on new placements (grow / shrink), costed."""
    old = list(rec.placed.values())
    txn.unhold(old, demands(rec, old))
    txn.hold(new_placements, [new_tasks[tp.task].vector for tp in new_placements])
    txn.decided.add(rec.job_id)
    txn.plan.add(Resize(rec.job_id, tuple(new_tasks), tuple(new_placements), cost=cost))


# -- placement on free resources ------------------------------------------------------------------
def pick_gpus_affine(cluster, gpu_load: np.ndarray, node: int, k: int, prefer=()) -> tuple[int, ...] | None:
    """k free GPU slots of `node` (load 0 in `gpu_load`), kept inside one affinity group when
    possible: a group in `prefer` first (the job's other workers there), then the group with the
    fewest free GPUs that still holds all k (best fit), then the groups with most free GPUs.
    None: fewer than k free slots."""
    n = cluster.nodes[node].gpus
    load = gpu_load[node, :n]
    free = [g for g in range(n) if load[g] == 0]
    if len(free) < k:
        return None
    if k <= 0:
        return ()
    size = cluster.nodes[node].gpus_per_group
    if size <= 0:
        return tuple(free[:k])
    by_group: dict[int, list[int]] = {}
    for g in free:
        by_group.setdefault(g // size, []).append(g)
    pref = set(prefer)

    def key(grp):
        cnt = len(by_group[grp])
        return (grp not in pref, cnt < k, cnt if cnt >= k else -cnt, grp)
    out: list[int] = []
    for grp in sorted(by_group, key=key):
        out.extend(by_group[grp][: k - len(out)])
        if len(out) == k:
            break
    return tuple(out)


def usable_nodes(ctx, rec) -> np.ndarray:
    """Nodes that are up and have the GPU type the job asks for (bool mask over all nodes)."""
    cluster = ctx.snap.cluster
    ok = ctx.snap.up.copy()
    mask = cluster.type_mask(rec.spec)
    if mask is not None:
        ok &= mask
    return ok


def trial_placement(ctx, trial, rec, tasks=None, *, allowed: np.ndarray | None = None) -> tuple | None:
    """Place all of a job's tasks (default: its unplaced ones) on `trial`, a fork of the round's
    transaction (ctx.txn.fork()), through the profile's placement engine (ctx.choose_node:
    filters, then weighted scores, ties to the lowest node id) within Gandiva's rules, which
    say which nodes the engine is offered (its `allowed`), tier by tier:

    - free resources only, no GPU shared: a node is offered for a task only when its free
      resources hold the task and it has that many GPU slots with nothing on them;
    - as few nodes as possible (getNodes, gandiva_place): when nodes can hold the whole job,
      those with the fewest free GPUs first (best fit: large holes stay for large jobs), and
      the job's other tasks follow its first one there; otherwise the nodes with the most free
      GPUs (as the trial starts) first. A tier the engine turns down entirely (the profile's
      filters reject all of it) gives way to the next;
    - affinity: the task's GPUs on the node the engine chose are picked inside one affinity
      group when possible, a group of the job's other tasks first (pick_gpus_affine).

    `allowed`: the nodes the caller's rule allows (bool mask; None: all; the job's GPU type and
    the nodes that are up apply anyway). The placements (in task order), reserved on `trial`
    under the job's id; None when the job does not fit whole, and then nothing stays reserved
    for it on `trial`. The round's transaction is never touched: the caller turns a successful
    trial into decisions (move, start_on)."""
    cluster = ctx.snap.cluster
    tasks = list(rec.unplaced() if tasks is None else tasks)
    ok = usable_nodes(ctx, rec)
    if allowed is not None:
        ok &= allowed
    if not tasks or not ok.any():
        return None
    ks = [int(np.ceil(t.demand[GPU] - _EPS)) for t in tasks]
    need = np.sum([t.vector for t in tasks], axis=0)
    whole = ok & (trial.free >= need - _EPS).all(axis=1) & (_idle_slots(trial.gpu_load) >= sum(ks))
    fewest_free = trial.free[:, GPU].copy()          # best fit for a whole job
    most_free = -fewest_free                         # spread: most free GPUs first
    out = []
    used_groups: dict[int, set] = {}
    home = None                                      # the node that holds the whole job
    for task, k in zip(tasks, ks):
        offer = ok & (trial.free >= task.vector - _EPS).all(axis=1)
        if k > 0:
            offer &= _idle_slots(trial.gpu_load) >= k
        if home is not None:
            node = _engine_pick(ctx, trial, rec.spec, task, offer & (np.arange(len(offer)) == home), None)
        else:
            node = None
            if not out and whole.any():
                node = home = _engine_pick(ctx, trial, rec.spec, task, offer & whole, fewest_free)
            if node is None:
                node = _engine_pick(ctx, trial, rec.spec, task, offer, most_free)
        if node is None:
            trial.discard(rec.job_id)
            return None
        gpu_ids = pick_gpus_affine(cluster, trial.gpu_load, node, k, used_groups.get(node, ()))
        if gpu_ids is None:   # pragma: no cover - offered nodes have k idle slots
            trial.discard(rec.job_id)
            return None
        out.append(trial.reserve(rec.job_id, task, node, gpu_ids=gpu_ids))
        used_groups.setdefault(node, set()).update(cluster.gpu_groups(node, gpu_ids))
    return tuple(out)


def _engine_pick(ctx, trial, spec, task, offer: np.ndarray, pref: np.ndarray | None) -> int | None:
    """The engine's node for a task among the offered nodes (on the trial's free resources),
    asked tier by tier of Gandiva's preference `pref` (a value per node, lower first; None: one
    tier); None when it turns every tier down."""
    if not offer.any():
        return None
    tiers = [offer] if pref is None else [offer & (pref == v) for v in np.unique(pref[offer])]
    for allowed in tiers:
        node, _ = ctx.choose_node(spec, task, txn=trial, allowed=allowed)
        if node is not None:
            return node
    return None


def _idle_slots(gpu_load: np.ndarray) -> np.ndarray:
    """GPU slots with nothing on them, per node (slots a node does not have are -1)."""
    return (gpu_load == 0).sum(axis=1)


# -- restarts -------------------------------------------------------------------------------------
class RestartClock:
    """When each job last (re)started: launch, resume, migration or resize, from the plans the
    backend applied (whichever action made them), fed by its owner's observe(). Used for the
    minimum run time between two preemptions of a job (anti-thrash)."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}

    def observe(self, now: float, events: list, applied) -> None:
        if applied is not None:
            for d in applied.decisions:
                if not isinstance(d, T.Suspend):
                    self.started[d.job_id] = now
        for e in events:
            if isinstance(e, JobFinish):
                self.started.pop(e.job_id, None)

    def ran_for(self, rec, now: float) -> float:
        since = self.started.get(rec.job_id, rec.first_start_s)
        return float("inf") if since is None else now - since


class ChangedJobs:
    """The jobs whose records (state, placements, tasks) may have changed since the last
    `take()`: those named by the plans applied and the events observed (fed by its owner's
    observe()). Lets a component keep a per-job view between rounds and update it for these
    jobs alone, where a pass over every running job at every round cost O(running).

    Before its owner has observed anything (a round built by hand, outside Scheduler.run, whose
    records may change unseen), `take()` answers None: rebuild from the records. `arrivals`:
    name arriving jobs too (a JobArrival carries its job, not a job_id), for a view of waiting
    jobs (Optimus's kept allocation)."""

    def __init__(self, arrivals: bool = False) -> None:
        self.jobs: set[str] = set()
        self.live = False
        self.arrivals = arrivals

    def observe(self, events: list, applied) -> None:
        self.live = True
        jobs = self.jobs
        if applied is not None:
            for d in applied.decisions:
                jobs.add(d.job_id)
        for e in events:
            j = getattr(e, "job_id", None)
            if j is not None:
                jobs.add(j)
            elif self.arrivals and type(e) is JobArrival:
                jobs.add(e.job.job_id)

    def take(self) -> set[str] | None:
        """The jobs changed since the last take (and forget them); None: rebuild everything."""
        jobs, self.jobs = self.jobs, set()
        return jobs if self.live else None


def find_action(ctx, cls, owner=None):
    """The profile's instance of an action class, or None (actions cooperate through it).
    With `owner` (the asking component) the answer is kept on it for the round's scheduler:
    a profile's components do not change, and ctx.action's isinstance checks against the
    Protocol classes cost a few microseconds each, several times a round."""
    if owner is None:
        return ctx.action(cls)
    sched = getattr(ctx, "_sched", None)
    memo = owner.__dict__.get("_found_actions")
    if memo is None or memo[0] is not sched:
        memo = owner._found_actions = (sched, {})
    found = memo[1]
    if cls not in found:
        found[cls] = ctx.action(cls)
    return found[cls]


def is_whole_dl(rec) -> bool:
    """A DL job with GPUs, all of its tasks placed or none (what the mechanisms act on)."""
    return rec.spec.kind == "dl" and any(t.demand[GPU] > 0 for t in rec.tasks)


# -- round state, saved cheaply -------------------------------------------------------------------
def saved_round_state(save):
    """The `_round_state` property that each Gandiva component lists as its one round_state
    attribute, in place of its round-mutable attributes themselves.

    The framework deep-copies every round_state attribute before each round (and puts the copy
    back when the round is not carried out). A generic deepcopy of each attribute, once per
    round, cost more than the rest of Gandiva's round on the whole Philly trace (16 deep copies
    of, there, empty containers at each of 173,134 rounds). Instead, reading `_round_state`
    calls `save(component)`, which copies the attributes itself (knowing what in them is
    immutable and can be shared: a Ring's home, a log's tuples) and returns a function
    `restore(component)` that sets them back from fresh copies of what it saved (it may be
    called more than once). copy.deepcopy hands a function back as it is (functions are
    atomic to it, as documented), so the framework's copy of the property's value is the
    closure itself, and writing the property (the framework putting a round back) calls it."""
    def put(self, restore) -> None:
        restore(self)
    return property(save, put, doc="round state (see gandiva_common.saved_round_state)")
