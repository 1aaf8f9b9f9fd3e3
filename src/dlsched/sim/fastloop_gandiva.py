"""Gandiva's reactive placement (policies/actions/gandiva_place.py: Algorithm 1, getNodes) in a
round of the compiled run (dlsched.sim.fastloop_kernel), for jobs whose tasks are alike, each
with whole GPUs, on a cluster without GPU affinity groups.

For a job of size G GPUs (its workers' total): nodes1, the least loaded of the eligible nodes
holding a job of size G; if that load is under 1, its free GPUs; else the unallocated nodes, if
they have G GPUs in all; else any node with a free GPU; else, with over-subscription, nodes1's
GPUs in use. Each set is tried as GandivaPlace._place does: the tightest node that holds the
whole job first, then the nodes by free GPUs (most first, lowest id among equals), each worker
on the first of them it fits on, its GPUs the least loaded slots. Whole or nothing.

Where the answer would share a GPU (over-subscription that succeeds, or a GPU over max_load) the
placement returns OVER and the run goes back to the Python loop: a shared GPU changes the
speeds, which the kernel does not model. Alike tasks make the round's later first-fit pass
(Placing's, over the jobs left waiting) place nothing GandivaPlace could not: a worker fits on
a node or not whatever the order, so any order holds as many of them.

`hold` keeps the affinity (which sizes of job hold GPUs on each node: gandiva_affinity._Affinity)
as jobs start and finish. Compiled by `compile` before the kernel (numba caches by file: after a
change here, touch fastloop_kernel.py).
"""
from __future__ import annotations

import numpy as np

from dlsched.core.types import GPU
from dlsched.scheduler import fastplace as _fp
from dlsched.sim import fastloop_place as _fpl

OVER = -1          # the answer shares a GPU: the Python loop's
_EPS = 1e-9


def _fits(free, n, d, need):
    for r in range(free.shape[1]):
        if not free[n, r] >= d[r] * need - _EPS:
            return False
    return True


def _try_py(free, gload, node_gpus, ns, cnt, d, nt, kk, mx, outn, outg, taken):
    """GandivaPlace._place on nodes ns[:cnt] (not over-subscribing): tasks placed (nt or 0, what
    it reserved given back), or OVER."""
    best = -1                                        # _packed_order: the tightest whole fit first
    for i in range(cnt):
        n = ns[i]
        if _fits(free, n, d, nt) and (best < 0 or free[n, GPU] < free[best, GPU]):
            best = n
    if nt == 1:                                      # (_place_one: only a whole fit holds it)
        order = np.empty(1, np.int64)
        order[0] = best
        m = 1 if best >= 0 else 0
    else:
        by = ns[:cnt][np.argsort(-free[ns[:cnt], GPU], kind="mergesort")]
        order = np.empty(cnt, np.int64)
        m = 0
        if best >= 0:
            order[0] = best
            m = 1
        for i in range(cnt):
            if by[i] != best:
                order[m] = by[i]
                m += 1
    for t in range(nt):                              # _pick_free, worker by worker
        got = -1
        for i in range(m):
            if _fits(free, order[i], d, 1):
                got = order[i]
                break
        if got < 0:
            _undo(free, gload, d, outn, outg, t, kk)
            return 0
        _fp._take_gpus(got, float(kk), gload, gload, False, node_gpus, taken, outg[t])
        for x in range(kk):
            if gload[got, outg[t, x]] > mx:          # _under_cap: it would go on down the order
                return OVER
        for r in range(free.shape[1]):
            free[got, r] -= d[r]
        outn[t] = got
    return nt


def _undo(free, gload, d, outn, outg, t, kk):
    for u in range(t):
        for r in range(free.shape[1]):
            free[outn[u], r] += d[r]
        for x in range(kk):
            gload[outn[u], outg[u, x]] -= 1


