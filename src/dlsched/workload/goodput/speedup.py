"""The speedup function: best goodput at (nodes, replicas) over best goodput at a base allocation.

Source: petuum/adaptdl branch osdi21-artifact, `simulator/speedup.py` (`SpeedupFunction`) and
`simulator/pollux.py` (`Problem.__init__`); the code is ours. Conventions kept from Pollux:

- speedup(K, N) = best_batch(K, N).goodput / best_batch(base).goodput, each with its own best
  batch and accumulation (`search.py`), with accumulation on and the application's limits;
- the base is one replica on one node (`SpeedupFunction`'s own base); Pollux's policy then
  replaces it, each round, by the job's fair share: ceil(total GPUs / jobs) replicas on
  ceil(nodes x share) nodes (`pollux.py`). `base=` takes either;
- speedup(0, 0) = 0 (no GPUs, no progress); 1 <= K <= N otherwise, and K = 0 iff N = 0;
- answers are memoised in a 32 x 32 table over (K, N) (Pollux's `mem_size`): the policy asks
  the same few shapes thousands of times per round. Larger N are computed every time.

A job with no fitted model yet has Pollux's stand-in speedup N (linear scaling,
simulator.py `Job.get_speedup_fn`): `linear_speedup`.
"""
from __future__ import annotations

import numpy as np

from dlsched.workload.goodput.data import AppLimits
from dlsched.workload.goodput.model import GoodputModel
from dlsched.workload.goodput.search import best_batch

MEMO_SIZE = 32


class SpeedupFunction:
    """Speedup of one job's goodput model over its base allocation, vectorised and memoised."""

    def __init__(self, model: GoodputModel, limits: AppLimits, base: tuple[int, int] = (1, 1),
                 memo_size: int = MEMO_SIZE):
        self.model = model
        self.limits = limits
        self.base = (int(base[0]), int(base[1]))
        if not 1 <= self.base[0] <= self.base[1]:
            raise ValueError(f"base (nodes, replicas) must have 1 <= nodes <= replicas, got {base}")
        self.base_goodput = float(best_batch(model, *self.base, limits).goodput)
        if not self.base_goodput > 0:
            raise ValueError(f"goodput at the base allocation {self.base} is {self.base_goodput}")
        self._memo = np.full((memo_size, memo_size), -1.0)
        self._memo[0, 0] = 0.0

    def __call__(self, nodes, replicas):
        k_arr, n_arr = np.asarray(nodes), np.asarray(replicas)
        if np.any(k_arr < 0) or np.any(k_arr > n_arr) or np.any((k_arr > 0) != (n_arr > 0)):
            raise ValueError("need 0 <= nodes <= replicas, and nodes = 0 exactly when replicas = 0")
        scalar = k_arr.ndim == 0 and n_arr.ndim == 0
        shape = np.broadcast(k_arr, n_arr).shape
        k = np.broadcast_to(k_arr, shape).ravel().astype(np.int64)
        n = np.broadcast_to(n_arr, shape).ravel().astype(np.int64)
        size = self._memo.shape[0]
        out = np.full(k.size, -1.0)
        small = n < size
        out[small] = self._memo[k[small], n[small]]
        missing = out < 0
        if missing.any():
            pairs, inverse = np.unique(np.stack([k[missing], n[missing]]), axis=1, return_inverse=True)
            good = np.asarray(best_batch(self.model, pairs[0], pairs[1], self.limits).goodput)
            speed = good / self.base_goodput
            keep = pairs[1] < size
            self._memo[pairs[0][keep], pairs[1][keep]] = speed[keep]
            out[missing] = speed[inverse.ravel()]
        return float(out[0]) if scalar else out.reshape(shape)


def linear_speedup(nodes, replicas):
    """Pollux's speedup for a job it has not fitted yet: the replica count."""
    return np.asarray(replicas, dtype=np.float64) if np.ndim(replicas) else float(replicas)


def fair_share_base(total_gpus: int, num_nodes: int, num_jobs: int) -> tuple[int, int]:
    """Pollux's fair-share base allocation (pollux.py `Problem.__init__`, one GPU per replica):
    share = 1 / total_gpus, ceil(total_gpus / jobs) replicas on ceil(nodes x share) nodes.

    Pollux's node count is ceil(num_nodes / total_gpus), i.e. 1 on any cluster with at least one
    GPU per node; kept as written. The replica count is capped at total_gpus (one job)."""
    if total_gpus < 1 or num_nodes < 1 or num_jobs < 1:
        raise ValueError("fair share needs GPUs, nodes and jobs")
    replicas = min(-(-total_gpus // num_jobs), total_gpus)
    nodes = min(max(-(-num_nodes // total_gpus), 1), replicas)
    return nodes, replicas
