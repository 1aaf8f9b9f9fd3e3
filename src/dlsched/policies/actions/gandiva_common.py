"""What Gandiva's mechanisms share (Xiao et al., "Gandiva: Introspective Cluster Scheduling for
Deep Learning", OSDI 2018; seed 001): decisions that carry their switch cost, transaction
helpers that issue them, affinity-aware GPU picking, and a clock of each job's last restart.

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
from dlsched.core.types import GPU, Launch, Migrate, Resize, Resume, Suspend
from dlsched.scheduler.events import JobFinish
from dlsched.workload.packing import SwitchCost

_EPS = 1e-9


# -- transaction helpers --------------------------------------------------------------------------
def demands(rec, placements) -> list:
    return [rec.tasks[tp.task].vector for tp in placements]


def suspend(txn, rec, cost: SwitchCost) -> None:
    """Suspend a running job (as Transaction.release, with a costed Suspend)."""
    placements = list(rec.placed.values())
    for tp, d in zip(placements, demands(rec, placements)):
        txn.free[tp.node] += d
        if tp.gpu_ids:
            txn.gpu_load[tp.node, list(tp.gpu_ids)] -= 1
    txn.released.add(rec.job_id)
    txn.plan.add(Suspend(rec.job_id, cost=cost))


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


def free_placement(ctx, rec, tasks=None, *, exclude=(), nodes=None, free=None, load=None) -> tuple | None:
    """Placements for all of a job's tasks on free resources (no GPU shared), on as few nodes
    as possible: one node if one holds the whole job (the tightest such node, best fit),
    otherwise nodes with the most free GPUs first; GPUs picked inside one affinity group when
    possible. Nothing is reserved (`free` / `load`: scratch arrays to read instead of the
    transaction's; they are not changed either). None when the job does not fit."""
    txn = ctx.txn
    cluster = ctx.snap.cluster
    tasks = list(rec.unplaced() if tasks is None else tasks)
    free = (txn.free if free is None else free).copy()
    load = (txn.gpu_load if load is None else load).copy()
    ok = ctx.snap.up.copy()
    if rec.spec.gpu_type is not None:
        types = cluster.gpu_types
        want = types.index(rec.spec.gpu_type) if rec.spec.gpu_type in types else -1
        ok &= cluster.node_gpu_type == want
    for n in exclude:
        ok[n] = False
    if nodes is not None:
        mask = np.zeros_like(ok)
        mask[list(nodes)] = True
        ok &= mask
    cand = np.flatnonzero(ok)
    if not len(cand):
        return None
    need = np.sum([t.vector for t in tasks], axis=0)
    whole = cand[(free[cand] >= need - _EPS).all(axis=1)]
    if len(whole):
        order = [int(whole[np.argsort(free[whole, GPU], kind="stable")[0]])]
    else:
        order = [int(n) for n in cand[np.argsort(-free[cand, GPU], kind="stable")]]
    out = []
    used_groups: dict[int, set] = {}
    order = np.asarray(order, dtype=np.int64)
    for task in tasks:
        placed = None
        for n in order[(free[order] >= task.vector - _EPS).all(axis=1)]:
            n = int(n)
            k = int(np.ceil(task.demand[GPU] - _EPS))
            gpu_ids = pick_gpus_affine(cluster, load, n, k, used_groups.get(n, ()))
            if gpu_ids is None:
                continue
            placed = (n, gpu_ids)
            break
        if placed is None:
            return None
        n, gpu_ids = placed
        free[n] -= task.vector
        for g in gpu_ids:
            load[n, g] += 1
        used_groups.setdefault(n, set()).update(cluster.gpu_groups(n, gpu_ids))
        out.append(T.TaskPlacement(task.index, n, gpu_ids))
    return tuple(out)


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


def find_action(ctx, cls):
    """The profile's instance of an action class, or None (actions cooperate through it)."""
    return ctx.action(cls)


def is_whole_dl(rec) -> bool:
    """A DL job with GPUs, all of its tasks placed or none (what the mechanisms act on)."""
    return rec.spec.kind == "dl" and any(t.demand[GPU] > 0 for t in rec.tasks)
