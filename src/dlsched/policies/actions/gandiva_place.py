"""Gandiva's reactive node allocation (Xiao et al., "Gandiva: Introspective Cluster Scheduling for
Deep Learning", OSDI 2018; seed 001, Algorithm 1 getNodes), as a job-level placer.

Gandiva keeps jobs of the same size (total GPUs) on the same servers, so that jobs that must
time-share a GPU are alike and a server's GPUs stay usable by the next job of that size. For a
job asking for G = job.gpu GPUs (workers x GPUs per worker):

    affinity(n) = sizes of the jobs holding GPUs on n (normally one size; {} : "affinity 0")
    load(n)     = tasks per GPU on n = sum_g gpu_load[n, g] / gpus(n)
    nodes0 = {n : G in affinity(n)}                       same affinity
    nodes1 = argmin_{n in nodes0} load(n)                 the least-loaded of those
    nodes2 = {n : affinity(n) = {}}                       unallocated servers
    nodes3 = {n : free GPUs(n) > 0}                       any node with free GPUs

    if nodes1 and height(nodes1) = load < 1 and the job fits on their free GPUs -> nodes1
    elif sum_{nodes2} GPUs >= G and the job fits there                  -> nodes2
    elif the job fits on the free GPUs of nodes3                        -> nodes3  (relax affinity)
    elif nodes1 and oversubscribe                                       -> nodes1  (time-share)
    else                                                                -> stays queued

"Fits" means every resource of every task fits the node's free vector; over-subscription relaxes
this for GPUs only (a worker goes on the least-loaded GPUs of nodes1 even though they are in use),
never beyond `max_load` tasks on one GPU, and CPU, memory, disk and network must still fit. Within
a node set, workers go on as few nodes as possible: when one node can hold the whole job, the one
with the fewest free GPUs (best fit, which keeps large holes for large jobs); otherwise nodes with
the most free GPUs first. Parameter servers (no GPU) go on the job's worker nodes if they fit,
else on the first node that fits. A job is placed whole or not at all (gang).

Only whole DL jobs with GPUs are placed here; bags of tasks, jobs without GPUs and partly placed
jobs are left to the round's ordinary (first-fit) loop, which also retries the jobs left queued
here and cannot place them either (nodes3 already covers every node with room).

Intra-server locality: on a node with GPU affinity groups (gpus_per_group), a job's GPUs are
picked inside one group when they can be (the group its other workers use first, then the
tightest group that holds them: gandiva_common.pick_gpus_affine).

What is modelled, and what is not: with `oversubscribe`, jobs sharing a GPU run side by side
at the simulator's interference factor (dlsched.workload.speed). Gandiva's suspend / resume
round-robin is the gandiva_timeslice action (the `gandiva` profile turns this module's
over-subscription off and lets time slicing do it); packing, migration and grow-shrink are
gandiva_pack, gandiva_migrate and gandiva_grow.

Rooms: the affinity bookkeeping (which job sizes sit on each node, kept between rounds, and the
round's view of it) is dlsched.policies.actions.gandiva_affinity; the compiled first step for a
job of one worker is dlsched.policies.actions.gandiva_onestep.
"""
from __future__ import annotations

import math

import numpy as np

from dlsched.core.types import GPU
from dlsched.policies.actions import gandiva_onestep as _compiled
from dlsched.policies.actions.gandiva_affinity import _Affinity, _last_placements, _NodeView
from dlsched.policies.actions.gandiva_common import ChangedJobs, pick_gpus_affine
from dlsched.policies.actions.gandiva_onestep import _NOBODY_FITS, _one_step
from dlsched.scheduler.framework import Place, ProfileSpec, register, register_profile

_EPS = 1e-9
#: jobs of one worker placed through numpy before the compiled steps take over (the same answers;
#: loading the compiled functions costs about 0.5 s, worth it only for long runs)
JIT_AFTER = 5000


