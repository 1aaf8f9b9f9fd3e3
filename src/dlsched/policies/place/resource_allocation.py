"""kube-scheduler's resource-allocation scoring (NodeResourcesFit, seed 002), one scorer with a
`strategy` per resource, after placing the task on the node:

    least_allocated (spread / load balancing):  s_r = (free_r - req_r) / capacity_r
    most_allocated  (bin pack):                 s_r = (capacity_r - free_r + req_r) / capacity_r
    score = sum_r w_r * s_r / sum_r w_r      over resources the node has (capacity > 0)

`strategy` is one name for every resource or a mapping per resource (e.g. bin-pack GPUs, spread
CPUs: {gpu: most_allocated, cpu: least_allocated}); `weights` per resource (default GPU, CPU and
memory 1, disk and network 0, as kube-scheduler weighs CPU and memory by default).
"""
from __future__ import annotations

import numpy as np

from dlsched.core.types import NRES, RESOURCES
from dlsched.scheduler.framework import ProfileSpec, register, register_profile, Score

STRATEGIES = ("least_allocated", "most_allocated")
DEFAULT_WEIGHTS = {"gpu": 1.0, "cpu": 1.0, "mem": 1.0, "disk": 0.0, "net": 0.0}


@register("score", "resource_allocation", source="seed 002 (kube-scheduler NodeResourcesFit)")
class ResourceAllocationScorer(Score):
    """least_allocated (spread) or most_allocated (bin pack), per resource, weighted."""
    node_local = True  # a node's score depends on that node alone

    def __init__(self, strategy: str | dict = "least_allocated", weights: dict | None = None):
        per = strategy if isinstance(strategy, dict) else {r: strategy for r in RESOURCES}
        for r, s in per.items():
            if r not in RESOURCES:
                raise ValueError(f"strategy: unknown resource {r!r} (resources: {', '.join(RESOURCES)})")
            if s not in STRATEGIES:
                raise ValueError(f"strategy.{r}: must be one of {', '.join(STRATEGIES)}, got {s!r}")
        w = dict(DEFAULT_WEIGHTS)
        for r, x in (weights or {}).items():
            if r not in RESOURCES:
                raise ValueError(f"weights: unknown resource {r!r}")
            if isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0:
                raise ValueError(f"weights.{r}: must be a number >= 0, got {x!r}")
            w[r] = float(x)
        if sum(w.values()) <= 0:
            raise ValueError("weights: at least one must be > 0")
        self.weights = np.array([w[r] for r in RESOURCES])
        # most[r] is True where resource r is bin-packed
        self.most = np.array([per.get(r, "least_allocated") == "most_allocated" for r in RESOURCES])

    def _node_weights(self, cluster) -> np.ndarray:
        """Per node, each resource's weight over the node's total weight (0 where it lacks it)."""
        cache = self.__dict__.setdefault("_wcache", {})
        w = cache.get(id(cluster))
        if w is None:
            w = np.where(cluster.capacity > 0, self.weights, 0.0)
            total = w.sum(axis=1, keepdims=True)
            w = np.asfortranarray(np.divide(w, total, out=np.zeros_like(w), where=total > 0))
            cache.clear()
            cache[id(cluster)] = w
        return w

    def score(self, ctx, job, task, free, nodes) -> np.ndarray:
        cluster = ctx.snap.cluster
        inv = cluster.inv_capacity
        w = self._node_weights(cluster)
        out = np.zeros(len(nodes))
        # One resource column at a time over the candidates (the round's free array is column-major).
        for r in np.flatnonzero(self.weights):
            after = np.clip((free[nodes, r] - task.demand[r]) * inv[nodes, r], 0.0, 1.0)
            out += w[nodes, r] * (1.0 - after if self.most[r] else after)
        return out


assert NRES == len(DEFAULT_WEIGHTS)

def _k8s_profile(name: str, source: str, description: str, strategy: str, gang: bool) -> None:
    register_profile(ProfileSpec(
        name=name, source=source, description=description, order="fifo", filters=("fits",),
        scores=(("resource_allocation", 1.0),), gang=gang, blocking=False,
        params={"resource_allocation": {"strategy": strategy}}))


_k8s_profile("k8s-spread", "seed 002 (load balancing)",
             "kube-scheduler load balancing: each worker on the least allocated node, one at a time "
             "(a job may be partly placed and hold what it got)", "least_allocated", gang=False)
_k8s_profile("k8s-binpack", "seed 002 (bin pack)",
             "kube-scheduler bin pack: each worker on the most allocated node that fits, one at a time "
             "(a job may be partly placed and hold what it got)", "most_allocated", gang=False)
_k8s_profile("volcano-gang", "seed 002 (Volcano gang)",
             "Volcano: all of a job's workers or none, bin packed; a job that does not fit waits in "
             "the queue while later jobs may go", "most_allocated", gang=True)