def _place_py(free, gload, node_gpus, okrow, aff, njobs, s, size, d, nt, kk, over, mx, outn, outg, taken):
    """GandivaPlace._get_nodes for a job of nt alike tasks (demand d, kk GPUs each) and size
    `size` (affinity column s) on the nodes of okrow: tasks placed (nt or 0), or OVER."""
    nodes = free.shape[0]
    ns = np.empty(nodes, np.int64)
    load = np.empty(nodes)
    c1 = _nodes1(gload, node_gpus, okrow, aff, s, ns, load)
    if c1 > 0 and load[ns[0]] < 1:                   # 1. same affinity, least loaded
        m = _try_py(free, gload, node_gpus, ns, c1, d, nt, kk, mx, outn, outg, taken)
        if m != 0:
            return m
    cnt, gpus = 0, 0.0                               # 2. unallocated nodes, with G GPUs in all
    for n in range(nodes):
        if okrow[n] and node_gpus[n] > 0 and njobs[n] == 0:
            ns[cnt] = n
            cnt += 1
            gpus += node_gpus[n]
    if gpus >= size - _EPS:
        m = _try_py(free, gload, node_gpus, ns, cnt, d, nt, kk, mx, outn, outg, taken)
        if m != 0:
            return m
    cnt = 0                                          # 3. any node with a free GPU
    for n in range(nodes):
        if okrow[n] and node_gpus[n] > 0 and free[n, GPU] > _EPS:
            ns[cnt] = n
            cnt += 1
    if cnt > 0:
        m = _try_py(free, gload, node_gpus, ns, cnt, d, nt, kk, mx, outn, outg, taken)
        if m != 0:
            return m
    if over:                                         # 4. over-subscription (GandivaPlace._pick_over)
        c1 = _nodes1(gload, node_gpus, okrow, aff, s, ns, load)
        for t in range(nt):
            best, bk0, bk1 = -1, 0, 0
            for i in range(c1):
                n = ns[i]
                ok = True
                for r in range(GPU + 1, free.shape[1]):
                    ok = ok and free[n, r] >= d[r] - _EPS
                if not ok:
                    continue
                _fp._take_gpus(n, float(kk), gload, gload, False, node_gpus, taken, outg[t])
                k0 = 0
                for x in range(kk):                  # (taken, then given back: a look only)
                    gload[n, outg[t, x]] -= 1
                    k0 = max(k0, gload[n, outg[t, x]])
                if k0 + 1 > mx:
                    continue
                k1 = 1
                for u in range(t):
                    if outn[u] == n:
                        k1 = 0
                if best < 0 or k0 < bk0 or (k0 == bk0 and k1 < bk1):
                    best, bk0, bk1 = n, k0, k1
            if best < 0:
                _undo(free, gload, d, outn, outg, t, kk)
                return 0
            _fp._take_gpus(best, float(kk), gload, gload, False, node_gpus, taken, outg[t])
            for r in range(free.shape[1]):
                free[best, r] -= d[r]
            outn[t] = best
        return OVER
    return 0


def _nodes1(gload, node_gpus, okrow, aff, s, ns, load):
    """Algorithm 1's nodes1 into ns: the least loaded of the nodes holding a job of size s (loads
    as _NodeView.load: the slots' tasks summed, over the node's GPUs); their count."""
    lo = np.inf
    for n in range(gload.shape[0]):
        if okrow[n] and node_gpus[n] > 0 and s >= 0 and aff[n, s] > 0:
            tot = 0.0
            for g in range(gload.shape[1]):
                tot += max(gload[n, g], 0)
            load[n] = tot / node_gpus[n]
            lo = min(lo, load[n])
    c = 0
    for n in range(gload.shape[0]):
        if okrow[n] and node_gpus[n] > 0 and s >= 0 and aff[n, s] > 0 and abs(load[n] - lo) < _EPS:
            ns[c] = n
            c += 1
    return c


def _hold_py(aff, njobs, srun, s, pl_node, tk_pl, first, nt, sign):
    """A job of size column s starts (sign 1) or ends (-1) on its tasks' nodes (each node once);
    srun counts the jobs of each size placed and not finished."""
    srun[s] += sign
    for k in range(first, first + nt):
        nd = pl_node[tk_pl[k]]
        seen = False
        for k2 in range(first, k):
            seen = seen or pl_node[tk_pl[k2]] == nd
        if not seen:
            aff[nd, s] += sign
            njobs[nd] += sign


