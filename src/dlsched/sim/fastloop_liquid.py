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

The `liquid` profile adds Liquid's batch strategy (policies/actions/liquid_batch.py) before each
round's placement loop. The kernel measures the arrival rate (`batch`) and, where it is over the
threshold, hands the batch to the genetic algorithm in Python (`_ga_round`, through
fastloop_ga's object mode), with the same problem and the scheduler's own generator; it then
commits the plan (`commit`) and goes on. The Philly replay has 8 such rounds in 151,000: each
costs what it costs in Python, and the draws are the Python loop's without a numba copy of
numpy's Generator. A run the kernel does not finish puts the generator's state back (`end`).
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


def _batch_py(lqb, sub, lst, na, now, free, bjobs, bnode):
    """LiquidBatch.place's switch and batch, before the round's placement loop: where the
    waiting jobs of lst[:na] (the round's queue) submitted in the last window (lqb: threshold,
    window, largest batch) arrive faster than the threshold, its first jobs (all undecided and
    wholly unplaced: nothing is decided before the placers, no job holds tasks between rounds)
    go to the genetic algorithm, run in Python (`ga`: `_ga_round` through fastloop_ga's object
    mode). Returns how many it placed: bjobs[:m] those jobs, bnode each of their tasks' node."""
    if lqb.shape[0] == 0 or na == 0:
        return 0
    since = now - lqb[1]
    c = 0
    for i in range(na):
        if sub[lst[i]] > since:
            c += 1
    if c / lqb[1] <= lqb[0]:
        return 0
    nb = min(na, int(lqb[2]))
    for i in range(nb):
        bjobs[i] = lst[i]
    return ga(bjobs[:nb], free, bnode, now)


def _commit_py(m, bjobs, bnode, toff, ntask, tdem, dem, tgpu, free, gload, node_gpus, slots, outg, pl_task,
               pl_node, pl_goff, gbuf, tk_pl, npl, ng, launched, lstart, lcount, nl, nplaced):
    """The batch's m jobs reserved (each task on its node, the least loaded GPU slots, lowest
    index first, as Transaction.reserve picks them) and committed whole, in the batch's order,
    as the kernel records a placement. Returns (npl, ng, nl)."""
    for i in range(m):
        j = bjobs[i]
        s0 = npl
        for k in range(toff[j], toff[j] + ntask[j]):
            nd = bnode[k]
            u = tdem[k]
            for r in range(free.shape[1]):
                free[nd, r] -= dem[u, r]
            pl_task[npl], pl_node[npl], pl_goff[npl] = k - toff[j], nd, ng
            kk = tgpu[k]
            if kk > 0:
                _fp._take_gpus(nd, float(kk), gload, gload, False, node_gpus, slots, outg[0])
                gbuf[ng:ng + kk] = outg[0, :kk]
                ng += kk
            tk_pl[k] = npl
            npl += 1
        launched[nl], lstart[nl], lcount[nl] = j, s0, npl - s0
        nl += 1
        nplaced[j] = ntask[j]
    return npl, ng, nl


#: the run the genetic algorithm's rounds belong to (set by `begin` for the kernel's call):
#: the LiquidBatch placer, the cluster, the jobs' specs, the scheduler's generator, task offsets
_RUN: tuple | None = None


_LAST = [0.0]      # the time of the last batch the genetic algorithm placed


def _ga_round(bjobs, free, bnode, now) -> int:
    """LiquidBatch.plan over the jobs bjobs (kernel indices) on the free resources `free`, with
    the scheduler's generator, as in the Python loop: the same problem, the same draws. Writes
    the jobs it places to bjobs[:m], in batch order, and each of their tasks' node to bnode;
    returns m."""
    from types import SimpleNamespace

    from dlsched.scheduler.context import JobRecord
    placer, cl, specs, rng, toff = _RUN
    recs = [JobRecord(specs[j], specs[j].tasks) for j in bjobs.tolist()]
    ctx = SimpleNamespace(snap=SimpleNamespace(cluster=cl, up=np.ones(cl.num_nodes, np.bool_)),
                          txn=SimpleNamespace(free=free), allocation={}, rng=rng)
    prob, best, placed = placer.plan(ctx, recs)
    for i, b in enumerate(placed):          # (i <= b: bjobs[b] is read before bjobs[i] is written)
        j = int(bjobs[b])
        bnode[toff[j]:toff[j + 1]] = best[prob.start[b]:prob.start[b + 1]]
        bjobs[i] = j
    _LAST[0] = now
    return len(placed)


place, batch, commit, ga = _place_py, _batch_py, _commit_py, _ga_round


def compile() -> None:
    """Make place, batch and commit compiled (numba), after scheduler/fastplace's helpers they
    call; batch calls the genetic algorithm through fastloop_ga's object mode."""
    global place, batch, commit, ga
    if place is _place_py:
        import numba

        from dlsched.sim import fastloop_ga
        jit = numba.njit(cache=True, nogil=True)
        ga = fastloop_ga.call
        place, commit = jit(_place_py), jit(_commit_py)
        batch = numba.njit(cache=True)(_batch_py)      # (object mode inside: it holds the GIL)


def begin(sched, cl, specs, toff) -> tuple | None:
    """Arm the genetic algorithm's rounds for a kernel's call (the profile's LiquidBatch, if it
    has one); the generator's state, to `end` with. Where the kernel does not finish, the Python
    loop runs the replay again from the same draws."""
    from dlsched.policies.actions.liquid_batch import LiquidBatch
    global _RUN
    placer = next((p for p in sched.profile.placers if type(p) is LiquidBatch), None)
    if placer is None:
        return None
    _RUN = (placer, cl, specs, sched.rng, toff)
    return sched.rng.bit_generator.state


def end(sched, state, rounds_t) -> None:
    """After the kernel's call: `rounds_t` the times of its rounds, None where it did not finish
    (the generator's state goes back to `state`, for the Python loop). As in the Python loop,
    the placer's `last` is None unless its last round was a batch's."""
    global _RUN
    placer = _RUN[0] if _RUN is not None else None
    _RUN = None
    if state is None:
        return
    if rounds_t is None:
        sched.rng.bit_generator.state = state
    elif placer.last is not None and (not len(rounds_t) or _LAST[0] != rounds_t[-1]):
        placer.last = None


# -- the driver's side (dlsched.sim.fastloop) ------------------------------------------------------
NONE = {"lqf": np.zeros(0), "lqi": np.zeros((0, 2), np.int64), "lqc": np.zeros((0, 2)),
        "jcomm": np.zeros(0, np.bool_), "lqb": np.zeros(0), "sub": np.zeros(0)}


def applies(profile) -> str | None:
    """"liquid" where the profile places by the `liquid` scorer alone after the fits filter, with
    liquid_resize as its placer, after liquid_batch or alone, and an allocator that does not
    estimate (`liquid`, `liquid-immediate`);
    "most_free" where by the `most_free` scorer alone, without placers, allocating what jobs
    request (`tiresias`); else None. Gang profiles only (no job holds tasks between rounds)."""
    from dlsched.policies.actions.liquid_batch import LiquidBatch
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
    placers = [type(p) for p in profile.placers]
    if (type(sc) is LiquidScorer and not sc.needs and placers in ([LiquidResize], [LiquidBatch, LiquidResize])
            and type(a) is LiquidEstimateAllocate and not a.estimate):
        return "liquid"
    if type(sc) is MostFreeScorer and not profile.placers and type(a) is RequestedAllocate:
        return "most_free"
    return None


def inputs(profile, cl, specs) -> dict | None:
    """The scorer's inputs (NONE for another profile); None where a job has parameter servers
    (the partners are then by role)."""
    from dlsched.core.types import Role
    from dlsched.policies.actions.liquid_batch import LiquidBatch
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
        return {**NONE, "lqf": np.array([0.0, float(w), 0.0, 0.0, 1.0]), "lqi": np.zeros((len(inv), 2), np.int64),
                "lqc": np.ascontiguousarray(np.stack([inv, inv], axis=1)), "jcomm": jcomm, "tmask": tmask}
    ga = next((p for p in profile.placers if type(p) is LiquidBatch), None)
    lqb = np.zeros(0) if ga is None else np.array([ga.rate_threshold_per_s, ga.window_s, float(ga.max_batch)])
    return {"lqb": lqb, "sub": np.array([s.submit_time_s for s in specs], np.float64),
            "lqf": np.array([sc.lam, float(w), nc.cluster_cost, nc.max_pair, 0.0]),
            "lqi": np.ascontiguousarray(np.stack([nc.rack, nc.domain], axis=1), dtype=np.int64),
            "lqc": np.ascontiguousarray(np.stack([nc.rack_cost, nc.domain_cost], axis=1)), "jcomm": jcomm,
            "tmask": tmask}
