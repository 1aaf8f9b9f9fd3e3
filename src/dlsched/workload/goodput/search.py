"""The batch-size and accumulation search: the best (atomic batch, accumulation steps) of a job
at each (nodes, replicas), Pollux's `GoodputFunction.optimize`.

Source: petuum/adaptdl branch osdi21-artifact, `simulator/goodput.py` (`optimize`); the code is
ours. At N replicas on K nodes, with the application's limits (largest batch M_max, atomic batch
range [m_min, m_max]):

1. candidate global batches: 50 points geometrically spaced from max(M0, m_min * N) to M_max
   (numpy.geomspace's default count, as Pollux);
2. each candidate M gives a local batch l = M / N; with accumulation on,
   s = ceil(l / m_max) - 1 extra micro-steps, and at least 1 when N = 1 and l > M0 (Pollux:
   with a single micro-batch the gradient statistics behind the learning-rate scaling cannot be
   estimated); without it s = 0; the atomic batch is m = ceil(l / (s + 1));
   (ceil(x - 1e-8): Pollux's tolerance, so a whole l / m_max does not round up);
3. a candidate whose atomic batch is outside [m_min, m_max] has goodput 0;
4. the best candidate wins (the first, i.e. the smallest batch, on ties).

Pollux's quirk kept: when m_min * N > M_max the candidates run from m_min * N down to M_max,
all above M_max; the search still returns the best of them (the simulator's `max_replicas`
keeps jobs out of that region). The simulated job then clamps its atomic batch to
floor(M_max / (N * (s + 1))) (simulator.py `Job.update_local_bsz`): that is the job's rule, not
the model's, and is not applied here.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dlsched.workload.goodput.data import AppLimits
from dlsched.workload.goodput.model import GoodputModel

CANDIDATES = 50          # numpy.geomspace's default, what Pollux uses
EPS = 1e-8               # Pollux's floor/ceil tolerance


class BestBatch(NamedTuple):
    """The search's answer, arrays shaped like broadcast(nodes, replicas) (or scalars)."""

    goodput: np.ndarray      # samples per second at M0's efficiency
    atomic_bsz: np.ndarray   # per-GPU micro-batch m
    accum_steps: np.ndarray  # extra micro-steps s


def global_batch(best: BestBatch, replicas) -> np.ndarray:
    """The global batch N * m * (s + 1) the search chose."""
    return np.asarray(replicas) * best.atomic_bsz * (best.accum_steps + 1)


def best_batch(model: GoodputModel, nodes, replicas, limits: AppLimits | None = None, *,
               max_batch_size: int | None = None, atomic_bsz_range: tuple | None = None,
               accumulation: bool = True) -> BestBatch:
    """The best atomic batch and accumulation steps at each (nodes, replicas).

    `limits` gives M_max and [m_min, m_max]; `max_batch_size` / `atomic_bsz_range` override
    them (Pollux's defaults without limits: M_max = M0, m in [1, M_max]). Pollux's simulator
    searches with accumulation on; off, local batches above m_max score 0.
    """
    if limits is not None:
        max_batch_size = limits.max_batch_size if max_batch_size is None else max_batch_size
        atomic_bsz_range = atomic_bsz_range or (limits.min_local_bsz, limits.max_local_bsz)
    m0 = model.init_batch_size
    if max_batch_size is None:
        max_batch_size = m0
    if max_batch_size < m0:
        raise ValueError(f"max_batch_size {max_batch_size} < initial batch size {m0}")
    lo_bsz, hi_bsz = atomic_bsz_range or (None, None)
    lo_bsz = lo_bsz or 1
    hi_bsz = hi_bsz or max_batch_size
    k_arr, n_arr = np.asarray(nodes), np.asarray(replicas)
    if np.any(k_arr < 1) or np.any(n_arr < k_arr):
        raise ValueError("need 1 <= nodes <= replicas")
    scalar = k_arr.ndim == 0 and n_arr.ndim == 0
    shape = np.broadcast(k_arr, n_arr).shape
    k = np.broadcast_to(k_arr, shape).ravel()
    n = np.broadcast_to(n_arr, shape).ravel()

    low = np.maximum(m0, lo_bsz * n).astype(np.float64)
    cand = np.geomspace(low, float(max_batch_size), CANDIDATES)       # (50, len(n))
    local = cand / n
    if accumulation:
        accum = np.ceil(local / hi_bsz - EPS) - 1
        accum = np.where((n == 1) & (local > m0 + EPS), np.maximum(accum, 1), accum)
        accum = accum.astype(np.int64)
    else:
        accum = np.zeros(local.shape, dtype=np.int64)
    atomic = np.ceil(local / (accum + 1) - EPS).astype(np.int64)
    good = model.goodput(k, n, atomic, accum)
    good = np.where((lo_bsz <= atomic) & (atomic <= hi_bsz), good, 0.0)
    best = np.argmax(good, axis=0)
    cols = np.arange(good.shape[1])
    out = (good[best, cols], atomic[best, cols], accum[best, cols])
    if scalar:
        return BestBatch(float(out[0][0]), int(out[1][0]), int(out[2][0]))
    return BestBatch(*(a.reshape(shape) for a in out))
