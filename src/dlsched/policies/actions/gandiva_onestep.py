"""The first step of Gandiva's Algorithm 1 for a job of one worker, compiled (numba): one pass over
the nodes in place of `GandivaPlace._get_nodes` then `_place_one` with numpy, the same float
operations in the same order, so the same answers (tests/unit/test_gandiva_scale.py checks the two
at every `_get_nodes`).

A module of its own because it is a hot-path trick, not part of the algorithm's statement:
dlsched.policies.actions.gandiva_place reads as Algorithm 1, and calls in here for the jobs of
one worker (most jobs of a trace) once a run has placed gandiva_place.JIT_AFTER of them (loading
the compiled functions costs about 0.5 s, worth it only for long runs). The speed it buys is
benchmarks/bench_policies.py's gandiva-reactive (and gandiva) on the whole Philly trace:
RESULTS.md, block `policies`.
"""
from __future__ import annotations

import os

import numpy as np

from dlsched.core.types import GPU

_EPS = 1e-9
_NODES0_EMPTY, _LEAST_FULL, _NOBODY_FITS = -3, -2, -1
_step = None
_step_missing = False


def _one_step():
    """The compiled `_one_step_py` (and `_tightest`), or None where numba cannot be imported or
    DLSCHED_JIT is "0" (the numpy path runs). Compiled at the first call and cached on disk by
    numba."""
    global _step, _step_missing, _tightest, _covers
    if _step is None and not _step_missing:
        if os.environ.get("DLSCHED_JIT", "1") == "0":
            _step_missing = True
            return None
        try:
            import numba
        except ImportError:
            _step_missing = True
            return None
        _covers = numba.njit(cache=True, nogil=True, inline="always")(_covers_py)
        _tightest = numba.njit(cache=True, nogil=True)(_tightest_py)
        _step = numba.njit(cache=True, nogil=True)(_one_step_py)
    return _step


def _covers_py(free, n, floor):
    """Node n's free vector covers the worker: free[n] >= floor on every resource (floor =
    demand - eps); a NaN never covers."""
    for r in range(free.shape[1]):
        if not free[n, r] >= floor[r]:
            return False
    return True


_covers = _covers_py


def _tightest_py(ok, sel, by_mask, gpus, need, free, floor):
    """Steps 2 and 3 of Algorithm 1 for a job of one worker, as `_get_nodes` then `_place_one`
    take them: the nodes are ok & sel (step 2: sel = the unallocated servers, by_mask) or ok &
    (free GPUs > eps) (step 3); step 2 is skipped unless their GPUs add up to `need` (size - eps;
    GPU counts are integers: their sum is exact in any order). Returns the node whose free
    vector covers the worker (free >= floor) with the fewest free GPUs, then the lowest id;
    _LEAST_FULL where the step is skipped (no node, or too few GPUs); _NOBODY_FITS."""
    n_nodes = ok.shape[0]
    total = 0.0
    seen = False
    best = -1
    best_free = np.inf
    for n in range(n_nodes):
        if not ok[n]:
            continue
        if by_mask:
            if not sel[n]:
                continue
            total += gpus[n]
        elif not free[n, GPU] > _EPS:
            continue
        seen = True
        if _covers(free, n, floor) and free[n, GPU] < best_free:
            best = n
            best_free = free[n, GPU]
    if not seen or (by_mask and not total >= need):
        return _LEAST_FULL
    return best if best >= 0 else _NOBODY_FITS


_tightest = _tightest_py


def _one_step_py(ok, has, gpu_load, gpus, free, floor):
    """Algorithm 1's first step for a job of one worker, as `_get_nodes` then `_place_one` take
    it with numpy, in one pass over the nodes:

        nodes0 = ok & has;  load(n) = sum of n's GPU slots' loads (> 0) / gpus(n)
        nodes1 = nodes0 with |load - min load| < eps;  skipped if its first node's load >= 1
        best   = the node of nodes1 whose free vector covers the worker (free >= floor, floor =
                 demand - eps), fewest free GPUs first, then the lowest id

    Returns best, or _NODES0_EMPTY, _LEAST_FULL (no _place on nodes1) or _NOBODY_FITS. The
    same float operations in the same order as numpy's (an integer sum, one division, one
    subtraction per node), so the same answer."""
    n_nodes = ok.shape[0]
    loads = np.empty(n_nodes)
    least = np.inf
    any0 = False
    for n in range(n_nodes):
        if ok[n] and has[n]:
            s = 0
            for g in range(gpu_load.shape[1]):
                v = gpu_load[n, g]
                if v > 0:
                    s += v
            x = s / gpus[n]
            loads[n] = x
            if x < least:
                least = x
            any0 = True
    if not any0:
        return _NODES0_EMPTY
    first = -1
    best = -1
    best_free = np.inf
    for n in range(n_nodes):
        if ok[n] and has[n] and abs(loads[n] - least) < _EPS:
            if first < 0:
                first = n
                if not loads[n] < 1:
                    return _LEAST_FULL
            if _covers(free, n, floor) and free[n, GPU] < best_free:
                best = n
                best_free = free[n, GPU]
    return best if best >= 0 else _NOBODY_FITS
