"""The event heap of the compiled run (dlsched.sim.fastloop_kernel): its finishes, ordered as
SimBackend's EventHeap orders them (by time, then by the sequence number the re-rate gave each),
on three arrays (time, sequence, job); and the order in which a round's launched jobs are
re-rated (by job id, as SimBackend._refresh takes its touched set). Compiled by `compile` before
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


def rounds(n: int, ticks: bool) -> int:
    """A bound on the rounds of a run of n jobs (and on its distinct event times): one per
    arrival or finish, and with a periodic round (ticks) one per tick that is not skipped as
    quiet, which follows a round that decided something or a batch of rejected arrivals alone."""
    return (4 if ticks else 2) * n + 2


pop, push, by_id = _pop_py, _push_py, _by_id_py


def compile() -> None:
    """Make the heap's functions compiled (numba), as the kernel needs them when it is compiled."""
    global pop, push, by_id
    if pop is _pop_py:
        import numba
        jit = numba.njit(cache=True, nogil=True)
        pop, push, by_id = jit(_pop_py), jit(_push_py), jit(_by_id_py)
