"""The event heap of the compiled run (dlsched.sim.fastloop_kernel): its finishes, ordered as
SimBackend's EventHeap orders them (by time, then by the sequence number the re-rate gave each),
on three arrays (time, sequence, job); the order in which a round's launched jobs are re-rated
(by job id, as SimBackend._refresh takes its touched set); the waiting queue in key order; a
finished job's resources given back; and the timeline's sample after each batch of events. Compiled by `compile` before
the kernel (numba caches by file: after a change here, touch fastloop_kernel.py).
"""
from __future__ import annotations


def _pop_py(ht, hs, hj, hn):
    """Remove the root (the least entry) of the heap's hn entries: the last sifted down from
    the root. Returns the new count."""
    hn -= 1
    if hn > 0:
        xt, xs, xj = ht[hn], hs[hn], hj[hn]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= hn:
                break
            if c + 1 < hn and (ht[c + 1] < ht[c] or (ht[c + 1] == ht[c] and hs[c + 1] < hs[c])):
                c += 1
            if ht[c] < xt or (ht[c] == xt and hs[c] < xs):
                ht[i], hs[i], hj[i] = ht[c], hs[c], hj[c]
                i = c
            else:
                break
        ht[i], hs[i], hj[i] = xt, xs, xj
    return hn


def _push_py(ht, hs, hj, hn, ft, fs, j):
    """Add (ft, fs, j) to the heap's hn entries: sifted up from the end. Returns the new count."""
    i = hn
    while i > 0:
        par = (i - 1) // 2
        if ft < ht[par] or (ft == ht[par] and fs < hs[par]):
            ht[i], hs[i], hj[i] = ht[par], hs[par], hj[par]
            i = par
        else:
            break
    ht[i], hs[i], hj[i] = ft, fs, j
    return hn + 1


def _by_id_py(launched, nl, idrank, touched):
    """touched[:nl] = launched[:nl] in job-id order (idrank: each job's rank by id)."""
    for li in range(nl):
        touched[li] = launched[li]
    for li in range(1, nl):
        x = touched[li]
        y = li - 1
        while y >= 0 and idrank[touched[y]] > idrank[x]:
            touched[y + 1] = touched[y]
            y -= 1
        touched[y + 1] = x


def _sample_py(tl_f, tl_n, ntl, now, a, e, pt, nrun, qn):
    """Scheduler._run's timeline sample after a batch at `now`: (now, allocated, effective,
    partial GPUs; running, queued) appended where it differs from the last, which it replaces
    at the same time. Returns the new count of samples."""
    if ntl == 0:
        tl_f[0, 0], tl_f[0, 1], tl_f[0, 2], tl_f[0, 3] = now, a, e, pt
        tl_n[0, 0], tl_n[0, 1] = nrun, qn
        return 1
    if (tl_f[ntl - 1, 1] != a or tl_f[ntl - 1, 2] != e or tl_f[ntl - 1, 3] != pt
            or tl_n[ntl - 1, 0] != nrun or tl_n[ntl - 1, 1] != qn):
        if tl_f[ntl - 1, 0] != now:
            ntl += 1
        tl_f[ntl - 1, 0], tl_f[ntl - 1, 1], tl_f[ntl - 1, 2], tl_f[ntl - 1, 3] = now, a, e, pt
        tl_n[ntl - 1, 0], tl_n[ntl - 1, 1] = nrun, qn
    return ntl


def _enqueue_py(q, qn, keyrank, j):
    """bisect.insort of job j into the queue q[:qn], kept in key order (keyrank: each job's rank
    by its key). Returns the new length."""
    lo, hi = 0, qn
    while lo < hi:
        mid = (lo + hi) // 2
        if keyrank[j] < keyrank[q[mid]]:
            hi = mid
        else:
            lo = mid + 1
    for i in range(qn, lo, -1):
        q[i] = q[i - 1]
    q[lo] = j
    return qn + 1


def _dequeue_py(q, qn, keyrank, j):
    """Job j out of the queue q[:qn] (found by bisection). Returns the new length."""
    lo, hi = 0, qn
    while lo < hi:
        mid = (lo + hi) // 2
        if keyrank[q[mid]] < keyrank[j]:
            lo = mid + 1
        else:
            hi = mid
    for i in range(lo, qn - 1):
        q[i] = q[i + 1]
    return qn - 1


def _give_py(j, toff, ntask, tk_pl, pl_node, pl_goff, tdem, tgpu, dem, gbuf, free, gload):
    """SimBackend._give of a finished job's tasks, task by task: their demands back to their
    nodes' free resources, their GPU slots unloaded. Returns how many slots it left idle."""
    idle = 0
    for k in range(toff[j], toff[j] + ntask[j]):
        p = tk_pl[k]
        nd = pl_node[p]
        u = tdem[k]
        for r in range(free.shape[1]):
            free[nd, r] += dem[u, r]
        for x in range(pl_goff[p], pl_goff[p] + tgpu[k]):
            gload[nd, gbuf[x]] -= 1
            if gload[nd, gbuf[x]] == 0:
                idle += 1
    return idle


def _short_py(first, end, tdem, dem, free, need, have):
    """A gang's tasks first:end need more of a resource than all nodes have free together (the
    all-or-nothing check before its tasks are placed)."""
    nres = free.shape[1]
    for r in range(nres):
        need[r] = 0.0
        have[r] = 0.0
    for k in range(first, end):
        for r in range(nres):
            need[r] += dem[tdem[k], r]
    for nd in range(free.shape[0]):
        for r in range(nres):
            have[r] += free[nd, r]
    for r in range(nres):
        if need[r] > have[r] + 1e-9:
            return True
    return False


def rounds(n: int, ticks: bool, every_event: bool = True, thresholds: int = 0) -> int:
    """A bound on the rounds of a run of n jobs (and on its timeline's samples), nobody being
    preempted: one per arrival or finish; with a periodic round (ticks), one more per tick that
    is not skipped as quiet, which follows a round that started a job or a batch of rejected
    arrivals alone. Where rounds run only at ticks (not every_event), a tick runs one after
    each batch of events (2n), after each round that started a job (n), and where a running
    job's attained service crosses one of its order's `thresholds` (at most two ticks each)."""
    if not ticks:
        return 2 * n + 2
    return (4 if every_event else 3 + 2 * thresholds) * n + 2


pop, push, by_id, sample, enqueue, dequeue = _pop_py, _push_py, _by_id_py, _sample_py, _enqueue_py, _dequeue_py
give, short = _give_py, _short_py


def compile() -> None:
    """Make the heap's functions compiled (numba), as the kernel needs them when it is compiled."""
    global pop, push, by_id, sample, enqueue, dequeue, give, short
    if pop is _pop_py:
        import numba
        jit = numba.njit(cache=True, nogil=True)
        pop, push, by_id, sample = jit(_pop_py), jit(_push_py), jit(_by_id_py), jit(_sample_py)
        enqueue, dequeue, give, short = jit(_enqueue_py), jit(_dequeue_py), jit(_give_py), jit(_short_py)
