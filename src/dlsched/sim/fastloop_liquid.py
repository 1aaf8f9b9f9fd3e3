"""Scorers that read the job's tasks placed before in the round, in a round of the compiled run
(dlsched.sim.fastloop_kernel): Liquid's best fit (the `liquid` scorer, policies/place/liquid.py;
the `liquid-immediate` profile, whose placer decides nothing where its allocator does not
estimate: liquid_resize carries out an empty allocation) and Pollux's most-free placement (the
`most_free` scorer, policies/place/most_free.py; the `tiresias` profile):

    most_free(c) = round(0 + w x ((held(c) + clip(free GPUs(c) / GPUs(c), 0, 1)) / 2), 12)

with held(c) 1 where the job placed a task on c before, this round.

Each task of a job goes to the node of greatest score among those its fits filter passes (of
its GPU type), ties to the lowest node, as Placing.choose_node takes it:

    cost(c)  = (in_rack - on_node) x rack_cost[c] + (in_dom - in_rack) x dom_cost[c]
               + (k - in_dom) x cluster_cost           (k: the job's tasks placed before it, this
                                                        round; on_node, in_rack, in_dom: those on
                                                        c, in c's rack, in c's domain)
    fit(c)   = clip(-(GPUs asked + used) / GPUs, -1, 0) (0 on a node without GPUs)
    S(c)     = lam x cost + (1 - lam) x fit
    score(c) = round(0 + w x clip((hi - S) / (hi - lo), 0, 1), 12),  lo = -(1 - lam),
               hi = (lam x k) x max_pair               (1 where hi - lo <= 0)

every operation in NetworkCost.sum_to's, gpu_fitness's, LiquidScorer.score's and
Placing._combined's order, so that each score is the Python loop's to the bit. A job that does
not communicate (not DL, or comm none) has k = 0 throughout. Compiled by `compile` before the
kernel (numba caches by file: after a change here, touch fastloop_kernel.py).
"""
from __future__ import annotations

import numpy as np

from dlsched.core.types import GPU
from dlsched.scheduler import fastplace as _fp
from dlsched.sim import fastloop_place as _fpl


def _place_py(free, capn, okrow, tdem, first, k0, dem, thr_n, thr_dim, thr_val, lqf, lqi, lqc, comm, gload,
              node_gpus, outn, outg, taken, on_node, in_rack, in_dom):
    """Place the k0 tasks tdem[first:first + k0] one at a time (each reserved before the next is
    scored); how many were placed (the first that fits nowhere stops). lqf: lam, the scorer's
    weight, the cluster's cost and max_pair; lqi: each node's rack and domain; lqc: each node's
    rack and domain cost; on_node, in_rack, in_dom: zeroed counters (left zeroed)."""
    lam, w, cluster_cost, max_pair = lqf[0], lqf[1], lqf[2], lqf[3]
    most_free = lqf[4] == 1.0                # (lqc[:, 0]: each node's 1 / GPUs then)
    nodes = free.shape[0]
    placed = 0
    for t in range(k0):
        u = tdem[first + t]
        k = t if comm else 0
        lo = -(1.0 - lam)
        hi = lam * k * max_pair
        best, best_s = -1, -np.inf
        for c in range(nodes):
            if not okrow[c]:
                continue
            fits = True
            for x in range(thr_n[u]):
                if not free[c, thr_dim[u, x]] >= thr_val[u, x]:
                    fits = False
                    break
            if not fits:
                continue
            if most_free:
                s = ((1.0 if on_node[c] > 0 else 0.0) + min(max(free[c, GPU] * lqc[c, 0], 0.0), 1.0)) / 2.0
            elif hi - lo <= 0.0:
                s = 1.0
            else:
                cost = 0.0
                if k > 0:
                    a = on_node[c]
                    b = in_rack[lqi[c, 0]]
                    e = in_dom[lqi[c, 1]]
                    cost = ((b - a) * lqc[c, 0] + (e - b) * lqc[c, 1]) + (k - e) * cluster_cost
                total = capn[c, GPU]
                fit = 0.0
                if total > 0:
                    fit = min(max(-(dem[u, GPU] + (total - free[c, GPU])) / total, -1.0), 0.0)
                raw = lam * cost + (1.0 - lam) * fit
                s = min(max((hi - raw) / (hi - lo), 0.0), 1.0)
            s = 0.0 + w * s
            s = ((s * 1e12 + _fp._ROUND) - _fp._ROUND) / 1e12
            if s > best_s:
                best, best_s = c, s
        if best < 0:
            break
        for r in range(free.shape[1]):                       # Transaction.reserve
            free[best, r] -= dem[u, r]
        _fp._take_gpus(best, dem[u, GPU], gload, gload, False, node_gpus, taken, outg[t])
        outn[t] = best
        placed += 1
        on_node[best] += 1
        in_rack[lqi[best, 0]] += 1
        in_dom[lqi[best, 1]] += 1
    for t in range(placed):                                  # (the counters zeroed again)
        on_node[outn[t]] = 0
        in_rack[lqi[outn[t], 0]] = 0
        in_dom[lqi[outn[t], 1]] = 0
    return placed


