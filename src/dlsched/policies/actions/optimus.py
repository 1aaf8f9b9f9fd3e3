"""Optimus's placement: carries out the allocation of the allocator `optimus`
(dlsched.policies.allocate.optimus, where the algorithm and its sources are described), and the
`optimus` profile.

Jobs whose (w, p) did not change keep their placements; a running job given nothing is suspended;
the others are placed in ascending order of task count, each all or nothing:
- all-reduce jobs chunk by chunk on the node with the most free GPUs (Pollux's Optimus), each
  node taking as many workers as it can;
- PS jobs on the fewest servers that hold them with equal numbers of workers and PS on each
  (the paper).
A job that cannot be moved keeps its place when it still fits, or is suspended.

This is a job-level placer (the `place` point), not the per-task engine: its rule is about the
whole job (fewest servers, even split), and a bucketed pool of nodes by free GPUs finds the
most-free nodes in O(tasks + nodes) per round, where the per-task engine with a job-dependent
score re-scores every node for every task (docs/decisions/0020, "Optimus: allocator and
placer").
"""
from __future__ import annotations

import bisect
import math

import numpy as np

from dlsched.core.types import GPU, Role
from dlsched.policies.allocate.optimus import placer_hint, shape
from dlsched.scheduler.context import JobState
from dlsched.scheduler.framework import Timeless, Place, ProfileSpec, register, register_profile

_EPS = 1e-9


def _covers(row, demand, dims) -> bool:
    """A node's free row covers one task of `demand` on every resource it asks for."""
    for r in dims:
        if row[r] + _EPS < demand[r]:
            return False
    return True


class _GpuPool:
    """One round's up nodes by whole free GPUs, so that the most-free nodes are found without
    sorting the cluster for every job: `top` walks the levels from the highest down, ascending
    ids within a level (each level a numpy scan; the first usually holds the job). A node's
    level is brought up to date after each reservation or give-back (`update`)."""

    def __init__(self, free: np.ndarray, up: np.ndarray) -> None:
        self.free = free
        self.up = up
        lv = np.floor(free[:, GPU] + _EPS)
        if not up.all():
            lv[~up] = -np.inf                     # never a candidate
        self.lv = lv

    def update(self, nodes) -> None:
        lv, free, up = self.lv, self.free, self.up
        for n in set(int(x) for x in nodes):
            if up[n]:
                lv[n] = math.floor(float(free[n, GPU]) + _EPS)

    def top(self, m: int, demand, dims, min_gpus: int) -> list[int]:
        """Up to m nodes that can take one task of `demand`: most free GPUs first, lowest id
        among equals."""
        out: list[int] = []
        free, lv = self.free, self.lv
        i = int(lv.argmax())                  # the first node of the highest level
        c = lv[i]
        if m == 1 and c >= min_gpus:          # (one task: that node, when it holds it)
            if _covers(free[i], demand, dims):
                return [i]
        while c >= min_gpus:
            for n in np.flatnonzero(lv == c).tolist():
                if _covers(free[n], demand, dims):
                    out.append(n)
                    if len(out) == m:
                        return out
            below = lv[lv < c]
            if not len(below):
                break
            c = below.max()
        return out


def _holds(free: list, a: int, wd: list, b: int, pd: list) -> bool:
    """free + eps >= a * wd + b * pd on every resource (Python floats: the same IEEE sums as the
    numpy expression, without its per-call cost)."""
    for f, w, p in zip(free, wd, pd):
        if not f + _EPS >= a * w + b * p:
            return False
    return True


class _BucketPool(_GpuPool):
    """The same choice as _GpuPool, with the up nodes bucketed by whole free GPUs once per round
    (ascending ids in each bucket): building the buckets costs a pass over the cluster, so it
    pays on a large cluster where one round places many jobs (a scan per job over 16,000 nodes
    made the 4,000-job round 1.4 s, against 0.95 s with buckets); _GpuPool scans instead, which
    is cheaper for the many small rounds of a trace on a few hundred nodes."""
    LARGE = 4096            # up nodes from which the round uses buckets

    def __init__(self, free: np.ndarray, up: np.ndarray) -> None:
        self.free = free
        self.up = up
        fg = np.floor(free[:, GPU] + _EPS).astype(np.int64)
        self.level = fg.tolist()
        self.buckets: dict[int, list[int]] = {}
        ids = np.flatnonzero(up)
        for c in np.unique(fg[ids]).tolist():
            self.buckets[c] = ids[fg[ids] == c].tolist()

    def update(self, nodes) -> None:
        for n in set(int(x) for x in nodes):
            if not self.up[n]:
                continue
            c = int(math.floor(float(self.free[n, GPU]) + _EPS))
            old = self.level[n]
            if c != old:
                b = self.buckets[old]
                del b[bisect.bisect_left(b, n)]
                bisect.insort(self.buckets.setdefault(c, []), n)
                self.level[n] = c

    def top(self, m: int, demand, dims, min_gpus: int) -> list[int]:
        out: list[int] = []
        free = self.free
        for c in sorted(self.buckets, reverse=True):
            if c < min_gpus:
                break
            for n in self.buckets[c]:
                if _covers(free[n], demand, dims):
                    out.append(n)
                    if len(out) == m:
                        return out
        return out


@register("place", "optimus_place",
          source="Peng et al., EuroSys 2018 (Optimus, seed 001); petuum/adaptdl simulator/optimus.py")
