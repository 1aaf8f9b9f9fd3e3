"""Compiled per-task placement for the common profiles: the fits filter and node-local scorers
(tetris, resource_allocation) over a large cluster.

`Scheduler.place` places a job's tasks one at a time: filter every node, score the candidates,
take the best (ties to the lowest node), reserve. With node-local scorers only the node a task
went to changes before the job's next identical task (see `Scheduler.choose_node`), so the loop
is one scan per run of identical tasks and one re-score per task. In numpy each of those is a
dozen calls on arrays of one element or of every node, about 130 us per task; a round of 100,000
tasks on 5,000 nodes took 8 s. Here the same loop is compiled (numba): the scan is one pass over
the nodes' rows, the re-score a few flops.

Same results as the numpy path, not approximately but exactly: the same filter test
(free >= demand - 1e-9 on the demanded resources, the node up and of the job's GPU type), the
same scores in the same order of operations (IEEE double, no fast-math, so no reassociation or
fused multiply-add), the same rounding of the weighted sum to 12 decimals, the same tie-break.
tests/unit/test_fastplace.py compares the two paths' placements on random clusters and queues.

Used only where it pays (`MIN_NODES`), where numba imports, and where `DLSCHED_JIT` is not "0".
The kernel is compiled at its first use and cached on disk by numba (`cache=True`); the first
compile takes about 2 s.
"""
from __future__ import annotations

import os

import numpy as np

from dlsched.core.types import GPU, NRES

MIN_NODES = 256            # below this the numpy path is as fast and nothing needs compiling
_EPS = 1e-9                # the fits filter's tolerance (policies/place/fits.py)
TETRIS, RESOURCE_ALLOCATION, FIRST_FIT = 0, 1, 2
CHUNK = 64                 # nodes scored at a time by a first-fit scan (it stops at the first fits)
#: tasks a first-fit profile places through numpy before the compiled loop takes over (the same
#: answers): importing numba and loading the kernel costs about 0.5 s, worth it only for long runs
FIRST_FIT_AFTER = 5000
#: and only on clusters this large: on the Philly trace's 552 nodes the numpy filter is about as
#: fast, and numba's import (0.3 s, 120 MB) is not won back
FIRST_FIT_MIN_NODES = 1000
_ROUND = 6755399441055744.0   # 1.5 * 2^52: (x + _ROUND) - _ROUND rounds x half to even, for |x| < 2^51

_kernel = None
_missing = False


def _available() -> bool:
    """numba imported and the kernel wrapped (compiled at its first call); False where numba
    cannot be imported (the numpy path then runs)."""
    global _kernel, _missing
    if _kernel is None and not _missing:
        try:
            import numba
        except ImportError:
            _missing = True
            return False
        global _score, _take_gpus
        _score = numba.njit(cache=True, nogil=True)(_score)
        _take_gpus = numba.njit(cache=True, nogil=True)(_take_gpus)
        _kernel = numba.njit(cache=True, nogil=True)(_place_py)
    return _kernel is not None


def _score(scores, lo, hi, free, ok0, inv, d, floor, kinds, weights, ra_w, ra_most, ra_res):
    """Nodes lo..hi-1's combined scores for demand d into `scores`, -inf where the task does not
    fit (the fits filter), as Scheduler._combined and the scorers compute them, operation for
    operation. One pass per step (fit, each scorer, rounding), each a tight loop over the range:
    three times faster than one pass that branches on the scorer per node."""
    for n in range(lo, hi):
        fits = ok0[n]
        for r in range(NRES):
            fits &= free[n, r] >= floor[r]
        scores[n] = 0.0 if fits else -np.inf
    for s in range(kinds.shape[0]):
        w = weights[s]
        if kinds[s] == FIRST_FIT:             # every fitting node scores 1
            for n in range(lo, hi):
                if scores[n] != -np.inf:
                    scores[n] += w * 1.0
        elif kinds[s] == TETRIS:
            for n in range(lo, hi):
                if scores[n] == -np.inf:
                    continue
                dot = 0.0
                dd = 0.0
                ff = 0.0
                for r in range(NRES):
                    ir = inv[n, r]
                    f = max(free[n, r], 0.0) * ir
                    ff += f * f
                    if d[r] > 0:
                        x = d[r] * ir
                        dd += x * x
                        dot += x * f
                den = np.sqrt(dd * ff)
                if den > 0:
                    c = min(max(dot / den, 0.0), 1.0)
                else:
                    c = 0.0 if dot == 0 else 1.0     # numpy: 0/0 is nan -> 0; x/0 is inf -> 1
                scores[n] += w * c
        else:
            for n in range(lo, hi):
                if scores[n] == -np.inf:
                    continue
                v = 0.0
                for j in range(ra_res.shape[0]):
                    r = ra_res[j]
                    a = min(max((free[n, r] - d[r]) * inv[n, r], 0.0), 1.0)
                    v += ra_w[n, r] * ((1.0 - a) if ra_most[r] else a)
                scores[n] += w * v
    # np.round(total, 12) is rint(total * 1e12) / 1e12; rint by the 1.5 * 2^52 trick (exact for
    # |x| < 2^51, which the weights' sum bounds: see FastPlacer.for_profile)
    for n in range(lo, hi):
        scores[n] = ((scores[n] * 1e12 + _ROUND) - _ROUND) / 1e12


