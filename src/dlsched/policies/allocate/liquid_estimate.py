"""Liquid's resource requirement estimation as an allocator: a waiting job is placed by the
requirement vector a random forest estimates for it rather than by what its user asked for.

Source: Gu et al., "Liquid: Intelligent Resource Estimation and Network-Efficient Scheduling for
Deep Learning Jobs on Distributed GPU Clusters", IEEE TPDS 2021, as summarised in seed 003: user
requests are often inaccurate (over-provisioning or degraded performance); a random forest
trained offline maps a job's type and key parameters to its requirement vector
<N x GPU, GMem, Bandwidth> (dlsched.estimate, where the labels and the model are described).

Parameters (policy settings: `params: {liquid_estimate: {estimate: true, model: NAME}}` for the
`liquid` and `liquid-immediate` profiles):
- estimate (default false): off, the allocator changes nothing and the profiles place what was
  requested, exactly as without it.
- model (default `default`): the saved estimator's name or .joblib path (dlsched.estimate.saved;
  `default` is trained on first use).

With estimate on, every DL job of a known model that has never run (pending, nothing placed) is
given, in `ctx.allocation`, its tasks resized to the estimate:

    workers = clip(round(N_est / gpus_per_worker), 1, the cluster's GPUs / gpus_per_worker)
    net_gbps_per_worker = clip(Bandwidth_est, 0, the largest NIC), rounded to 0.01 Gbps

its parameter servers and other demands kept (its tasks renumbered: workers first, as in the
schema). GMem is estimated but not placed: dlsched's task demand counts whole or fractional GPUs,
not their memory (GPU sharing would use it). A job whose resized tasks equal its own is left
out (the framework places it as asked). A job's estimate is a pure function of its spec, kept
per job id. The profile's `liquid_resize` placer (and, in batch mode, `liquid_batch`) carries the
allocation out as a Resize, which for a job never placed is its first start.
"""
from __future__ import annotations

import math

import numpy as np

from dlsched.core.errors import DlschedError
from dlsched.core.types import GPU, NET, Role, TaskSpec
from dlsched.scheduler.context import JobState
from dlsched.scheduler.framework import Allocate, Timeless, register

SOURCE = "seed 003 (Liquid, Gu et al., IEEE TPDS 2021)"


def resized(spec, est: np.ndarray, max_gpus: float, max_nic_gbps: float) -> tuple[TaskSpec, ...]:
    """The job's tasks resized to the estimate (module docstring)."""
    workers = [t for t in spec.tasks if t.role is Role.WORKER]
    ps = [t for t in spec.tasks if t.role is Role.PS]
    gpw = workers[0].demand[GPU]
    n = int(np.clip(round(float(est[0]) / gpw), 1, max(math.floor(max_gpus / gpw + 1e-9), 1)))
    net = round(float(np.clip(est[2], 0.0, max_nic_gbps)), 2)
    demand = tuple(net if i == NET else x for i, x in enumerate(workers[0].demand))
    tasks = [TaskSpec(i, Role.WORKER, demand) for i in range(n)]
    tasks += [TaskSpec(n + j, Role.PS, t.demand) for j, t in enumerate(ps)]
    return tuple(tasks)


def job_params(spec):
    """The estimator's features of a job (dlsched.estimate.label.JobParams)."""
    from dlsched.estimate.label import JobParams
    from dlsched.workload.models import get_model
    batch = spec.batch_size or get_model(spec.model).default_batch * spec.num_workers
    return JobParams(spec.model, spec.comm, int(batch), float(spec.iterations or 0.0), spec.num_ps,
                     spec.num_workers)


@register("allocate", "liquid_estimate", source=SOURCE)
class LiquidEstimateAllocate(Timeless, Allocate):
    """Liquid estimation: waiting jobs resized to their estimated requirement vector."""
    needs = frozenset(("resize",))

    def __init__(self, estimate: bool = False, model: str = "default"):
        self.estimate = bool(estimate)
        self.model = str(model)
        self.resizes = self.estimate              # the allocation is carried out by a placer
        self.needs = frozenset(("resize",)) if self.estimate else frozenset()
        self._est = None
        self._tasks: dict[str, tuple[TaskSpec, ...] | None] = {}   # job id -> resized tasks (None: as asked)
        if self.estimate:
            from dlsched.estimate.saved import load
            try:
                self._est, _ = load(self.model)
            except DlschedError as e:
                raise ValueError(f"model: {e}") from None

    def _eligible(self, rec) -> bool:
        from dlsched.workload.models import get_model
        s = rec.spec
        return (rec.state is JobState.PENDING and not rec.placed and s.kind == "dl"
                and get_model(s.model) is not None and s.num_workers > 0
                and next(t for t in s.tasks if t.role is Role.WORKER).demand[GPU] > 0)

    def allocate(self, jobs, ctx) -> dict:
        if not self.estimate:
            return {}
        new = [r for r in jobs if r.job_id not in self._tasks and self._eligible(r)]
        if new:
            self._estimate(new, ctx.snap.cluster)
        return {r.job_id: self._tasks[r.job_id] for r in jobs
                if self._tasks.get(r.job_id) is not None and self._eligible(r)}

    def _estimate(self, recs, cluster) -> None:
        est = self._est.predict([job_params(r.spec) for r in recs])
        max_gpus = float(cluster.capacity[:, GPU].sum())
        max_nic = float(cluster.capacity[:, NET].max())
        for r, e in zip(recs, est):
            tasks = resized(r.spec, e, max_gpus, max_nic)
            self._tasks[r.job_id] = None if tasks == tuple(r.spec.tasks) else tasks