class OptimusPlace(Timeless, Place):
    """Carry out the round's allocation (ctx.allocation): keep, resize, suspend or launch each
    job it names, fewest servers first."""
    carries_allocation = True
    needs = frozenset(('preemption', 'resize'))  # backend capabilities (dlsched.scheduler.backend)

    def __init__(self) -> None:
        pass

    def place(self, ctx) -> None:
        alloc = ctx.allocation
        if not alloc:
            return
        acting = placer_hint(ctx)
        if acting is None:
            acting = alloc
        else:
            # the allocator's kept round says which jobs may need anything: every other job
            # keeps what it holds or keeps waiting (decided all the same)
            ctx.txn.decided.update(alloc)
        jobs = sorted((ctx.jobs[j] for j in acting), key=lambda r: (r.submit_time_s, r.job_id))
        self._apply(ctx, jobs, alloc)

    def _apply(self, ctx, jobs, alloc) -> None:
        txn = ctx.txn
        moving = []
        for rec in jobs:
            tasks = alloc[rec.job_id]
            w, p = shape(tasks) if tasks else (0, 0)
            running = rec.state is JobState.RUNNING
            txn.decided.add(rec.job_id)           # the per-task placement loop skips them all
            if running:
                if (w > 0 and (w, p) == shape(rec.tasks)) or not rec.spec.preemptible:
                    continue               # keeps what it holds (a non-preemptible job always)
                old = tuple(rec.placed.values())
                demands = [rec.tasks[tp.task].vector for tp in old]
                if w == 0:
                    txn.release(rec.job_id, old, demands)      # suspended
                else:
                    txn.unhold(old, demands)
                    moving.append((rec, w, p, old, demands))
            elif w > 0:
                moving.append((rec, w, p, None, None))
        moving.sort(key=lambda m: (m[1] + m[2], m[0].submit_time_s, m[0].job_id))
        if not moving:
            return
        up = ctx.snap.up
        pool = (_BucketPool if len(up) >= _BucketPool.LARGE else _GpuPool)(txn.free, up)
        for rec, w, p, old, demands in moving:
            tasks = alloc[rec.job_id]
            ok = self._place(ctx, rec.job_id, tasks, pool)
            pool.update(tp.node for tp in txn.reserved(rec.job_id))
            if ok:
                if tasks is rec.tasks and old is None:
                    txn.commit(rec.job_id, total_tasks=len(tasks), already_placed=0, gang=True,
                               resume=rec.state is JobState.SUSPENDED)
                else:
                    txn.commit_resize(rec.job_id, tasks)
            else:
                txn.discard(rec.job_id)
                if old is not None:               # could not move: keep its place, or suspend
                    txn.hold_or_release(rec.job_id, old, demands)
                    pool.update(tp.node for tp in old)

    # -- placement --------------------------------------------------------------------------------
    def _place(self, ctx, job_id: str, tasks, pool: _GpuPool) -> bool:
        """Reserve every task or nothing (returns whether all were placed). All-reduce jobs: the
        most-free nodes first, each taking as many workers as it can (Pollux's chunks); the order
        is fixed for the job, as taking from one node does not change the others."""
        txn = ctx.txn
        free = txn.free
        workers = [t for t in tasks if t.role is not Role.PS]
        ps = [t for t in tasks if t.role is Role.PS]
        if ps:
            return self._place_even(ctx, job_id, workers, ps, pool)
        d = workers[0].demand                 # Python floats: the same IEEE values as .vector
        dims = workers[0].dims
        todo = list(workers)
        need_gpus = int(math.ceil(d[GPU] - _EPS))
        for n in pool.top(len(workers), d, dims, need_gpus):
            row = free[n].tolist()
            k = min([int(math.floor((row[r] + _EPS) / d[r])) for r in dims] + [len(todo)])
            txn.reserve_block(job_id, todo[:k], n)
            todo = todo[k:]
            if not todo:
                return True
        txn.discard(job_id)
        return False

    def _place_even(self, ctx, job_id: str, workers, ps, pool: _GpuPool) -> bool:
        """The fewest servers that hold the job with equal numbers of workers and of PS on each
        (the servers with the most free GPUs, lowest id among equals; remainders on the first
        ones)."""
        txn = ctx.txn
        free = txn.free
        wd = workers[0].vector
        pd = ps[0].vector
        wl, pl = wd.tolist(), pd.tolist()
        nw, npp = len(workers), len(ps)
        low = np.minimum(wd, pd)
        top = pool.top(nw + npp, low, tuple(np.flatnonzero(low > _EPS).tolist()), 0)
        if not top:
            return False
        gw = wd[GPU]
        most = float(free[top[0], GPU])
        k0 = max(1, int(np.ceil(nw * gw / most - _EPS))) if gw > _EPS and most > _EPS else 1
        for k in range(k0, len(top) + 1):
            nodes = top[:k]
            aw = [nw // k + (i < nw % k) for i in range(k)]
            ap = [npp // k + (i < npp % k) for i in range(k)]
            if all(_holds(free[n].tolist(), a, wl, b, pl) for n, a, b in zip(nodes, aw, ap)):
                wi = pi = 0
                for n, a, b in zip(nodes, aw, ap):
                    txn.reserve_block(job_id, workers[wi:wi + a], n)
                    txn.reserve_block(job_id, ps[pi:pi + b], n)
                    wi, pi = wi + a, pi + b
                return True
        return False


register_profile(ProfileSpec(
    name="optimus", source="Peng et al., EuroSys 2018 (Optimus, seed 001); petuum/adaptdl simulator/optimus.py",
    description="Optimus: every 60 s, re-allocate workers and PS of all jobs by marginal gain in "
                "remaining time per dominant share; fewest servers; a change costs a restart",
    order="fifo", allocate="optimus", filters=("fits",), scores=(("first_fit", 1.0),),
    placers=("optimus_place",),
    gang=True, blocking=False, round_s=60.0, event_rounds=False,
    # a real program has no oracle: fit speed and remaining work to what the runtime measures
    runtime_params={"optimus": {"speed": "fitted", "remaining": "fitted"}}))
