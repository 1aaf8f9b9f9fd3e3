"""The round's transaction: tentative placements over a copy of the snapshot's free resources.

Contract
- Policies reserve resources here, never in ClusterState. `reserve` deducts a task's demand from
  `free` (and marks its GPUs in `gpu_load`); `discard(job)` gives back everything the job
  reserved in this round; `commit(job, gang=...)` turns the job's reservations into a plan
  decision, or, for a gang job that is not whole, discards them (all or nothing).
- `release(job)` (for actions: suspend, migrate) returns the resources a running job holds to
  `free` for the rest of the round and records the Suspend decision.
- The transaction never sees another round; nothing it does reaches the cluster until the
  backend applies the plan.
"""
from __future__ import annotations

import math

import numpy as np

from dlsched.cluster.state import Snapshot
from dlsched.core.types import (GPU, Launch, Migrate, Plan, Resize, Resume, Status, Suspend,
                                TaskPlacement, TaskSpec, demand_vector)

_EPS = 1e-9


class Transaction:
    """Copy on write: `free`, `gpu_load` and `gpu_used` are the transaction's own copies, made
    the first time each attribute is read (a read may be followed by a write in place: the
    attribute hands out the array it owns). Until then the snapshot's read-only arrays stand for
    them: `free_view()` reads free without copying (the per-task fit check). A round that
    reserves nothing (most rounds of a blocked FIFO queue) copies nothing. Valid because a
    snapshot does not change while its round runs (the backend applies the plan after)."""
    __slots__ = ("snap", "_free", "_gpu_load", "_gpu_used", "_tentative", "plan", "released", "decided", "fixed")

    def __init__(self, snap: Snapshot):
        self.snap = snap
        self._free = self._gpu_load = self._gpu_used = None
        self._tentative: dict[str, list[tuple[TaskPlacement, np.ndarray]]] = {}
        self.plan = Plan()
        self.released: set[str] = set()
        self.decided: set[str] = set()     # jobs given a Launch / Resume in this round
        # jobs that declared themselves non-preemptible (JobSpec.preemptible False; the
        # scheduler sets this): release and migrate refuse them, a policy must not choose them
        self.fixed: frozenset | set = frozenset()

    # Column-major: filters read one resource over all nodes at a time.
    @property
    def free(self) -> np.ndarray:
        f = self._free
        if f is None:
            f = self._free = np.array(self.snap.free, dtype=np.float64, order="F")
        return f

    @free.setter
    def free(self, value: np.ndarray) -> None:
        self._free = value

    def free_view(self) -> np.ndarray:
        """`free` to read only: the snapshot's array while the transaction has not copied it (the
        same values; a caller must not keep it across a reservation)."""
        f = self._free
        if f is not None:
            return f
        f = self.snap.free
        if f.flags.f_contiguous and f.dtype == np.float64:
            return f
        return self.free            # another layout (a runtime's copy): the transaction's own

    @property
    def gpu_load(self) -> np.ndarray:
        g = self._gpu_load
        if g is None:
            g = self._gpu_load = self.snap.gpu_load.copy()
        return g

    @gpu_load.setter
    def gpu_load(self, value: np.ndarray) -> None:
        self._gpu_load = value

    @property
    def gpu_used(self) -> np.ndarray | None:
        """How much of each GPU is held (fractional tasks go where they fit); None: not known."""
        u = self._gpu_used
        if u is None and self.snap.gpu_used is not None:
            u = self._gpu_used = self.snap.gpu_used.copy()
        return u

    @gpu_used.setter
    def gpu_used(self, value: np.ndarray | None) -> None:
        self._gpu_used = value

    def fork(self) -> "Transaction":
        """A trial copy: reservations, releases and commits on it change neither this
        transaction nor its plan. Preemption tries "would the waiting jobs fit with these
        victims gone?" on a fork, and keeps the answer only (one placement engine for trials
        and real decisions)."""
        t = Transaction.__new__(Transaction)
        t.snap = self.snap
        # what this transaction has not copied yet is still the snapshot's: the fork shares it
        t._free = None if self._free is None else self._free.copy(order="F")
        t._gpu_load = None if self._gpu_load is None else self._gpu_load.copy()
        t._gpu_used = None if self._gpu_used is None else self._gpu_used.copy()
        t._tentative = {j: list(v) for j, v in self._tentative.items()}
        t.plan = Plan(list(self.plan.decisions))
        t.released, t.decided = set(self.released), set(self.decided)
        t.fixed = self.fixed
        return t

    # -- reservations ----------------------------------------------------------------------
    def pick_gpus(self, node: int, gpus: float) -> tuple[int, ...]:
        """The least-loaded GPU slots of `node` (lowest index first among equals). A fraction of
        a GPU goes to the fullest GPU it still fits on (best fit: never onto a GPU a whole task
        holds), the least-loaded one only when it fits on none (a policy over-subscribing)."""
        k = math.ceil(gpus - _EPS)
        if k <= 0:
            return ()
        load = self.gpu_load[node]
        n = self.snap.cluster.nodes[node].gpus
        if k == 1 and gpus < 1 - _EPS and self.gpu_used is not None:
            used = self.gpu_used[node, :n]
            room = used + gpus <= 1 + _EPS
            if room.any():
                return (int(np.argmax(np.where(room, used, -1.0))),)
        # In Python on the node's few slots (numpy's per-call cost is most of a tiny argmin):
        # the least-loaded slots, lowest index first among equals, as a stable argsort.
        ld = load[:n].tolist()
        if k == 1:
            return (ld.index(min(ld)),)
        return tuple(sorted(range(n), key=ld.__getitem__)[:k])

    def reserve(self, job_id: str, task: TaskSpec, node: int,
                gpu_ids: tuple[int, ...] | None = None) -> TaskPlacement:
        demand = task.vector
        gpus = float(task.demand[GPU])      # demand[GPU]'s value, without a numpy scalar
        if gpu_ids is None:
            gpu_ids = self.pick_gpus(node, gpus)
        self.free[node] -= demand
        if gpu_ids:
            load = self.gpu_load[node]
            for g in gpu_ids:
                load[g] += 1
            self._use(node, gpu_ids, gpus, 1)
        tp = TaskPlacement(task.index, int(node), tuple(gpu_ids))
        self._tentative.setdefault(job_id, []).append((tp, demand))
        return tp

    def reserve_block(self, job_id: str, tasks, node: int) -> None:
        """reserve() for several tasks of one demand on one node at once (same GPUs as reserving
        them one by one: each takes the least-loaded slots, lowest index first)."""
        if not tasks:
            return
        demand = tasks[0].vector
        node = int(node)
        if self.gpu_used is not None and 0 < demand[GPU] < 1 - _EPS:
            for t in tasks:                  # fractions: best fit, one at a time
                self.reserve(job_id, t, node)
            return
        self.free[node] -= len(tasks) * demand
        k = int(np.ceil(tasks[0].demand[GPU] - _EPS))
        load_row = self.gpu_load[node]
        n = self.snap.cluster.nodes[node].gpus
        load = load_row[:n].tolist() if k > 0 else []
        # what each task adds to the GPUs' held fraction, added in Python floats one task at a
        # time (the same sums as _use's per-task numpy adds) and written back once
        used = self.gpu_used[node, :n].tolist() if self.gpu_used is not None and k > 0 else None
        out = self._tentative.setdefault(job_id, [])
        out_tp = out.append
        if k == 1 and load and min(load) == max(load):
            # Equal loads (a node with nothing on it): the least-loaded slot, lowest index first,
            # is slot i mod n for the i-th task.
            n_slots = len(load)
            share = float(demand[GPU])          # one slot per task
            for i, t in enumerate(tasks):
                out_tp((TaskPlacement(t.index, node, (i % n_slots,)), demand))
                if used is not None:
                    used[i % n_slots] += share
            base, extra = divmod(len(tasks), n_slots)
            load_row[:n] = [x + base + (1 if i < extra else 0) for i, x in enumerate(load)]
        elif k == 0:
            out.extend([(TaskPlacement(t.index, node, ()), demand) for t in tasks])
        else:
            slots = range(len(load))
            for t in tasks:
                if k == 1:
                    ids = (load.index(min(load)),)
                elif k > 1:
                    ids = tuple(sorted(slots, key=lambda i: (load[i], i))[:k])   # as pick_gpus
                else:
                    ids = ()
                for g in ids:
                    load[g] += 1
                if used is not None and ids:
                    share = demand[GPU] / len(ids)
                    for g in ids:
                        used[g] += share
                out_tp((TaskPlacement(t.index, node, ids), demand))
            if k > 0:
                load_row[:n] = load
        if used is not None:
            self.gpu_used[node, :n] = used

    def record(self, job_id: str, tasks, nodes, gpu_ids) -> None:
        """Reservations whose resources and GPU slots the caller has already taken, task by task
        as reserve() does (the compiled placement, scheduler/fastplace.py)."""
        out = self._tentative.get(job_id)
        if out is None:
            out = self._tentative[job_id] = []
        demand = vec = None
        for t, n, ids in zip(tasks, nodes, gpu_ids):
            if t.demand is not demand:           # a job's tasks mostly share one demand tuple
                demand = t.demand
                vec = demand_vector(demand)
            out.append((TaskPlacement(t.index, n, ids), vec))

    def _use(self, node: int, gpu_ids, gpus: float, sign: int) -> None:
        if self.gpu_used is not None and gpu_ids:
            share, used = sign * gpus / len(gpu_ids), self.gpu_used[node]
            for g in gpu_ids:               # element by element: a fancy-indexed add costs 5x more
                used[g] += share

    def has_reserved(self) -> bool:
        """Whether any job holds reservations not yet committed or discarded."""
        return bool(self._tentative)

    def reserved(self, job_id: str) -> list[TaskPlacement]:
        return [tp for tp, _ in self._tentative.get(job_id, [])]

    def discard(self, job_id: str) -> None:
        for tp, demand in self._tentative.pop(job_id, []):
            self.free[tp.node] += demand
            load = self.gpu_load[tp.node]
            for g in tp.gpu_ids:
                load[g] -= 1
            self._use(tp.node, tp.gpu_ids, demand[GPU], -1)

    def commit(self, job_id: str, *, total_tasks: int, already_placed: int, gang: bool,
               resume: bool = False) -> Status:
        """Make the job's reservations a Launch (or Resume) decision.

        With gang=True the job must end up with all `total_tasks` placed; otherwise everything it
        reserved this round is discarded and the Status says how far it got."""
        placed = self._tentative.get(job_id, [])
        have = already_placed + len(placed)
        if gang and have < total_tasks:
            self.discard(job_id)
            return Status.unschedulable(f"gang: {have} of {total_tasks} tasks fit")
        self._tentative.pop(job_id, None)
        if placed:
            tps = tuple(tp for tp, _ in placed)
            self.plan.add(Resume(job_id, tps) if resume else Launch(job_id, tps))
            self.decided.add(job_id)
        if have < total_tasks:
            return Status.unschedulable(f"partial: {have} of {total_tasks} tasks placed")
        return Status.success()

    # -- actions on running jobs ------------------------------------------------------------
    def unhold(self, placements, demands) -> None:
        """Return what a running job holds to `free` for the rest of the round, recording no
        decision (the caller decides: a Resize, or holding the same placements again)."""
        self._shift(placements, demands, 1)

    def hold(self, placements, demands) -> None:
        """Take placements back (the inverse of unhold)."""
        self._shift(placements, demands, -1)

    def hold_or_release(self, job_id: str, placements, demands) -> None:
        """A running job unheld for a move that could not be made: it takes its placements back
        if they are still free, else it is suspended (the placers of resizing allocators)."""
        fits = all(np.all(d <= self.free[tp.node] + _EPS) for tp, d in zip(placements, demands))
        self.hold(placements, demands)
        if not fits:
            self.release(job_id, placements, demands)

    def _shift(self, placements, demands, sign: int) -> None:
        if not placements:
            return
        nodes = [tp.node for tp in placements]
        np.add.at(self.free, nodes, sign * np.asarray(demands, dtype=np.float64))
        gn = [tp.node for tp in placements for _ in tp.gpu_ids]
        if gn:
            np.add.at(self.gpu_load, (gn, [g for tp in placements for g in tp.gpu_ids]), -sign)
            for tp, d in zip(placements, demands):
                self._use(tp.node, tp.gpu_ids, d[GPU], -sign)

    def commit_resize(self, job_id: str, tasks: tuple[TaskSpec, ...], adapt=None) -> None:
        """Make the job's reservations of this round (one per task of `tasks`) a Resize: the job
        restarts with this task list on these placements (running or not). `adapt`: see
        Resize.adapt."""
        placed = self._tentative.pop(job_id, [])
        tps = tuple(tp for tp, _ in placed)
        if sorted(tp.task for tp in tps) != [t.index for t in tasks]:
            raise ValueError(f"resize of {job_id}: placements {tps} do not cover its {len(tasks)} tasks")
        self.plan.add(Resize(job_id, tuple(tasks), tps) if adapt is None else
                      Resize(job_id, tuple(tasks), tps, adapt=adapt))
        self.decided.add(job_id)

    def release(self, job_id: str, placements, demands, cost=None, reason: str = "") -> None:
        """Suspend a running job: its resources are free for the rest of this round (`cost`: the
        Suspend's switch cost, for a backend that charges it; `reason`: why, for the log)."""
        if job_id in self.fixed:
            raise ValueError(f"{job_id} is not preemptible (its spec says preemptible: false)")
        for tp, demand in zip(placements, demands):
            self.free[tp.node] += np.asarray(demand, dtype=np.float64)
            if tp.gpu_ids:
                self.gpu_load[tp.node, list(tp.gpu_ids)] -= 1
                self._use(tp.node, tp.gpu_ids, demand[GPU], -1)
        self.released.add(job_id)
        self.plan.add(Suspend(job_id, cost=cost, reason=reason) if cost is not None or reason else Suspend(job_id))

    def migrate(self, job_id: str, old, demands, new_placements: tuple[TaskPlacement, ...]) -> None:
        """Move a running job: free its old placements and take the new ones."""
        if job_id in self.fixed:
            raise ValueError(f"{job_id} is not preemptible (its spec says preemptible: false)")
        for tp, demand in zip(old, demands):
            self.free[tp.node] += np.asarray(demand, dtype=np.float64)
            if tp.gpu_ids:
                self.gpu_load[tp.node, list(tp.gpu_ids)] -= 1
                self._use(tp.node, tp.gpu_ids, demand[GPU], -1)
        for tp, demand in zip(new_placements, demands):
            self.free[tp.node] -= np.asarray(demand, dtype=np.float64)
            if tp.gpu_ids:
                self.gpu_load[tp.node, list(tp.gpu_ids)] += 1
                self._use(tp.node, tp.gpu_ids, demand[GPU], 1)
        self.plan.add(Migrate(job_id, tuple(new_placements)))