@register("place", "gandiva_place", source="Xiao et al., OSDI 2018 (Gandiva, seed 001 Algorithm 1)")
class GandivaPlace(Place):
    """Gandiva's reactive getNodes: same-size affinity, unallocated servers, relaxed, over-subscribed."""
    needs = frozenset(('gpu_sharing',))  # backend capabilities (dlsched.scheduler.backend)

    def __init__(self, oversubscribe: bool = True, max_load: int = 2) -> None:
        if max_load < 1:
            raise ValueError(f"max_load must be >= 1, got {max_load}")
        self.oversubscribe = oversubscribe
        if not oversubscribe:   # over-subscription is what shares GPUs
            self.needs = frozenset()
        self.max_load = max_load
        # Which job sizes hold GPUs on each node, for the records as the last applied plan and
        # events left them: kept between rounds and updated only for the jobs observe() saw
        # change (a round used to start with a pass over every running job).
        self._affinity: _Affinity | None = None
        self._changed = ChangedJobs()
        self._one_jobs = 0          # jobs of one worker placed so far (see JIT_AFTER)

    def observe(self, now: float, events: list, applied) -> None:
        """Note the jobs whose placements may have changed (the affinity view is updated for
        them alone, at the next round that needs it)."""
        self._changed.observe(events, applied)

    def quiet_until(self, now: float, running) -> float:
        return math.inf   # decides from the cluster, the queue and the round's plan alone

    def _view(self, ctx) -> "_NodeView":
        aff = self._affinity
        changed = self._changed.take()
        if aff is None or changed is None or aff.cluster is not ctx.snap.cluster:
            aff = self._affinity = _Affinity.build(ctx)     # from scratch: the records
        else:
            aff.sync(ctx, changed)
        return _NodeView(ctx, aff)

    def place(self, ctx) -> None:
        txn = ctx.txn
        view = None   # built on the first job it is needed for: most rounds have none
        # Jobs of a shape that could not be placed since the last placement cannot be placed
        # now either (same state, same answer): skip them without searching again.
        failed: set[tuple] = set()
        for rec in ctx.queue:
            spec = rec.spec
            if (rec.job_id in txn.decided or spec.kind != "dl" or rec.placed
                    or rec.job_id in txn.released):
                continue   # not a whole DL job waiting to start: the round's loop handles it
            tasks = rec.unplaced()
            size = float(sum(t.demand[GPU] for t in tasks))
            if size <= 0:
                continue   # a job without GPUs has no affinity: plain placement
            shape = (tuple(t.demand for t in tasks), spec.gpu_type)
            if shape in failed:
                continue
            if view is None:
                view = self._view(ctx)
            if self._get_nodes(ctx, view, rec, tasks, size):
                ctx.commit(rec, gang=True)
                view.add_job(size, _last_placements(txn, rec.job_id))
                failed.clear()
            else:
                failed.add(shape)

    # -- Algorithm 1 --------------------------------------------------------------------------
    def _get_nodes(self, ctx, view: "_NodeView", rec, tasks, size: float) -> bool:
        """Reserve the job's tasks per Algorithm 1; True when all of them are reserved."""
        ok = view.eligible(rec.spec)
        step = None
        if len(tasks) == 1 and tasks[0].demand[GPU] > 0:
            self._one_jobs += 1      # compiled only for long runs: loading it costs ~0.5 s
            step = _one_step() if self._one_jobs > JIT_AFTER else None
        if step is not None:
            return self._get_nodes_one(ctx, view, rec, tasks, size, ok, step)
        nodes1 = self._nodes1(view, ok, size)
        if len(nodes1) and view.load(nodes1[:1])[0] < 1 and self._place(ctx, rec, tasks, nodes1):
            return True                                    # same affinity with free GPUs
        nodes2 = np.flatnonzero(ok & view.unallocated())
        if view.gpus[nodes2].sum() >= size - _EPS and self._place(ctx, rec, tasks, nodes2):
            return True                                    # unallocated GPU servers
        nodes3 = np.flatnonzero(ok & (ctx.txn.free[:, GPU] > _EPS))
        if len(nodes3) and self._place(ctx, rec, tasks, nodes3):
            return True                                    # relax the affinity constraint
        if self.oversubscribe and nodes1 is None:
            nodes1 = self._nodes1(view, ok, size)
        if self.oversubscribe and len(nodes1) and self._place(ctx, rec, tasks, nodes1, over=True):
            return True                                    # over-subscribe (time-share GPUs)
        return False                                       # the job stays queued

    def _get_nodes_one(self, ctx, view, rec, tasks, size: float, ok: np.ndarray, step) -> bool:
        """`_get_nodes` for a job of one worker and nothing else (most jobs of a trace): each
        step's node chosen by a compiled pass (`_one_step_py`, `_tightest_py`: the answers of
        `_place_one` on nodes1, nodes2 and nodes3), then reserved as `_pick_free` does. Where
        `_pick_free` would go past that node (affinity groups, max_load) the step's node set
        is built and `_place` asked, as in `_get_nodes`."""
        txn = ctx.txn
        task = tasks[0]
        floor = task.vector - _EPS
        nodes1 = None                                      # built only where needed
        # 1. same affinity, least loaded, with free GPUs
        best = step(ok, view.has_size(size), txn.gpu_load, view.gpus, txn.free, floor)
        if best >= 0:
            if self._take_one(txn, rec.job_id, task, best):
                return True
            nodes1 = self._nodes1(view, ok, size)
            if self._place(ctx, rec, tasks, nodes1):
                return True
        elif best == _NOBODY_FITS:
            txn.discard(rec.job_id)                        # as _place: nothing fits there
        # 2. unallocated servers, when they have the GPUs
        unalloc = view.unallocated()
        best = _compiled._tightest(ok, unalloc, True, view.gpus, size - _EPS, txn.free, floor)
        if best >= 0:
            if self._take_one(txn, rec.job_id, task, best):
                return True
            if self._place(ctx, rec, tasks, np.flatnonzero(ok & unalloc)):
                return True
        elif best == _NOBODY_FITS:
            txn.discard(rec.job_id)
        # 3. any node with free GPUs (affinity relaxed)
        best = _compiled._tightest(ok, ok, False, view.gpus, 0.0, txn.free, floor)
        if best >= 0:
            if self._take_one(txn, rec.job_id, task, best):
                return True
            if self._place(ctx, rec, tasks, np.flatnonzero(ok & (txn.free[:, GPU] > _EPS))):
                return True
        elif best == _NOBODY_FITS:
            txn.discard(rec.job_id)
        # 4. over-subscription
        if self.oversubscribe:
            if nodes1 is None:
                nodes1 = self._nodes1(view, ok, size)
            if len(nodes1) and self._place(ctx, rec, tasks, nodes1, over=True):
                return True
        return False

    @staticmethod
    def _nodes1(view, ok: np.ndarray, size: float) -> np.ndarray:
        """Algorithm 1's nodes1: the least-loaded of the nodes whose affinity includes `size`."""
        nodes0 = np.flatnonzero(ok & view.has_size(size))
        if not len(nodes0):
            return nodes0
        load0 = view.load(nodes0)                      # the loads of nodes0 alone
        return nodes0[np.abs(load0 - load0.min()) < _EPS]

    def _take_one(self, txn, job_id: str, task, node: int) -> bool:
        """Reserve the one worker on `node`, the tightest that holds it, as `_pick_free` does
        there; False (nothing reserved) when `_pick_free` would not stop at it (affinity
        groups, or its GPUs over max_load)."""
        if txn.snap.cluster.nodes[node].gpus_per_group:
            return False
        gpu_ids = txn.pick_gpus(node, task.demand[GPU])
        if not self._under_cap(txn, node, gpu_ids):
            return False
        txn.reserve(job_id, task, node, gpu_ids=gpu_ids)
        return True

    def _place(self, ctx, rec, tasks, nodes: np.ndarray, over: bool = False) -> bool:
        """Reserve every task of the job on `nodes` (workers) or wherever it fits (parameter
        servers); on failure give back what this attempt reserved."""
        txn = ctx.txn
        workers = [t for t in tasks if t.demand[GPU] > 0]
        others = [t for t in tasks if t.demand[GPU] <= 0]
        if not over and not others and len(workers) == 1:
            one = self._place_one(txn, rec.job_id, workers[0], nodes)
            if one is not None:
                return one
        order = nodes if over else self._packed_order(txn.free, nodes, workers)
        used: list[int] = []
        for i, task in enumerate(workers):
            pick = (self._pick_over(txn, task, order, used) if over
                    else self._pick_free(txn, task, order, rec.job_id, sum(t.demand[GPU] for t in workers[i:])))
            if pick is None:
                txn.discard(rec.job_id)
                return False
            node, gpu_ids = pick
            txn.reserve(rec.job_id, task, node, gpu_ids=gpu_ids)
            if node not in used:
                used.append(node)
        rest = np.flatnonzero(ctx.snap.up) if others else ()
        for task in others:
            node = self._first_fit(txn.free, task, [*used, *rest])
            if node is None:
                txn.discard(rec.job_id)
                return False
            txn.reserve(rec.job_id, task, node)
        return True

    def _place_one(self, txn, job_id: str, task, nodes: np.ndarray) -> bool | None:
        """`_place` for a job of one worker and nothing else (most jobs of a trace), with fewer
        array operations and the same answer, or None where it would differ (ask `_place`).

        For one worker, need (the workers' summed vector) is the task's vector, so the nodes
        that hold the whole job are those whose free vector covers the task: `_packed_order`
        puts the tightest of them (fewest free GPUs, then lowest id) first, and `_pick_free`
        takes it unless its GPUs would exceed max_load. None (nothing reserved) when that node
        has affinity groups or is over the cap: `_pick_free` would go on down the order."""
        free = txn.free
        demand = task.vector
        fit = nodes[(free[nodes] >= demand - _EPS).all(axis=1)]
        if not len(fit):
            txn.discard(job_id)                            # as _place: nothing fits
            return False
        best = int(fit[int(np.argmin(free[fit, GPU]))])    # first of the fewest: a stable sort's [0]
        if txn.snap.cluster.nodes[best].gpus_per_group:
            return None
        gpu_ids = txn.pick_gpus(best, task.demand[GPU])
        if not self._under_cap(txn, best, gpu_ids):
            return None
        txn.reserve(job_id, task, best, gpu_ids=gpu_ids)
        return True

    @staticmethod
    def _packed_order(free: np.ndarray, nodes: np.ndarray, workers) -> np.ndarray:
        """Fewest nodes: the nodes with the most free GPUs first (ties: lowest node id), but
        if some node can hold every worker, the tightest such node before all of them (best
        fit keeps the large holes for large jobs)."""
        by_free = nodes[np.argsort(-free[nodes, GPU], kind="stable")]
        need = np.sum([t.vector for t in workers], axis=0)
        whole = nodes[(free[nodes] >= need - _EPS).all(axis=1)]
        if not len(whole):
            return by_free
        best = whole[np.argsort(free[whole, GPU], kind="stable")[0]]
        return np.concatenate(([best], by_free[by_free != best]))

    def _pick_free(self, txn, task, order, job_id: str = "", left: float = 0.0) -> tuple[int, tuple[int, ...]] | None:
        """The first node in `order` whose free vector covers the task (GPUs included); its GPUs
        inside one affinity group when the node has groups (the group chosen for all `left`
        GPUs the job's workers still need there, as far as the node's free GPUs go)."""
        demand = task.vector
        cluster = txn.snap.cluster
        for n in order:
            if (txn.free[n] >= demand - _EPS).all():
                gpu_ids = None
                if cluster.nodes[int(n)].gpus_per_group:
                    mine = [g for tp in txn.reserved(job_id) if tp.node == n for g in tp.gpu_ids]
                    k = int(np.ceil(task.demand[GPU] - _EPS))
                    free_k = int(np.sum(txn.gpu_load[n, :cluster.nodes[int(n)].gpus] == 0))
                    want = max(k, min(int(np.ceil(left - _EPS)), free_k))
                    gpu_ids = pick_gpus_affine(cluster, txn.gpu_load, int(n), want,
                                               prefer=cluster.gpu_groups(int(n), mine) if mine else ())
                    gpu_ids = None if gpu_ids is None else gpu_ids[:k]
                if gpu_ids is None:
                    gpu_ids = txn.pick_gpus(int(n), task.demand[GPU])
                if self._under_cap(txn, int(n), gpu_ids):
                    return int(n), gpu_ids
        return None

    def _pick_over(self, txn, task, nodes, used) -> tuple[int, tuple[int, ...]] | None:
        """Over-subscription: the node of `nodes` whose least-loaded GPUs are least loaded
        (then one the job already uses, then the lowest id), CPU / memory / disk / network
        fitting and no GPU above max_load."""
        demand = task.vector
        best, best_key = None, None
        for n in nodes:
            n = int(n)
            if not (txn.free[n, GPU + 1:] >= demand[GPU + 1:] - _EPS).all():
                continue
            gpu_ids = txn.pick_gpus(n, task.demand[GPU])
            if not self._under_cap(txn, n, gpu_ids):
                continue
            key = (int(txn.gpu_load[n, list(gpu_ids)].max()), n not in used, n)
            if best_key is None or key < best_key:
                best, best_key = (n, gpu_ids), key
        return best

    def _under_cap(self, txn, node: int, gpu_ids) -> bool:
        load = txn.gpu_load[node].tolist()   # Python ints: no numpy scalar per GPU
        return all(load[g] + 1 <= self.max_load for g in gpu_ids)

    @staticmethod
    def _first_fit(free: np.ndarray, task, nodes) -> int | None:
        demand = task.vector
        for n in nodes:
            if (free[n] >= demand - _EPS).all():
                return int(n)
        return None


register_profile(ProfileSpec(
    name="gandiva-reactive", source="Xiao et al., OSDI 2018 (seed 001)",
    description="Gandiva's reactive mode: FIFO, jobs of the same size share servers, unallocated "
                "servers next, then any free GPUs, then GPU over-subscription (time-sharing); gang",
    order="fifo", filters=("fits",), scores=(("first_fit", 1.0),), placers=("gandiva_place",),
    gang=True, blocking=False))