place = _place_py


def compile() -> None:
    """Make place compiled (numba), after scheduler/fastplace's helpers it calls."""
    global place
    if place is _place_py:
        import numba
        place = numba.njit(cache=True, nogil=True)(_place_py)


# -- the driver's side (dlsched.sim.fastloop) ------------------------------------------------------
NONE = {"lqf": np.zeros(0), "lqi": np.zeros((0, 2), np.int64), "lqc": np.zeros((0, 2)),
        "jcomm": np.zeros(0, np.bool_)}


def applies(profile) -> str | None:
    """"liquid" where the profile places by the `liquid` scorer alone after the fits filter, with
    only liquid_resize as a placer and an allocator that does not estimate (`liquid-immediate`);
    "most_free" where by the `most_free` scorer alone, without placers, allocating what jobs
    request (`tiresias`); else None. Gang profiles only (no job holds tasks between rounds)."""
    from dlsched.policies.actions.liquid_resize import LiquidResize
    from dlsched.policies.allocate.liquid_estimate import LiquidEstimateAllocate
    from dlsched.policies.allocate.requested import RequestedAllocate
    from dlsched.policies.place.fits import FitsFilter
    from dlsched.policies.place.liquid import LiquidScorer
    from dlsched.policies.place.most_free import MostFreeScorer
    if profile is None or len(profile.scorers) != 1 or len(profile.filters) != 1 or not profile.gang \
            or type(profile.filters[0]) is not FitsFilter:
        return None
    sc, a = profile.scorers[0][0], profile.allocator
    if (type(sc) is LiquidScorer and not sc.needs and [type(p) for p in profile.placers] == [LiquidResize]
            and type(a) is LiquidEstimateAllocate and not a.estimate):
        return "liquid"
    if type(sc) is MostFreeScorer and not profile.placers and type(a) is RequestedAllocate:
        return "most_free"
    return None


def inputs(profile, cl, specs) -> dict | None:
    """The scorer's inputs (NONE for another profile); None where a job has parameter servers
    (the partners are then by role)."""
    from dlsched.core.types import Role
    from dlsched.policies.place.liquid import communicates, network_cost
    kind = applies(profile)
    if kind is None:
        return NONE
    nc = network_cost(cl)
    jcomm = np.empty(len(specs), np.bool_)
    for j, s in enumerate(specs):
        if any(t.role is Role.PS for t in s.tasks):
            return None
        jcomm[j] = communicates(s, s.tasks) == "all"
    sc, w = profile.scorers[0]
    tmask = _fpl.type_rows(cl)
    if kind == "most_free":
        inv = np.asarray(cl.inv_capacity, np.float64)[:, GPU]
        return {"lqf": np.array([0.0, float(w), 0.0, 0.0, 1.0]), "lqi": np.zeros((len(inv), 2), np.int64),
                "lqc": np.ascontiguousarray(np.stack([inv, inv], axis=1)), "jcomm": jcomm, "tmask": tmask}
    return {"lqf": np.array([sc.lam, float(w), nc.cluster_cost, nc.max_pair, 0.0]),
            "lqi": np.ascontiguousarray(np.stack([nc.rack, nc.domain], axis=1), dtype=np.int64),
            "lqc": np.ascontiguousarray(np.stack([nc.rack_cost, nc.domain_cost], axis=1)), "jcomm": jcomm,
            "tmask": tmask}
