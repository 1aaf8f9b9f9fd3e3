"""Gandiva's affinity bookkeeping for `gandiva_place` (Algorithm 1's affinity(n) and load(n)):
which job sizes hold GPUs on each node, kept between rounds (`_Affinity`, updated job by job for
the jobs `observe` saw change), and the per-round view that adds what the round decided so far
(`_NodeView`).

A module of its own because it is the state Algorithm 1 reads, not the algorithm:
dlsched.policies.actions.gandiva_place reads as getNodes over these views, and this module says
how they stay equal to the records without a pass over every running job each round
(tests/unit/test_gandiva_incremental.py checks the kept view against one built from scratch).
"""
from __future__ import annotations

import numpy as np

from dlsched.core.types import GPU, Launch, Migrate, Resize, Resume, Suspend


def _last_placements(txn, job_id: str) -> tuple:
    """The placements of the Launch / Resume just committed for `job_id`."""
    for d in reversed(txn.plan.decisions):
        if isinstance(d, (Launch, Resume)) and d.job_id == job_id:
            return d.placements
    return ()


def _held(ctx, rec) -> bool:
    """The job holds resources (running, or partly placed and waiting)."""
    return bool(rec.placed) and (rec.queued or ctx.is_running(rec.job_id))


class _Affinity:
    """For each node, how many jobs of each size hold GPUs on it, over the jobs that hold
    something as the records say (running, or partly placed). `entries[job] = (size, GPU
    nodes)`; `count[n][size]` jobs; `n_jobs[n]` their total; `has[size]` the nodes where
    count[n][size] > 0. Updated job by job; `build` is the same from scratch."""

    def __init__(self, cluster):
        self.cluster = cluster
        n = cluster.num_nodes
        self.entries: dict[str, tuple[float, frozenset]] = {}
        self.count: list[dict[float, int]] = [{} for _ in range(n)]
        self.n_jobs = np.zeros(n, dtype=np.int64)
        self.has: dict[float, np.ndarray] = {}

    @classmethod
    def build(cls, ctx) -> "_Affinity":
        aff = cls(ctx.snap.cluster)
        for rec in (*ctx.running, *ctx.queue):
            if rec.placed and rec.job_id not in aff.entries:
                aff.set(rec.job_id, _size(rec), _gpu_nodes(rec.placed.values()))
        return aff

    def sync(self, ctx, changed) -> None:
        for job_id in changed:
            rec = ctx.jobs.get(job_id)
            if rec is not None and _held(ctx, rec):
                self.set(job_id, _size(rec), _gpu_nodes(rec.placed.values()))
            else:
                self.remove(job_id)

    def set(self, job_id: str, size: float, nodes: frozenset) -> None:
        old = self.entries.get(job_id)
        if old == (size, nodes):
            return
        if old is not None:
            self.remove(job_id)
        self.entries[job_id] = (size, nodes)
        for n in nodes:
            c = self.count[n]
            k = c.get(size, 0)
            c[size] = k + 1
            self.n_jobs[n] += 1
            if k == 0:
                self._mask(size)[n] = True

    def remove(self, job_id: str) -> None:
        old = self.entries.pop(job_id, None)
        if old is None:
            return
        size, nodes = old
        for n in nodes:
            c = self.count[n]
            k = c[size] - 1
            self.n_jobs[n] -= 1
            if k:
                c[size] = k
            else:
                del c[size]
                self.has[size][n] = False

    def _mask(self, size: float) -> np.ndarray:
        m = self.has.get(size)
        if m is None:
            m = self.has[size] = np.zeros(len(self.count), dtype=bool)
        return m

    def sizes(self, n: int) -> set[float]:
        return set(self.count[n])


def _gpu_nodes(placements) -> frozenset:
    if len(placements) == 1:                 # (most jobs: one task)
        for tp in placements:
            return frozenset((tp.node,)) if tp.gpu_ids else frozenset()
    return frozenset(tp.node for tp in placements if tp.gpu_ids)


