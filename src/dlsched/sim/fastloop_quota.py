"""The admission walk and the accounts' round of dlsched.sim.fastloop_kernel under quotas: what
Tenancy.admit and Accounts.round do in a round of the compiled run (dlsched.sim.fastloop_tenancy
says where it applies), over arrays; compiled by `compile` before the kernel that calls them.

numba caches a compiled function by its own file: after a change here (or in
dlsched.scheduler.fastplace, whose placement the kernel calls), touch fastloop_kernel.py or
clear its __pycache__ so that the kernel is compiled again.
"""
from __future__ import annotations


def _walk_py(q, qn, tq, trank, tg, tnom, tcap, tstrict, tused, tw, asked, lcnt, loff, lhead, nref, ndec, blk,
             lbuf, adm):
    """Tenancy.admit over the waiting jobs q[:qn] (in the profile's order): each leaf's lane
    (lcnt jobs from loff in lbuf), the GPUs each asks in all, then the walk: the head of least
    Kueue key (within nominal first, then trank) admitted where `admits`, else refused (a strict
    queue's rest with it). Writes the admitted into adm; returns how many, or -1 where a refused
    head could take victims (within its nominal while another queue borrows: Kueue's reclaim,
    which the kernel does not do; the run goes back to Python)."""
    L = tnom.shape[0]
    for x in range(L):
        lcnt[x] = 0
        asked[x] = 0.0
        nref[x] = 0
        ndec[x] = 0
        blk[x] = False
        tw[x] = tused[x]
    for qi in range(qn):
        lcnt[tq[q[qi]]] += 1
        asked[tq[q[qi]]] += tg[q[qi]]
    c = 0
    for x in range(L):
        loff[x] = c
        lhead[x] = c
        c += lcnt[x]
    for qi in range(qn):
        x = tq[q[qi]]
        lbuf[lhead[x]] = q[qi]
        lhead[x] += 1
    for x in range(L):
        lhead[x] = loff[x]
    na = 0
    while True:
        best = -1
        bpart = 2
        brank = 0
        for x in range(L):
            if lhead[x] < loff[x] + lcnt[x]:
                j = lbuf[lhead[x]]
                part = 0 if (tg[j] <= 1e-9 or tw[x] + tg[j] <= tnom[x] + 1e-9) else 1
                if part < bpart or (part == bpart and trank[j] < brank):
                    best, bpart, brank = x, part, trank[j]
        if best < 0:
            break
        x = best
        j = lbuf[lhead[x]]
        if admits(x, tg[j], tw, tnom, tcap):
            tw[x] += tg[j]
            adm[na] = j
            na += 1
            lhead[x] += 1
        else:
            if tw[x] + tg[j] <= tnom[x] + 1e-9:          # KueueVictims.choose would look for some
                for c in range(L):
                    if c != x and tw[c] > tnom[c] + 1e-9:
                        return -1
            nref[x] += 1
            if tstrict:
                nref[x] += loff[x] + lcnt[x] - lhead[x] - 1
                lhead[x] = loff[x] + lcnt[x]
            else:
                lhead[x] += 1
    return na


def _admits_py(x, g, tw, tnom, tcap):
    """Book.fits on a flat tree: g more GPUs in leaf x keep it within its limit (tcap[x, 0]) and
    its nominal plus borrowing limit (tcap[x, 1]), and the root's balance (each leaf's idle
    nominal, at most its lending limit tcap[x, 2], summed) at or above 0."""
    if g <= 1e-9:
        return True
    u = tw[x] + g
    if u > tcap[x, 0] + 1e-9 or tnom[x] - u < -tcap[x, 1] - 1e-9:
        return False
    root = 0.0
    for c in range(tnom.shape[0]):
        b = tnom[c] - (u if c == x else tw[c])
        root += b if b < tcap[c, 2] else tcap[c, 2]
    return root >= -1e-9


def _interval_py(now, t_last, t_set, acc_h, cur_r, w_dt, w_h, w_r, nw):
    """Accounts.advance: the interval since t_last (where one began and time passed) kept with
    the GPUs held and the round in force over it; returns the intervals kept."""
    if t_set and now > t_last:
        w_dt[nw] = now - t_last
        w_h[nw, :] = acc_h
        w_r[nw] = cur_r
        nw += 1
    return nw


def _account_py(r, now, nl, launched, tq, tg, tnom, tused, tw, asked, lcnt, loff, nref, ndec, lbuf, decr, acc_h,
                r_t, r_dem, r_nq, r_npl, r_h, r_flag):
    """Accounts.round of round r (its time, the launched jobs launched[:nl]): each leaf's demand,
    jobs refused and admitted but not placed, the held GPUs, and whether a job within its
    leaf's nominal waited."""
    L = tnom.shape[0]
    flag = False
    for li in range(nl):
        ndec[tq[launched[li]]] += 1
        decr[launched[li]] = r
    for x in range(L):
        r_dem[r, x] = tused[x] + asked[x]
        r_nq[r, x] = nref[x]
        r_npl[r, x] = lcnt[x] - nref[x] - ndec[x]
        r_h[r, x] = acc_h[x]
        if not flag and lcnt[x] > 0:
            for y in range(loff[x], loff[x] + lcnt[x]):
                if decr[lbuf[y]] != r:
                    flag = tw[x] + tg[lbuf[y]] <= tnom[x] + 1e-9
                    break
    r_t[r] = now
    r_flag[r] = flag


admits, walk, account, interval = _admits_py, _walk_py, _account_py, _interval_py


def compile() -> None:
    """Make walk and account compiled (numba), as the kernel needs them when it is compiled."""
    global admits, walk, account, interval
    if walk is _walk_py:
        import numba
        admits = numba.njit(cache=True, nogil=True)(_admits_py)       # (first: walk calls it)
        walk = numba.njit(cache=True, nogil=True)(_walk_py)
        interval = numba.njit(cache=True, nogil=True)(_interval_py)
        account = numba.njit(cache=True, nogil=True)(_account_py)
