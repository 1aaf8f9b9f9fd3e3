"""DRF's order in a round of the compiled run (dlsched.sim.fastloop_kernel): each user's held
demand and dominant share, kept as jobs start and finish, and progressive filling (the next job
is one of the user whose share is then the smallest; ties: submit time, then id). What DrfOrder
and Placing._place_dynamic (or _place_by_user) do, over arrays, for demands of whole numbers
(every sum exact in any order, as DrfOrder's kept sums); compiled by `compile` before the kernel
(numba caches by file: after a change here, touch fastloop_kernel.py).
"""
from __future__ import annotations

import numpy as np


def _dominant_py(u, uused, capv):
    """User u's dominant share: max over resources the cluster has of held / capacity."""
    s = 0.0
    seen = False
    for r in range(capv.shape[0]):
        if capv[r] > 0:
            x = uused[u, r] / capv[r]
            if not seen or x > s:
                s = x
            seen = True
    return s


def _charge_py(u, sign, ks, nk, tdem, dem, uused, share, capv):
    """Add (sign 1) or take back (-1) the demands of tasks ks[:nk] to user u's holding."""
    for i in range(nk):
        for r in range(capv.shape[0]):
            uused[u, r] += sign * dem[tdem[ks[i]], r]
    share[u] = dominant(u, uused, capv)


def _order_py(q, qn, juser, share, qs):
    """q[:qn] (in the order of submit time and id) sorted stably by the users' shares into qs:
    the round's queue in DRF's order at its start (the lanes of a tenancy's walk keep it)."""
    sh = np.empty(qn)
    for i in range(qn):
        sh[i] = share[juser[q[i]]]
    o = np.argsort(sh, kind="mergesort")
    for i in range(qn):
        qs[i] = q[o[i]]


def _lanes_py(q, qn, mark, r, every, juser, ucnt, uoff, uhead, ubuf, users):
    """Each user's candidates (the jobs of q[:qn] with mark == r, or all of them where every)
    in q's order; the users, first met, into users; returns how many."""
    nu = 0
    for i in range(qn):
        j = q[i]
        if every or mark[j] == r:
            u = juser[j]
            if ucnt[u] == 0:
                users[nu] = u
                nu += 1
            ucnt[u] += 1
    c = 0
    for i in range(nu):
        u = users[i]
        uoff[u] = c
        uhead[u] = c
        c += ucnt[u]
    for i in range(qn):
        j = q[i]
        if every or mark[j] == r:
            u = juser[j]
            ubuf[uhead[u]] = j
            uhead[u] += 1
    for i in range(nu):
        uhead[users[i]] = uoff[users[i]]
    return nu


def _pick_py(users, nu, ucnt, uoff, uhead, ubuf, share, keyrank):
    """The next candidate: the first left of the user of least (share, its rank); -1 if none
    (the caller clears the users' counts after the round)."""
    best = -1
    for i in range(nu):
        u = users[i]
        if uhead[u] < uoff[u] + ucnt[u]:
            j = ubuf[uhead[u]]
            if best < 0 or share[u] < share[best] or (share[u] == share[best]
                                                      and keyrank[j] < keyrank[ubuf[uhead[best]]]):
                best = u
    if best < 0:
        return -1
    j = ubuf[uhead[best]]
    uhead[best] += 1
    return j


dominant, charge, order, lanes, pick = _dominant_py, _charge_py, _order_py, _lanes_py, _pick_py


def inputs(profile, specs, cl) -> dict:
    """DRF's inputs for the kernel: each job's user by number and the cluster's capacity of each
    resource, summed over its nodes (DrfOrder's C); none for another order."""
    from dlsched.core.types import NRES
    from dlsched.policies.order.drf import DrfOrder
    if type(profile.order) is not DrfOrder if profile is not None else True:
        return {"dyn": False, "juser": np.zeros(0, np.int64), "capv": np.zeros(NRES)}
    number: dict = {}
    juser = np.array([number.setdefault(s.user, len(number)) for s in specs], np.int64)
    return {"dyn": True, "juser": juser, "capv": np.asarray(cl.capacity, np.float64).sum(axis=0)}


def compile() -> None:
    """Make the helpers compiled (numba), as the kernel needs them when it is compiled."""
    global dominant, charge, order, lanes, pick
    if dominant is _dominant_py:
        import numba
        jit = numba.njit(cache=True, nogil=True)
        dominant = jit(_dominant_py)          # (first: charge calls it)
        charge, order, lanes, pick = jit(_charge_py), jit(_order_py), jit(_lanes_py), jit(_pick_py)
