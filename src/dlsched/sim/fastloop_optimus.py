"""Optimus (the `optimus` profile: the allocator `optimus`, the placer `optimus_place`) in a round
of the compiled run (dlsched.sim.fastloop_kernel), for rigid jobs (no speed model, no
iterations: each gets what it asks for or nothing) without parameter servers or a GPU type.

`grant` is the allocation (OptimusAllocate._allocate_scratch, then greedy_allocate's rigid
step): the active jobs, running and waiting (the round's queue: under quotas the admitted
ones), in arrival order, each taking its summed demand from what the cluster has left (its free
resources and what the running jobs hold) while it fits. A running job that no longer fits would
be suspended: the kernel stops there (the Python loop's). `place` is OptimusPlace._place for a
granted waiting job, the granted taken by task count, then arrival: the nodes that can take one
task, most whole free GPUs first (lowest id among equals), up to one per task, each taking as
many tasks as it can (Pollux's chunks), all or nothing. Compiled by `compile` before the kernel
(numba caches by file: after a change here, touch fastloop_kernel.py).
"""
from __future__ import annotations

import numpy as np

from dlsched.core.types import GPU
from dlsched.scheduler import fastplace as _fp

STOP = -1          # a running job would be suspended: the Python loop's
_EPS = 1e-9


def _need(toff, ntask, tdem, dem, j, v):
    """The job's summed demand into v (OptimusAllocate._need)."""
    v[:] = 0.0
    for k in range(toff[j], toff[j] + ntask[j]):
        for r in range(v.shape[0]):
            v[r] += dem[tdem[k], r]


def _grant_py(free, rs, nrs, wq, nw, keyrank, toff, ntask, tdem, dem, out, left, v):
    """The waiting jobs of wq[:nw] the allocation grants, into out (by task count, then arrival);
    their count, or STOP where a running job (rs[:nrs], in arrival order: keyrank) would get
    nothing."""
    wq = wq[:nw][np.argsort(keyrank[wq[:nw]], kind="mergesort")]      # (a tenancy's walk: not in order)
    left[:] = 0.0
    for n in range(free.shape[0]):
        for r in range(left.shape[0]):
            left[r] += free[n, r]
    for i in range(nrs):
        _need(toff, ntask, tdem, dem, rs[i], v)
        for r in range(left.shape[0]):
            left[r] += v[r]
    a, b, m = 0, 0, 0
    while a < nrs or b < nw:                 # the active jobs merged in arrival order
        run = b >= nw or (a < nrs and keyrank[rs[a]] < keyrank[wq[b]])
        j = rs[a] if run else wq[b]
        if run:
            a += 1
        else:
            b += 1
        _need(toff, ntask, tdem, dem, j, v)
        fits = True
        for r in range(left.shape[0]):
            if v[r] > left[r] + _EPS:
                fits = False
        if not fits:
            if run:
                return STOP
            continue
        for r in range(left.shape[0]):
            left[r] -= v[r]
        if not run:
            i = m                             # insertion by (task count, arrival)
            while i > 0 and (ntask[out[i - 1]] > ntask[j]
                             or (ntask[out[i - 1]] == ntask[j] and keyrank[out[i - 1]] > keyrank[j])):
                out[i] = out[i - 1]
                i -= 1
            out[i] = j
            m += 1
    return m


def _place_py(free, gload, node_gpus, d, nt, kk, dims, nd, outn, outg, taken):
    """OptimusPlace._place for nt tasks of demand d (kk GPUs each; its resources dims[:nd]):
    tasks placed (nt or 0, what it reserved given back)."""
    nodes = free.shape[0]
    ns = np.empty(nodes, np.int64)
    c = 0
    for n in range(nodes):                   # _GpuPool.top: the nodes that take one task
        ok = np.floor(free[n, GPU] + _EPS) >= kk
        for x in range(nd):
            ok = ok and not free[n, dims[x]] + _EPS < d[dims[x]]
        if ok:
            ns[c] = n
            c += 1
    lv = np.empty(c)
    for i in range(c):
        lv[i] = -np.floor(free[ns[i], GPU] + _EPS)
    order = ns[:c][np.argsort(lv, kind="mergesort")][:nt]     # most free first, lowest id among equals
    t = 0
    for n in order:                          # Pollux's chunks
        k = nt - t
        for x in range(nd):
            k = min(k, int(np.floor((free[n, dims[x]] + _EPS) / d[dims[x]])))
        for r in range(free.shape[1]):
            free[n, r] -= k * d[r]
        for i in range(t, t + k):
            _fp._take_gpus(n, d[GPU], gload, gload, False, node_gpus, taken, outg[i])
            outn[i] = n
        t += k
        if t == nt:
            return nt
    for i in range(t):                       # Transaction.discard
        for r in range(free.shape[1]):
            free[outn[i], r] += d[r]
        for x in range(kk):
            gload[outn[i], outg[i, x]] -= 1
    return 0


grant, place = _grant_py, _place_py


def compile() -> None:
    """Make grant and place compiled (numba), after the helpers they call."""
    global grant, place, _need
    if grant is _grant_py:
        import numba
        jit = numba.njit(cache=True, nogil=True)
        _need = jit(_need)
        grant, place = jit(_grant_py), jit(_place_py)


def applies(profile) -> bool:
    """The profile allocates with `optimus` and places with `optimus_place` alone (`optimus`)."""
    from dlsched.policies.actions.optimus import OptimusPlace
    from dlsched.policies.allocate.optimus import OptimusAllocate
    return (profile is not None and type(profile.allocator) is OptimusAllocate
            and [type(p) for p in profile.placers] == [OptimusPlace] and not profile.actions)


def rigid(profile, specs) -> bool | None:
    """None where the profile is not Optimus's; whether every job is one it gives its request or
    nothing, without parameter servers or a GPU type, its tasks alike."""
    from dlsched.core.types import Role
    if not applies(profile):
        return None
    for s in specs:
        d = s.tasks[0].demand
        if s.iterations is not None or s.gpu_type is not None or any(t.role is Role.PS or t.demand != d
                                                                     for t in s.tasks):
            return False
    return True
