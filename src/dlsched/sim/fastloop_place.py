"""Co-location's placement in a round of the compiled run (dlsched.sim.fastloop_kernel): all of a
job's tasks on one node (policies/place/colocate.py). The first task goes where the profile's
scorers put it among the nodes that can hold every task (scheduler/fastplace's compiled
placement, with that mask), the rest on the same node, each taking its least loaded GPU slots:
what Placing.place makes of the colocate filter, whose mask after the first task is that node
alone. Compiled by `compile` before the kernel (numba caches by file: after a change here,
touch fastloop_kernel.py).
"""
from __future__ import annotations

import numpy as np

from dlsched.core.types import GPU
from dlsched.scheduler import fastplace as _fp


def _colocate_py(free, okrow, inv, dbuf, k0, kinds, weights, ra_w, ra_most, ra_res, gload, gused, node_gpus,
                 outn, outg, cmask, taken):
    """Place the k0 tasks of dbuf on one node; how many were placed (0 or k0)."""
    nres = free.shape[1]
    need = np.zeros(nres)
    for t in range(k0):
        for r in range(nres):
            need[r] += dbuf[t, r]
    for nd in range(free.shape[0]):
        ok = okrow[nd]
        for r in range(nres):
            ok = ok and free[nd, r] >= need[r] - 1e-9
        cmask[nd] = ok
    if _fp._kernel(free, cmask, inv, dbuf[:1], kinds, weights, ra_w, ra_most, ra_res, gload, gused, False,
                   node_gpus, outn, outg) == 0:
        return 0
    nd = outn[0]
    for t in range(1, k0):
        for r in range(nres):
            free[nd, r] -= dbuf[t, r]
        outn[t] = nd
        _fp._take_gpus(nd, dbuf[t, GPU], gload, gused, False, node_gpus, taken, outg[t])
    return k0


colocate = _colocate_py


def type_rows(cl) -> np.ndarray:
    """The kernel's node masks by the GPU type a job asks for (its `want`): row 0 every node (no
    type), row 1 + t the nodes of type t, the last row none (a type the cluster lacks)."""
    types = np.array(cl.node_gpu_type)
    return np.array([np.ones(len(types), np.bool_), *(types == t for t in range(len(cl.gpu_types))),
                     np.zeros(len(types), np.bool_)])


def compile() -> None:
    """Make colocate compiled (numba), after scheduler/fastplace's kernel it calls."""
    global colocate
    if colocate is _colocate_py:
        import numba
        colocate = numba.njit(cache=True, nogil=True)(_colocate_py)
