"""At arrival: can a job ever run on this cluster? (a job that cannot is rejected at once, with the
reason, instead of waiting forever)."""
from __future__ import annotations

import numpy as np

_EPS = 1e-9


class NeverFits:
    """Why a job can never run on the cluster ("" when it can): a task larger than any node, a
    DL job (gang) larger than the whole cluster, or a filter's own `never_fits`. Cached by the
    job's kind, GPU type and multiset of task demands: trace jobs repeat a handful of shapes."""

    def __init__(self, filters) -> None:
        self.filters = filters
        self._cache: dict = {}
        self._by_tasks: dict = {}     # (kind, GPU type, id(tasks)) -> (tasks, reason); the tuple keeps its id
        self._cap_max: np.ndarray | None = None
        self._cap_total: np.ndarray | None = None

    def __call__(self, job, backend) -> str:
        # Jobs that share one task tuple (a trace reader's: every n-GPU Philly job) share the
        # answer: looked up by the tuple's identity first, without counting its demands.
        tasks = job.tasks
        same = self._by_tasks.get((job.kind, job.gpu_type, job.gpu_types, id(tasks)))
        if same is not None and same[0] is tasks:
            return same[1]
        reason = self._reason(job, backend)
        if len(self._by_tasks) >= 4096:
            # jobs with tuples of their own (a generator's) would grow it by one entry per job
            # for good (173 bytes each); the answers stay in _cache, by demands
            self._by_tasks.clear()
        self._by_tasks[(job.kind, job.gpu_type, job.gpu_types, id(tasks))] = (tasks, reason)
        return reason

    def _reason(self, job, backend) -> str:
        counts: dict[tuple, int] = {}
        for t in job.tasks:
            counts[t.demand] = counts.get(t.demand, 0) + 1
        key = (job.kind, job.gpu_type, job.gpu_types, tuple(sorted(counts.items())))   # (filters read the GPU types)
        hit = self._cache.get(key)
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
            for f in self.filters:
                reason = f.never_fits(job, cluster)
                if reason:
                    break
        self._cache[key] = reason
        return reason