class _NodeView:
    """Per-round view of the cluster for Algorithm 1: which job sizes sit on each node, as
    this round's plan leaves them (the kept `_Affinity` of the records, plus what the round
    decided so far: an overlay of per-node count changes on the few nodes it touched)."""

    def __init__(self, ctx, aff: _Affinity):
        self.ctx = ctx
        cl = ctx.snap.cluster
        self.gpus = cl.capacity[:, GPU]
        self.aff = aff
        self.delta: dict[int, dict[float, int]] = {}   # node -> size -> jobs added (or removed)
        self._masks: dict = {}   # has_size / unallocated masks, until the next add_job
        self._ones = None        # load(): a vector of ones, one per GPU slot
        # The round's decisions so far (earlier actions): the placements they leave each job.
        decided: dict[str, tuple] = {}
        for d in ctx.txn.plan.decisions:
            j = d.job_id
            if isinstance(d, Suspend):
                decided[j] = ()
            elif isinstance(d, (Launch, Resume)):
                if j not in decided:
                    rec = ctx.jobs[j]
                    decided[j] = tuple(rec.placed.values()) if _held(ctx, rec) else ()
                decided[j] = decided[j] + tuple(d.placements)
            elif isinstance(d, (Migrate, Resize)):
                decided[j] = tuple(d.placements)
        for j, placements in decided.items():
            old = aff.entries.get(j)
            if old is not None:
                self._shift(old[0], old[1], -1)
            self._shift(_size(ctx.jobs[j]), _gpu_nodes(placements), 1)

    def _shift(self, size: float, nodes, sign: int) -> None:
        for n in nodes:
            d = self.delta.setdefault(n, {})
            d[size] = d.get(size, 0) + sign

    def add_job(self, size: float, placements) -> None:
        """A job of `size` GPUs now holds these placements: their GPU nodes get its affinity."""
        self._shift(size, _gpu_nodes(placements), 1)
        self._masks.clear()

    def eligible(self, spec) -> np.ndarray:
        """Up nodes with GPUs of the type the job requires (if any)."""
        cl = self.ctx.snap.cluster
        ok = self.ctx.snap.up & (self.gpus > 0)
        if spec.gpu_type is not None:
            want = cl.gpu_types.index(spec.gpu_type) if spec.gpu_type in cl.gpu_types else -1
            ok = ok & (cl.node_gpu_type == want)
        return ok

    def has_size(self, size: float) -> np.ndarray:
        """Nodes whose affinity includes `size` (cached: a queue repeats a few sizes)."""
        if size not in self._masks:
            base = self.aff.has.get(size)
            m = np.zeros(len(self.gpus), dtype=bool) if base is None else base.copy()
            count = self.aff.count
            for n, d in self.delta.items():
                m[n] = count[n].get(size, 0) + d.get(size, 0) > 0
            self._masks[size] = m
        return self._masks[size]

    def unallocated(self) -> np.ndarray:
        """Nodes that hold no GPU job ("affinity 0")."""
        if None not in self._masks:
            m = self.aff.n_jobs == 0
            n_jobs = self.aff.n_jobs
            for n, d in self.delta.items():
                m[n] = n_jobs[n] + sum(d.values()) == 0
            self._masks[None] = m
        return self._masks[None]

    def load(self, nodes: np.ndarray) -> np.ndarray:
        """Tasks per GPU of each of `nodes` (nodes with GPUs; eligible() leaves out the others).
        Integer counts summed (exact in any order, in float64 too: the row sums are small
        integers) then divided: the values a pass over every node gives for these. The sums are
        a matrix-vector product over all nodes, then indexed (an int32 sum along each row of
        the selected rows took 4x as long)."""
        gl = self.ctx.txn.gpu_load
        ones = self._ones
        if ones is None or len(ones) != gl.shape[1]:
            ones = self._ones = np.ones(gl.shape[1])
        return np.maximum(gl, 0).dot(ones)[nodes] / self.gpus[nodes]


def _size(rec) -> float:
    """A job's size for affinity: its total GPUs (a DL job), or one task's GPUs (a bag of
    independent tasks, whose tasks do not run together)."""
    tasks = rec.tasks
    if len(tasks) == 1:                      # (most jobs: the sum and the max of one demand)
        return float(tasks[0].demand[GPU])
    if rec.spec.kind == "dl":
        return float(sum(t.demand[GPU] for t in tasks))
    return float(max((t.demand[GPU] for t in rec.tasks), default=0.0))