def _defrag_py(free, capn, okrow, d, nt, size):
    """Whether GandivaMigrate._defrag would search for a waiting job of nt tasks of demand d
    (size GPUs), before the round places anything: two GPUs or more, as many free in all, a node
    that could hold it whole (its capacity) but none of its GPU type that holds it now. Any
    node's capacity counts (it errs towards True: a search the Python loop would then not make
    costs only the kernel's time)."""
    if size < 2 - 1e-6:
        return False
    tot = 0.0
    for n in range(free.shape[0]):
        tot += max(free[n, GPU], 0.0)
    if tot < size - 1e-6:
        return False
    could = False
    for n in range(free.shape[0]):
        could = could or _fits(capn, n, d, nt)
    if not could:
        return False
    for n in range(free.shape[0]):
        if okrow[n] and _fits(free, n, d, nt):
            return False
    return True


place, hold, defrag = _place_py, _hold_py, _defrag_py


def compile() -> None:
    """Make place and hold compiled (numba), after the helpers they call (scheduler/fastplace's
    first: fastloop.available)."""
    global place, hold, defrag, _fits, _try_py, _undo, _nodes1
    if place is _place_py:
        import numba
        jit = numba.njit(cache=True, nogil=True)
        _fits, _undo, _nodes1 = jit(_fits), jit(_undo), jit(_nodes1)
        _try_py = jit(_try_py)
        place, hold, defrag = jit(_place_py), jit(_hold_py), jit(_defrag_py)


# -- the driver's side (dlsched.sim.fastloop): what applies, and the kernel's inputs ------------------
#: the kernel's inputs for a profile without GandivaPlace
NONE = {"gand": False, "gsz": np.zeros(0, np.int64), "gval": np.zeros(0), "gover": False, "gmax": 0, "gact": False}


def placer(profile):
    """The profile's GandivaPlace where it is its only placer, else None."""
    from dlsched.policies.actions.gandiva_place import GandivaPlace
    ps = profile.placers if profile is not None else ()
    return ps[0] if len(ps) == 1 and type(ps[0]) is GandivaPlace else None


def actions(profile) -> tuple:
    """The `gandiva` profile's actions (migrate, pack, time slicing, grow), where the profile has
    these four and GandivaPlace, else (). The kernel runs them as deciding nothing, and stops
    (the Python loop's) where migrate would search to defragment or time slicing could give a
    waiting job a running one's GPUs; pack and migrate's moves act only on time-sliced jobs,
    and grow only on jobs of a known model, which the kernel never takes."""
    from dlsched.policies.actions.gandiva_grow import GandivaGrow
    from dlsched.policies.actions.gandiva_migrate import GandivaMigrate
    from dlsched.policies.actions.gandiva_pack import GandivaPack
    from dlsched.policies.actions.gandiva_timeslice import GandivaTimeslice
    acts = tuple(profile.actions) if profile is not None else ()
    kinds = sorted(type(a).__name__ for a in acts)
    if placer(profile) is None or kinds != sorted(c.__name__ for c in (GandivaGrow, GandivaMigrate, GandivaPack,
                                                                         GandivaTimeslice)):
        return ()
    return acts


def inputs(profile, cl, specs) -> dict | None:
    """GandivaPlace's inputs (NONE for a profile without it): each job's size (its GPUs, what
    gandiva_affinity._size reads) by column and by value, and the nodes of each GPU type asked for
    (as scheduler/fastplace's); None where the kernel does not place as it does: a node with GPU
    affinity groups, or a job whose tasks are not alike or lack a whole GPU each."""
    g = placer(profile)
    if g is None:
        return NONE
    if any(nd.gpus_per_group for nd in cl.nodes):
        return None
    column: dict = {}
    gsz = np.empty(len(specs), np.int64)
    gval = np.empty(len(specs))
    for j, s in enumerate(specs):
        tasks = s.tasks
        d = tasks[0].demand
        if not d[GPU] >= 1 or any(t.demand != d for t in tasks):
            return None
        size = float(sum(t.demand[GPU] for t in tasks)) if len(tasks) > 1 else float(d[GPU])
        gsz[j] = column.setdefault(size, len(column))
        gval[j] = size
    tmask = _fpl.type_rows(cl)
    return {"gand": True, "gsz": gsz, "gval": gval, "gover": bool(g.oversubscribe), "gmax": int(g.max_load),
            "gact": bool(actions(profile)), "tmask": tmask}