def _place_py(free, ok0, inv, demands, kinds, weights, ra_w, ra_most, ra_res,
              gpu_load, gpu_used, has_used, node_gpus, out, out_gpus):
    """Place demands[0..k) one at a time; write each task's node into out and its GPU slots into
    out_gpus; return how many were placed (the first that fits nowhere stops). As
    Transaction.reserve does, task by task: `free` (nodes x resources) is reduced by the demand,
    the least-loaded GPU slots are taken (lowest slot first among equals) and their load (and
    held fraction, with has_used) raised.

    A run of identical demands scans every node once. Placing a task changes only its node, so
    within the run the best node is either one the run already used (re-scored after each
    placement) or the best of the scan's untouched nodes: the scan keeps its top L (L = the
    run's length), best first, ties to the lower node, and each step takes at most one."""
    n_nodes, n_res = free.shape
    k = demands.shape[0]
    first_only = kinds.shape[0] == 1 and kinds[0] == FIRST_FIT
    scores = np.empty(n_nodes)
    taken = np.zeros(gpu_load.shape[1], dtype=np.bool_)
    i = 0
    while i < k:
        d = demands[i]
        run = 1                                   # tasks i .. i + run - 1 ask for the same
        while i + run < k:
            same = True
            for r in range(n_res):
                if demands[i + run, r] != d[r]:
                    same = False
                    break
            if not same:
                break
            run += 1
        floor = np.empty(n_res)       # the fits filter: free >= demand - eps where demanded
        for r in range(n_res):
            floor[r] = d[r] - _EPS if d[r] > 0 else -np.inf
        # the scan: the top `run` nodes, best first (a later node enters only when strictly better)
        top_s = np.full(run, -np.inf)
        top_n = np.full(run, -1, dtype=np.int64)
        if first_only:
            # every fitting node scores the same: the top are the first `run` that fit, in node
            # order; the scan stops there, scoring CHUNK nodes at a time
            cnt = 0
            lo = 0
            while lo < n_nodes and cnt < run:
                hi = min(lo + CHUNK, n_nodes)
                _score(scores, lo, hi, free, ok0, inv, d, floor, kinds, weights, ra_w, ra_most, ra_res)
                for n in range(lo, hi):
                    if scores[n] > -np.inf:
                        top_s[cnt] = scores[n]
                        top_n[cnt] = n
                        cnt += 1
                        if cnt == run:
                            break
                lo = hi
        else:
            _score(scores, 0, n_nodes, free, ok0, inv, d, floor, kinds, weights, ra_w, ra_most, ra_res)
            for n in range(n_nodes):
                sc = scores[n]
                if sc > top_s[run - 1]:
                    p = run - 1
                    while p > 0 and top_s[p - 1] < sc:
                        top_s[p] = top_s[p - 1]
                        top_n[p] = top_n[p - 1]
                        p -= 1
                    top_s[p] = sc
                    top_n[p] = n
        used_n = np.empty(run, dtype=np.int64)     # nodes this run placed on, with their scores now
        used_s = np.empty(run)
        n_used = 0
        nxt = 0                                    # the next untouched node from the scan
        for t in range(run):
            best = -1
            top = -np.inf
            slot = -1
            for u in range(n_used):
                if used_s[u] > top or (used_s[u] == top and used_n[u] < best):
                    top = used_s[u]
                    best = used_n[u]
                    slot = u
            if nxt < run and top_n[nxt] >= 0 and (top_s[nxt] > top or (top_s[nxt] == top and top_n[nxt] < best)):
                best = top_n[nxt]
                slot = -1
                nxt += 1
            if best < 0:
                return i + t
            out[i + t] = best
            for r in range(n_res):
                free[best, r] -= d[r]
            _take_gpus(best, d[GPU], gpu_load, gpu_used, has_used, node_gpus, taken, out_gpus[i + t])
            if slot < 0:
                slot = n_used
                used_n[slot] = best
                n_used += 1
            _score(scores, best, best + 1, free, ok0, inv, d, floor, kinds, weights, ra_w, ra_most, ra_res)
            used_s[slot] = scores[best]
        i += run
    return k


def _take_gpus(node, gpus, gpu_load, gpu_used, has_used, node_gpus, taken, ids):
    """Transaction.pick_gpus and _use for a whole number of GPUs: the ceil(gpus) least-loaded
    slots, in order of (load, slot); ids gets them, -1 after."""
    ids[:] = -1
    if not gpus > 0:
        return
    want = int(np.ceil(gpus - _EPS))
    n = node_gpus[node]
    taken[:n] = False
    for q in range(want):
        pick = -1
        for g in range(n):
            if not taken[g] and (pick < 0 or gpu_load[node, g] < gpu_load[node, pick]):
                pick = g
        taken[pick] = True
        ids[q] = pick
    for q in range(want):
        gpu_load[node, ids[q]] += 1
        if has_used:
            gpu_used[node, ids[q]] += gpus / want


