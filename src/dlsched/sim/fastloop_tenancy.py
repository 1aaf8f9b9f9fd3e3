"""Quotas in the compiled run of the FIFO family (dlsched.sim.fastloop): where it applies, its
inputs, and the tenancy's records it leaves.

It applies to Kueue classic (the `kueue` mode, its parts unchanged, reclaim from any priority,
no minimum runtimes) on GPU quotas of a flat tree (every queue a leaf under the root, the
cohort) where every job has the same priority. There the walk of Tenancy.admit takes the
queues' heads by Kueue's key (within nominal first, then submit time and id), each admitted
where Book.fits would (its queue's limit and nominal plus borrowing limit, the cohort's idle
nominal within each queue's lending limit), and a queue never preempts its own jobs (Kueue
does so only for a higher priority). Reclaim is not in the kernel: where a refused head within
its nominal could take victims from a queue that borrows, the kernel stops and the Python loop
runs the whole replay (as isolated queues never do; `philly-isolated`). The kernel
(dlsched.sim.fastloop_kernel) walks so, places
the admitted as Placing._place_per_queue does, and keeps per round and per interval what
Tenancy.observe and Accounts.round and advance keep; `write` sums the intervals in
Accounts.flush's blocks, so the summary's `queues`, fairness and series are the Python loop's
exactly (tests/unit/test_fastloop_tenancy.py). The speed it buys: every FIFO-family policy on the
per-VC Philly replay (benchmarks/bench_tenancy.py, RESULTS.md block `tenancy`).
"""
from __future__ import annotations

import math

import numpy as np

from dlsched.core.types import GPU
from dlsched.sim import fastloop_events
from dlsched.sim.fastloop_kernel import REJECTED
from dlsched.tenancy.accounts import BLOCK
from dlsched.tenancy.book import Book, request_of
from dlsched.tenancy.tree import ROOT

_EPS = 1e-9

#: the most the kernel's per-round and per-interval output may take (five arrays of event times x
#: leaves, float64): 105 MB for the Philly trace's 82,247 jobs and 16 queues; a run that would take
#: more (a million jobs in a dozen queues) runs in Python
MAX_BYTES = 1 << 30

#: the kernel's quota inputs of a run without a tenancy (no leaves), in the kernel's order of arguments
NONE = {"tq": np.zeros(0, np.int64), "trank": np.zeros(0, np.int64), "tg": np.zeros(0), "tnom": np.zeros(0),
        "tcap": np.zeros((0, 3)), "tstrict": False}


def applies(sched) -> bool:
    """The tenancy's mode is one the kernel's walk mirrors, and it has not run (see the module;
    what depends on the jobs is checked by `inputs`)."""
    ten = sched.tenancy
    s = ten.mode.spec
    return (s.entitlement == "nominal" and s.queue_order == "kueue" and s.victims == "kueue" and s.ledger is None
            and s.pool == "none" and not s.non_preemptible_in_quota and s.reclaim_min_runtime_s == 0
            and s.preempt_min_runtime_s == 0 and getattr(ten.mode.victims, "reclaim", None) == "any"
            and ten.resources == ["gpu"] and ten.accounts.t is None
            and not ten._hold and not ten.started)


def inputs(sched, specs) -> dict | None:
    """Each job's leaf (the accounts' index) and GPUs, each leaf's nominal and limit, borrowing
    and lending limits, and whether a refused head blocks its queue; None where the tree is not
    flat, jobs have more than one priority, or the kernel's per-round output would pass
    MAX_BYTES."""
    ten = sched.tenancy
    index = ten.accounts.index
    b = Book(ten.tree, None, ten.resources)
    n = len(specs)
    p = sched.profile
    E = fastloop_events.rounds(n, bool(p.round_s), p.event_rounds, len(getattr(p.order, "thresholds", ())))
    if 5 * 8 * E * len(index) > MAX_BYTES:        # (fastloop._call's r_* and w_h)
        return None
    tq, tg = np.empty(n, np.int64), np.empty(n, np.float64)
    prios = set()
    for j, s in enumerate(specs):
        i = index.get(ten.leaf_of(s))
        if i is None:
            return None
        tq[j] = i
        tg[j] = request_of(s, s.tasks, ten.resources)["gpu"]
        if tg[j] != float(sum(t.demand[GPU] for t in s.tasks)):
            return None
        prios.add(s.priority)
    if len(prios) > 1 or b.limit(ROOT, "gpu") < math.inf:
        return None
    leaves = ten.accounts.leaves
    if len(leaves) != len(ten.tree.nodes) or any(b.path(leaf) != [leaf, ROOT] for leaf in leaves):
        return None                            # (inner queues: their balances are not walked here)
    tnom = np.array([b.nominal(leaf, "gpu") for leaf in leaves])
    tcap = np.array([(b.limit(leaf, "gpu"), b.borrowing_limit(leaf, "gpu"), b.lending_limit(leaf, "gpu"))
                     for leaf in leaves], dtype=np.float64)
    if not np.isfinite(tnom).all():
        return None
    trank = np.empty(n, np.int64)              # Kueue's order of heads: (-priority, submit time, id)
    trank[sorted(range(n), key=lambda i: (specs[i].submit_time_s, specs[i].job_id))] = np.arange(n)
    return {"tq": tq, "trank": trank, "tg": tg, "tnom": tnom, "tcap": tcap, "tstrict": bool(ten.strict)}