class FastPlacer:
    """The compiled loop for one profile's filters and scorers, or None from `for_profile` where
    the profile has others (their semantics are not compiled)."""

    def __init__(self, kinds: list[int], weights: list[float], ra=None):
        self.kinds = np.array(kinds, dtype=np.int64)
        self.weights = np.array(weights, dtype=np.float64)
        self.ra = ra                      # the resource_allocation scorer, if any
        self._cl = None                   # per cluster: see _setup
        # first fit alone: the numpy path places the first FIRST_FIT_AFTER tasks
        self._first_only = kinds == [FIRST_FIT]
        self._wait = FIRST_FIT_AFTER if self._first_only else 0
        self._k: dict[tuple, int] = {}    # GPU slots per demand

    @classmethod
    def for_profile(cls, profile) -> "FastPlacer | None":
        from dlsched.policies.place.first_fit import FirstFitScorer
        from dlsched.policies.place.fits import FitsFilter
        from dlsched.policies.place.resource_allocation import ResourceAllocationScorer
        from dlsched.policies.place.tetris import TetrisScorer
        if os.environ.get("DLSCHED_JIT", "1") == "0":
            return None
        if [type(f) for f in profile.filters] != [FitsFilter] or not profile.scorers:
            return None
        kinds, weights, ra = [], [], None
        for sc, w in profile.scorers:
            if type(sc) is TetrisScorer:
                kinds.append(TETRIS)
            elif type(sc) is FirstFitScorer:
                kinds.append(FIRST_FIT)
            elif type(sc) is ResourceAllocationScorer and ra is None:
                kinds.append(RESOURCE_ALLOCATION)
                ra = sc
            else:
                return None
            weights.append(float(w))
        if sum(abs(w) for w in weights) * 1e12 >= 2.0 ** 50:   # the rounding trick's range
            return None
        return cls(kinds, weights, ra)

    def _setup(self, cl):
        """Per cluster: whether it is large enough to pay, GPUs per node, the scorer's weights."""
        if self._cl is None or self._cl[0] is not cl:
            least = FIRST_FIT_MIN_NODES if self._first_only else MIN_NODES
            big = len(cl.nodes) >= least and _available()
            ra = (self.ra._node_weights(cl), self.ra.most, np.flatnonzero(self.ra.weights)) if self.ra else \
                (_NO_W, _NO_MOST, _NO_RES)
            self._cl = (cl, big, np.array([n.gpus for n in cl.nodes], dtype=np.int64), ra)
        return self._cl

    def _slots(self, demand) -> int:
        """GPU slots a task of this demand takes (ceil of its GPUs); -1 for a fraction of one."""
        k = self._k.get(demand)
        if k is None:
            g = demand[GPU]
            k = 0 if g <= 0 else -1 if g < 1 - _EPS else int(np.ceil(g - _EPS))
            if len(self._k) > 65536:
                self._k.clear()
            self._k[demand] = k
        return k

    def place(self, ctx, job_id: str, job, tasks) -> int | None:
        """Place the tasks in order, as many as fit before the first that does not, and record
        them in the transaction (Transaction.record); how many were placed. None, with nothing
        done, where this path does not apply: a small cluster (the numpy path is as fast and
        nothing needs compiling), or a fraction of a GPU with per-GPU use tracked (fractions go
        to the fullest GPU they fit on, which the compiled fit test does not see)."""
        if self._wait > 0:
            self._wait -= len(tasks)
            return None
        snap, txn = ctx.snap, ctx.txn
        cl = snap.cluster
        _, big, node_gpus, (ra_w, ra_most, ra_res) = self._setup(cl)
        if not big:
            return None
        slots = [self._slots(t.demand) for t in tasks]
        used = txn.gpu_used
        if used is not None and -1 in slots:
            return None
        ok0 = snap.up
        mask = cl.type_mask(job)
        if mask is not None:
            ok0 = ok0 & mask
        k = len(tasks)
        out = np.empty(k, dtype=np.int64)
        out_gpus = np.empty((k, txn.gpu_load.shape[1]), dtype=np.int64)
        m = _kernel(txn.free, ok0, cl.inv_capacity, np.array([t.demand for t in tasks], dtype=np.float64),
                    self.kinds, self.weights, ra_w, ra_most, ra_res, txn.gpu_load,
                    _NO_USED if used is None else used, used is not None, node_gpus, out, out_gpus)
        rows = out_gpus.tolist()
        txn.record(job_id, tasks[:m], out[:m].tolist(),
                   [tuple(rows[i][:max(slots[i], 1)]) if slots[i] else () for i in range(m)])
        return m


_NO_W = np.zeros((2, 2), order="F")   # F-contiguous only, as the real weights: one compiled signature
_NO_MOST = np.zeros(1, dtype=np.bool_)
_NO_RES = np.zeros(0, dtype=np.int64)
_NO_USED = np.zeros((2, 2))