def write(sched, be, inp: dict, acc: tuple, nrounds: int, nw: int, t_last: float) -> None:
    """The tenancy's state and accounts as the Python loop leaves them, from the kernel's
    per-round (r_*) and per-interval (w_*) output."""
    ten, a = sched.tenancy, sched.tenancy.accounts
    r_t, r_dem, r_nq, r_npl, r_h, r_flag, w_dt, w_h, w_r = acc
    R = nrounds
    r_t, r_dem, r_nq, r_npl, r_h, r_flag = r_t[:R], r_dem[:R], r_nq[:R], r_npl[:R], r_h[:R], r_flag[:R]
    w_dt, w_h, w_r = w_dt[:nw], w_h[:nw], w_r[:nw]
    leaves = a.leaves
    b = Book(ten.tree, None, ten.resources)
    ent = np.array([b.subtree_quota(leaf, "gpu") for leaf in leaves])   # Nominal.compute's
    cap = float(be.cluster.capacity[be.state.up][:, GPU].sum())         # Tenancy._capacity's
    if R:                                    # (set at the first round)
        a.nom, a._nominal_set, a.ent = np.array([b.nominal(leaf, "gpu") for leaf in leaves]), True, ent
    # Accounts.round of each round: the integrand it leaves, the series and the active queues
    ed_r = np.minimum(ent, r_dem)
    if R:
        a.dem, a.ed, a.nq, a.npl = r_dem[-1].copy(), ed_r[-1].copy(), r_nq[-1].copy(), r_npl[-1].copy()
        a.idle_flag, a.capacity = bool(r_flag[-1]), cap
    nxt = a._next_sample
    for r, t in enumerate(r_t.tolist()):
        if t >= nxt:
            nxt = t + a.sample_s
            a.series.extend((t, leaf, float(r_h[r, i]), float(ent[i])) for i, leaf in enumerate(leaves))
    a._next_sample = nxt
    a.active_t = r_t.tolist()
    a.active_n = (r_dem > _EPS).sum(axis=1).tolist()
    # the intervals (Accounts.advance's rows), summed in flush's blocks; the last part kept
    on = w_r >= 0
    at = np.where(on, w_r, 0)
    zero = np.zeros((nw, len(leaves)))
    ed = np.where(on[:, None], ed_r[at] if R else zero, 0.0)
    nq = np.where(on[:, None], r_nq[at] if R else zero, 0.0)
    npl = np.where(on[:, None], r_npl[at] if R else zero, 0.0)
    capr = np.where(on & (r_flag[at] if R else False), cap, -1.0)
    full = nw - nw % BLOCK
    for s in range(0, full, BLOCK):
        e = s + BLOCK
        a.add_block(w_dt[s:e], w_h[s:e], ed[s:e], nq[s:e], npl[s:e], capr[s:e])
    a._rows = [(float(w_dt[i]), w_h[i], ed[i], nq[i], npl[i], float(capr[i])) for i in range(full, nw)]
    # what observe left: nothing held (every job finished), the last advance's time
    ten._last_held = {}
    a.held, a.h, a.t = ten._last_held, np.zeros(len(leaves)), (t_last if t_last >= 0 else None)
    ran = [s for s, state in zip(inp["specs"], inp["state"]) if state != REJECTED]
    ten._held = {**{f"queue:{ten.leaf_of(s)}": 0.0 for s in ran}, **{f"user:{s.user}": 0.0 for s in ran}}
    ten._leaf_use = {ten.leaf_of(s): {"gpu": 0.0} for s in ran}
    ten._changed = False
