"""The whole run of a profile compiled: Scheduler.run over SimBackend in one call.

A trace of jobs whose speed does not depend on where they run (no model the speed model knows:
a Philly or Helios trace) is the simulator's most common case: a job arrives, a round places
its tasks, it runs at rate 1 for its duration and frees them. In Python each job costs about
85 us, spread over every layer (heap, poll, the round's transaction and context, the plan, the
backend's apply and re-rate, the records): no layer is more than a third of it. Here the same
loop runs compiled (numba; the profiles it mirrors: `_profile_applies`), and the records both
drivers keep (the event log, rounds, timeline, engine log, finished jobs' stats) are written
from what it returns. `SimBackend.drive` calls it from `Scheduler.run`; a run it does not apply
to, or cannot finish, runs the Python loop as before.

Same results, not approximately but exactly: the same events in the same order (finishes before
arrivals at one time, finishes by the sequence number their re-rate took, arrivals by list
position), the same first fit (`free >= demand - 1e-9` on the demanded resources, the node of
the job's GPU type), the same GPU slots (the least loaded, lowest index first), the same gang,
blocking and partial-hold rules, the same records. It applies only where every number is an
integer (each task's demand and each node's capacity), so that every sum the Python loop makes
in its own order (free resources, held and effective GPUs) is exact in any order; the
GPU-seconds integrals are made at the same events with the same operations.
tests/unit/test_fastloop.py compares the two drivers' records and results on random workloads
and clusters (gang or not, blocking or not, GPU types, rejected jobs, equal times).

One thing differs: each round's wall time (the rounds run inside one call and share its time).

Off with DLSCHED_JIT=0, where numba does not import, and for runs of fewer than MIN_JOBS jobs.
"""
from __future__ import annotations

import math
import os
import time as _time

import numpy as np

from dlsched.core.types import GPU, NRES
from dlsched.sim import fastloop_drf as _fdrf
from dlsched.sim import fastloop_place as _fpl
from dlsched.sim import (fastloop_events, fastloop_gandiva, fastloop_liquid, fastloop_optimus, fastloop_preempt,
                         fastloop_tenancy)
from dlsched.sim.fastloop_kernel import (ARRIVE, DONE, FINISH, LAUNCH, PARTIAL, PENDING, RATE,  # noqa: F401
                                         REJECTED, ROUND, RUNNING, _loop_py)

#: runs of fewer jobs stay in Python: it takes about as long as numba's import and the kernel's
#: load (0.4 s) to run this many, and a short run should not pay for either
MIN_JOBS = 5000
_EPS = 1e-9
_INT_LIMIT = 2.0 ** 40      # integers below this add exactly in doubles in any order

_kernel = None
_missing = False


def available() -> bool:
    """numba imported and the kernel wrapped (compiled at its first call, cached on disk)."""
    global _kernel, _missing
    if os.environ.get("DLSCHED_JIT", "1") == "0":
        return False
    if _kernel is None and not _missing:
        try:
            import numba
        except ImportError:
            _missing = True
            return False
        from dlsched.scheduler import fastplace
        from dlsched.sim import fastloop_drf, fastloop_place, fastloop_quota
        if not fastplace._available():       # (what the kernel calls is compiled first)
            _missing = True
            return False
        fastloop_quota.compile()
        fastloop_drf.compile()
        fastloop_place.compile()
        fastloop_events.compile()
        fastloop_preempt.compile()
        fastloop_liquid.compile()
        fastloop_optimus.compile()
        fastloop_gandiva.compile()
        _kernel = numba.njit(cache=True, nogil=True)(_loop_py)
    return _kernel is not None


# -- the driver -----------------------------------------------------------------------------------
def run(sched, backend, progress=None) -> bool:
    """Run `sched` over `backend` (a fresh SimBackend) in the compiled loop, and leave both as
    Scheduler.run would: their logs, rounds, timeline, job records and finished jobs' stats.
    False where it does not apply (nothing is changed then: the caller runs the Python loop)."""
    if len(backend._jobs) < MIN_JOBS or not available():
        return False
    inp = _inputs(sched, backend)
    if inp is None:
        return False
    armed = fastloop_liquid.begin(sched, backend.cluster, inp["specs"], inp["toff"]) if len(inp["lqb"]) else None
    try:
        out = _call(inp)
    except BaseException:
        fastloop_liquid.end(sched, armed, None)
        raise
    (op, op_t, op_j, op_a, op_b, pl_task, pl_node, pl_goff, gbuf, tl_f, tl_n, jf, ji, *acc,
     (nop, npl, ng, ntl, now, eff_gpu_s, effective, eff_t, nrounds, left, nw, t_last, skipped), wall) = out
    fastloop_liquid.end(sched, armed, None if left else op_t[:nop][op[:nop] == ROUND])
    if left:
        return False        # jobs left waiting (a non-gang profile that does not block): Python's
    _write(sched, backend, inp, wall, op[:nop], op_t[:nop], op_j[:nop], op_a[:nop], op_b[:nop],
           pl_task[:npl], pl_node[:npl], pl_goff[:npl], gbuf[:ng], tl_f[:ntl], tl_n[:ntl], jf, ji, nrounds)
    if sched.tenancy is not None:
        inp["state"] = ji[:, 0]
        fastloop_tenancy.write(sched, backend, inp, acc, nrounds, nw, float(t_last))
    sched.rounds_skipped += int(skipped)
    be = backend
    be._now = float(now)
    be._eff_gpu_s, be._effective, be._eff_t = float(eff_gpu_s), float(effective), float(eff_t)
    be.heap._heap.clear()          # the first arrival, pushed at construction
    be._arr_next = len(inp["work"])
    if progress is not None:
        progress(be._now, sched.n_done)
    return True


def _call(inp: dict) -> tuple:
    """The kernel over `inp` (from _inputs): its output arrays, its counts, and its seconds."""
    n = len(inp["work"])
    T = len(inp["tdem"])
    G = int(inp["tgpu"].sum())
    E = fastloop_events.rounds(n, inp["round_s"] > 0, inp["evr"], len(inp["tthr"]))     # rounds, samples
    m = 3 * n + T + E + 6              # records: an arrival, a finish, a rate each, a launch per task, rounds
    L = len(inp["tnom"])
    R = E if L else 0                  # rounds and the accounts' intervals: at most one per event time
    outs = (np.zeros(m, np.int8), np.zeros(m, np.float64), np.zeros(m, np.int64), np.zeros(m, np.int64),
            np.zeros(m, np.int64),                                   # per job, and a launch per task
            np.zeros(T, np.int64), np.zeros(T, np.int64), np.zeros(T, np.int64), np.zeros(max(G, 1), np.int64),
            np.zeros((E, 4), np.float64), np.zeros((E, 2), np.int64),      # a sample per event time
            np.zeros((n, 6), np.float64), np.zeros((n, 2), np.int64),
            np.zeros(R), np.zeros((R, L)), np.zeros((R, L)), np.zeros((R, L)), np.zeros((R, L)),
            np.zeros(R, np.bool_), np.zeros(R), np.zeros((R, L)), np.zeros(R, np.int64))
    t0 = _time.perf_counter()
    counts = _kernel(
        inp["arr_order"], inp["arr_t"], inp["keyrank"], inp["idrank"], inp["rejected"], inp["work"],
        inp["ntask"], inp["toff"], inp["tdem"], inp["tgpu"], inp["dem"], inp["thr_n"], inp["thr_dim"],
        inp["thr_val"], inp["want"], inp["node_type"], inp["node_gpus"], inp["free"], inp["gload"],
        inp["gang"], inp["blocking"], *(inp[k] for k in _SCORED), *(inp[k] for k in fastloop_tenancy.NONE), *outs)
    return (*outs, counts, _time.perf_counter() - t0)


def warm() -> float:
    """Compile the kernel, or load it from numba's cache, with a one-job run; its seconds (0.0
    where numba does not import). The first run after an install compiles it (about 4 s)."""
    t0 = _time.perf_counter()
    if not available():
        return 0.0
    i1, f1 = np.zeros(1, np.int64), np.zeros(1, np.float64)
    one = np.ones(1, np.int64)
    inp = {"arr_order": i1, "arr_t": f1, "keyrank": i1, "idrank": i1, "rejected": np.zeros(1, np.bool_),
           "work": np.ones(1), "ntask": one, "toff": np.array([0, 1], np.int64), "tdem": i1, "tgpu": one,
           "dem": np.ones((1, NRES)), "thr_n": one, "thr_dim": np.zeros((1, NRES), np.int64),
           "thr_val": np.full((1, NRES), 1 - _EPS), "want": np.full(1, -1, np.int64), "node_type": i1,
           "node_gpus": one, "free": np.ones((1, NRES)), "gload": np.zeros((1, 1), np.int64),
           "gang": False, "blocking": True, **_placement(None, None), **fastloop_gandiva.NONE,
           "round_s": 0.0, "quiet": False, "acts": False, "pgate": False, **fastloop_liquid.NONE,
           "evr": True, "tthr": np.zeros(0), "opt": False,
           **fastloop_tenancy.NONE}
    _call(inp)
    return _time.perf_counter() - t0


def _profile_applies(sched) -> bool:
    """The profile is the FIFO family's: an order whose keys are fixed at arrival (fifo, edf,
    sjf, tetris's: _static_key), the fits filter and scorers scheduler/fastplace compiles (first
    fit, tetris, resource allocation), Gandiva's reactive placer (fastloop_gandiva), alone or
    with the gandiva profile's actions and periodic round, the requested allocation, nothing
    else; rounds on events (and that periodic round); a scheduler that has not run."""
    from dlsched.policies.allocate.requested import RequestedAllocate
    p = sched.profile
    ten = getattr(sched, "tenancy", None)
    if ten is not None and not fastloop_tenancy.applies(sched):
        return False           # quotas the walk here does not mirror: the Python loop's
    acts = fastloop_gandiva.actions(p) or (p.actions if fastloop_preempt.applies(p) else ())   # (deciding nothing)
    opt = fastloop_optimus.applies(p)         # (its allocation and placement)
    mine = {id(c) for c in (ten, p.order, fastloop_gandiva.placer(p), *acts, p.allocator if opt else None)}
    own = ([c for c in sched._observers if id(c) not in mine], [c for c in sched._wakers if id(c) not in mine],
           [c for c in sched._stateful if id(c) not in mine])
    liquid = fastloop_liquid.applies(p)       # (its scorer; its batch's genetic algorithm: Python's)
    return (_static_key(p.order) is not None and (_placer(p)[0] is not None or liquid) and (not p.actions or bool(acts))
            and (not p.placers or fastloop_gandiva.placer(p) is not None or liquid or opt)
            and (type(p.allocator) is RequestedAllocate or liquid or opt) and (p.event_rounds or p.round_s)
            and (not p.round_s or sched._can_be_quiet)
            and not own[0] and not own[1] and not own[2] and sched.sink is None
            and not sched.jobs and not len(sched.log) and not len(sched.rounds) and not len(sched.timeline)
            and not sched.queue and not sched.running and sched._next_tick is None)


def _static_key(order):
    """Each job's key (before the framework's submit time and id) as a function of its spec, for
    an order whose key is fixed from its arrival and read from the spec alone (sjf: its total work
    from the duration, the kernel taking no job of known model or iterations); None for others."""
    from types import SimpleNamespace

    from dlsched.policies.order.drf import DrfOrder
    from dlsched.policies.order.edf import EdfOrder
    from dlsched.policies.order.fifo import FifoOrder
    from dlsched.policies.order.remaining_work import RemainingWorkOrder
    from dlsched.policies.order.sjf import SjfOrder
    from dlsched.policies.order.srtf import SrtfOrder
    from dlsched.policies.order.tiresias import TiresiasOrder
    t = type(order)
    if t is DrfOrder:                   # (its keys change: fastloop_drf; FIFO among equal shares)
        return lambda s: ()
    if t is FifoOrder or t is EdfOrder or t is RemainingWorkOrder:     # (the last: a DL job's work is its spec's)
        return lambda s: order.key(SimpleNamespace(spec=s), None)
    if t is TiresiasOrder and order.starve_factor <= 0 and not order.running_first:
        return lambda s: (0,)           # (a job that never ran is in the first queue: FIFO there)
    if t is SjfOrder or t is SrtfOrder:     # (SRTF's: remaining = total work, as nothing is preempted)
        return lambda s: order.scaled(SimpleNamespace(spec=s), order.work.estimate(s, None))
    return None


_SCORED = ("kinds", "weights", "ra_w", "ra_most", "ra_res", "inv", "tmask", "gused", "coloc", "dyn", "juser", "capv",
           *fastloop_gandiva.NONE, "round_s", "quiet", "acts",
           "pgate", *fastloop_liquid.NONE, "evr", "tthr", "opt")


def _thresholds_of(order) -> np.ndarray:
    """Tiresias's thresholds of attained GPU-seconds (its quiet time's), none for other orders."""
    from dlsched.policies.order.tiresias import TiresiasOrder
    return np.array(order.thresholds, np.float64) if type(order) is TiresiasOrder else np.zeros(0)


def _placer(profile) -> tuple:
    """scheduler/fastplace's placer for the profile's fits filter and scorers, and whether it
    has the colocate filter after the fits filter (with gang: fastloop_place); (None, False)
    where the kernel does not place as the profile does."""
    from types import SimpleNamespace

    from dlsched.policies.place.colocate import ColocateFilter
    from dlsched.scheduler.fastplace import FastPlacer
    if profile is None:
        return None, False
    f = profile.filters
    coloc = len(f) == 2 and type(f[1]) is ColocateFilter and bool(profile.gang)
    fast = FastPlacer.for_profile(SimpleNamespace(filters=f[:1], scorers=profile.scorers) if coloc else profile)
    return fast, coloc


def _placement(profile, cl, specs=()) -> dict:
    """The kernel's inputs for a scored profile's placement (scheduler/fastplace's: its scorers,
    the cluster's inverse capacities, and per GPU type asked for (none, each type, one not in the
    cluster) the nodes of that type); none for first fit alone, which the kernel does itself."""
    from dlsched.scheduler import fastplace as fp
    fast, coloc = _placer(profile)
    if fast is None or (list(fast.kinds) == [fp.FIRST_FIT] and not coloc):
        return {**_fdrf.inputs(profile, specs, cl), "coloc": False, "kinds": np.zeros(0, np.int64), "weights": np.zeros(0),
                "ra_w": fp._NO_W, "ra_most": fp._NO_MOST, "ra_res": fp._NO_RES, "inv": np.zeros((1, NRES)),
                "tmask": np.zeros((1, 1), np.bool_), "gused": fp._NO_USED}
    ra_w, ra_most, ra_res = fast._setup(cl)[3]
    tmask = _fpl.type_rows(cl)
    return {**_fdrf.inputs(profile, specs, cl), "coloc": coloc, "kinds": fast.kinds, "weights": fast.weights, "ra_w": ra_w,
            "ra_most": ra_most, "ra_res": ra_res, "inv": np.ascontiguousarray(cl.inv_capacity, dtype=np.float64),
            "tmask": tmask, "gused": fp._NO_USED}


def _backend_applies(be) -> bool:
    """A SimBackend that has not run, with no node events, phases, start delay or containment,
    every node up and free, and every capacity an integer."""
    from dlsched.sim.backend import SimBackend
    if (type(be) is not SimBackend or be._now != 0.0 or be.runs or be.prescheduling or be.start_delay_s != 0
            or not be.compact_done or len(be.heap) != 1 or be._arr_next != 1 or len(be.log)):
        return False
    st, cap = be.state, be.cluster.capacity
    return (bool(st.up.all()) and st.free.shape == cap.shape and bool((st.free == cap).all())
            and int(st.gpu_load.max(initial=0)) == 0 and _integers(cap))


def _integers(a) -> bool:
    a = np.asarray(a, dtype=np.float64)
    return bool(np.all(np.isfinite(a)) and np.all(a == np.floor(a)) and np.all(np.abs(a) < _INT_LIMIT))


def _inputs(sched, be) -> dict | None:
    """The kernel's arrays, or None where the run is not one it applies to (see the module)."""
    if not _profile_applies(sched) or not _backend_applies(be):
        return None
    from dlsched.policies.place.fits import _thresholds
    specs = be._jobs
    n = len(specs)
    cl = be.cluster
    types = list(cl.gpu_types)
    model_of = be.speed.params.knows
    models: dict = {}
    shapes: dict = {}            # id(tasks) -> (tasks, demand ids, GPUs per task)
    demands: dict = {}           # demand tuple -> id
    work = np.empty(n, np.float64)
    want = np.empty(n, np.int64)
    ntask = np.empty(n, np.int64)
    rejected = np.zeros(n, np.bool_)
    reasons: dict[int, str] = {}
    tdem: list[int] = []
    tgpu: list[int] = []
    never = sched.never_fits
    ten = sched.tenancy
    for j, s in enumerate(specs):
        if (s.kind != "dl" or s.iterations is not None or s.save_s != 0 or s.gpu_types is not None
                or not (s.launch_s == 0 or (s.launch_s is None and s.data_gb is None))):
            return None
        if s.model is not None:
            known = models.get(s.model)
            if known is None:
                known = models[s.model] = model_of(s.model)
            if known:
                return None            # its speed depends on its placement
        d = s.duration_s or 0.0
        if not math.isfinite(d):
            return None
        work[j] = d
        want[j] = -1 if s.gpu_type is None else (types.index(s.gpu_type) if s.gpu_type in types else -2)
        tasks = s.tasks
        sh = shapes.get(id(tasks))
        if sh is None or sh[0] is not tasks:
            sh = _shape(tasks, demands)
            if sh is None:
                return None
            shapes[id(tasks)] = sh
        ntask[j] = len(tasks)
        tdem.extend(sh[1])
        tgpu.extend(sh[2])
        why = never(s, be) or (ten is not None and ten.never_fits(s))
        if why:
            rejected[j] = True
            reasons[j] = why
    ids = [s.job_id for s in specs]
    if len(set(ids)) != n:
        return None
    idrank = np.empty(n, np.int64)
    idrank[sorted(range(n), key=ids.__getitem__)] = np.arange(n)
    keyrank = np.empty(n, np.int64)
    key = _static_key(sched.profile.order)
    keyrank[sorted(range(n), key=lambda i: (*key(specs[i]), specs[i].submit_time_s, ids[i]))] = np.arange(n)
    U = len(demands)
    dem = np.zeros((max(U, 1), NRES), np.float64)
    thr_n = np.zeros(max(U, 1), np.int64)
    thr_dim = np.zeros((max(U, 1), NRES), np.int64)
    thr_val = np.zeros((max(U, 1), NRES), np.float64)
    for demand, u in demands.items():
        dem[u] = demand
        th = _thresholds(demand)
        thr_n[u] = len(th)
        for x, (r, v) in enumerate(th):
            thr_dim[u, x], thr_val[u, x] = r, v
    toff = np.zeros(n + 1, np.int64)
    np.cumsum(ntask, out=toff[1:])
    quotas = fastloop_tenancy.inputs(sched, specs) if ten is not None else fastloop_tenancy.NONE
    gandiva = fastloop_gandiva.inputs(sched.profile, cl, specs)
    liquid = fastloop_liquid.inputs(sched.profile, cl, specs)
    if quotas is None or gandiva is None or liquid is None or fastloop_optimus.rigid(sched.profile, specs) is False:
        return None
    st = be.state
    p = sched.profile
    return {"specs": specs, "ids": ids, "reasons": reasons, "work": work, "arr_order": np.asarray(be._arr_order, np.int64),
            "arr_t": np.asarray(be._arr_times, np.float64), "keyrank": keyrank, "idrank": idrank, "rejected": rejected,
            "ntask": ntask, "toff": toff, "tdem": np.asarray(tdem, np.int64), "tgpu": np.asarray(tgpu, np.int64),
            "dem": dem, "thr_n": thr_n, "thr_dim": thr_dim, "thr_val": thr_val, "want": want,
            "node_type": np.array(cl.node_gpu_type, np.int64),     # (a copy: the cluster's is read-only)
            "node_gpus": np.array([nd.gpus for nd in cl.nodes], np.int64),
            "free": np.array(st.free, dtype=np.float64, order="C"), "gload": np.array(st.gpu_load, dtype=np.int64),
            "gang": bool(p.gang), "blocking": bool(p.blocking), **_placement(p, cl, specs),
            **gandiva, "round_s": float(p.round_s or 0.0), "quiet": bool(sched._can_be_quiet),
            "acts": bool(sched._acts_on_running), "pgate": bool(fastloop_preempt.applies(p) and p.actions[0].enabled), **liquid,
            "evr": bool(p.event_rounds), "tthr": _thresholds_of(p.order), "opt": fastloop_optimus.applies(p),
            **quotas}


def _shape(tasks, demands: dict):
    """(tasks, each task's demand id, each task's GPU count) where every task's demand is made
    of integers (GPUs whole) and its index is its position; None otherwise."""
    if not tasks:
        return None
    ds, gs = [], []
    for i, t in enumerate(tasks):
        d = t.demand
        if t.index != i or len(d) != NRES:
            return None
        u = demands.get(d)
        if u is None:
            if not _integers(d) or min(d) < 0:
                return None
            u = demands[d] = len(demands)
        ds.append(u)
        gs.append(int(d[GPU]))
    return tasks, ds, gs


def _write(sched, be, inp, wall, op, op_t, op_j, op_a, op_b, pl_task, pl_node, pl_goff, gbuf, tl_f, tl_n, jf, ji,
           nrounds) -> None:
    """The records and state the Python loop leaves, from the kernel's output."""
    from dlsched.core.types import TaskPlacement
    from dlsched.scheduler.context import JobRecord, JobState
    from dlsched.scheduler.eventlog import StatsBlock
    from dlsched.sim.run import DoneRow, JobRun
    specs, ids, reasons = inp["specs"], inp["ids"], inp["reasons"]
    record = be.record_rates
    each = wall / nrounds if nrounds else 0.0
    # each launch's placements, the one tuple both logs keep (as Scheduler and SimBackend share it)
    tgpu = inp["tgpu"].tolist()
    pt, pn, pg, gb = pl_task.tolist(), pl_node.tolist(), pl_goff.tolist(), gbuf.tolist()
    launch = op == LAUNCH
    placements = [tuple([TaskPlacement(pt[p], pn[p], tuple(gb[pg[p]:pg[p] + tgpu[base + pt[p]]]))
                         for p in range(a, a + b)])
                  for base, a, b in zip(inp["toff"][op_j[launch]].tolist(), op_a[launch].tolist(), op_b[launch].tolist())]
    id_of = _objects(ids)
    # the engine's log: a finish is [a rate of 0,] its finish; an arrival; a launch its take; a
    # rate change [a rate of 1]; a round nothing (SimBackend._handle, _take, _set_rate)
    ekinds = ["finish", "arrival", "take", "rate"]
    n_e = np.select([op == FINISH, op == ROUND, op == RATE], [1 + record, 0, int(record)], 1)
    at = np.repeat(np.arange(len(op)), n_e)
    o = op[at]
    first = np.ones(len(at), dtype=bool)
    first[1:] = at[1:] != at[:-1]
    which = np.select([o == FINISH, o == ARRIVE, o == LAUNCH], [0, 1, 2], 3).astype(np.uint8)
    rate0 = (o == FINISH) & first & bool(record)
    which[rate0] = 3
    details = np.full(len(at), "", dtype=object)
    details[rate0] = "0"
    details[o == RATE] = "1"
    det_take = _objects(placements)
    details[o == LAUNCH] = det_take
    be.log.extend_coded(op_t[at], which, ekinds, id_of[op_j[at]].tolist(), details.tolist())
    # the scheduler's log: a finish; an arrival [and its rejection]; a round; a launch
    # (Scheduler.handle, _on_arrival, commit_round, _after_apply)
    rej = np.zeros(len(op), dtype=bool)
    arr = op == ARRIVE
    rej[arr] = inp["rejected"][op_j[arr]]
    n_s = np.where(op == RATE, 0, 1 + rej)
    at = np.repeat(np.arange(len(op)), n_s)
    o = op[at]
    first = np.ones(len(at), dtype=bool)
    first[1:] = at[1:] != at[:-1]
    which = np.select([o == FINISH, o == ARRIVE, o == ROUND], [0, 1, 3], 4).astype(np.uint8)
    which[(o == ARRIVE) & ~first] = 2
    xs = np.full(len(at), None, dtype=object)
    jobs_at = op_j[at]
    is_arr = which == 1
    xs[is_arr] = _objects(specs)[jobs_at[is_arr]]
    is_rej = which == 2
    xs[is_rej] = _objects([reasons[j] for j in jobs_at[is_rej].tolist()])
    is_round = which == 3
    queued = op_a[op == ROUND]
    xs[is_round] = _objects([(each, q) for q in queued.tolist()])
    xs[which == 4] = det_take
    jids = id_of[jobs_at]
    jids[is_round] = ""
    sched.log.extend_shaped(op_t[at], which, ["finish", "arrival", "rejected", "round", "launch"],
                            ["plain", "spec", "detail", "stats", "placed"], jids.tolist(), xs.tolist())
    sched.rounds.extend_columns(op_t[op == ROUND], np.full(len(queued), each), queued)
    sched.timeline.extend_columns(tl_f, tl_n)
    arrived = list(zip(op_j[arr].tolist(), op_t[arr].tolist()))
    # finished jobs' stats, a row each in the order they finished (SimBackend._drop_done)
    fl, il = jf.tolist(), ji.tolist()
    ended = np.flatnonzero(ji[:, 0] == DONE)
    rows = ended[np.argsort(ji[ended, 1])].tolist()
    if rows:
        block = be._done_stats = StatsBlock(_STATS_KEYS)
        varying = {"remaining": jf[rows, 2].tolist(), "gpu_s": jf[rows, 3].tolist(),
                   "first_progress_s": jf[rows, 4].tolist()}
        first = dict(_STATS_DONE)
        first.update({k: v[0] for k, v in varying.items()})
        block.add(first)
        for c, key in enumerate(_STATS_KEYS):
            vals = varying.get(key)
            block.cols[c].extend(vals[1:] if vals is not None else [first[key]] * (len(rows) - 1))
        block.n = len(rows)
    # the job records, in arrival order (as Scheduler.jobs and SimBackend.runs hold them)
    jobs, runs = sched.jobs, be.runs
    done = JobState.DONE
    for j, t in arrived:
        s = specs[j]
        rec = JobRecord(s, s.tasks)
        if il[j][0] == REJECTED:
            rec.state, rec.reject_reason = JobState.REJECTED, reasons[j]
            runs[s.job_id] = JobRun(s, s.tasks, float(inp["work"][j]), last_t=t, k=j)
        else:
            first_start, fin, _, _, _, attained = fl[j]
            rec.state, rec.first_start_s, rec.finish_s, rec.attained_gpu_s = done, first_start, fin, attained
            runs[s.job_id] = DoneRow(s, il[j][1])
        jobs[s.job_id] = rec
    sched.n_done = len(arrived)


def _objects(seq) -> np.ndarray:
    """A numpy array of the objects of `seq`, each an element (tuples too)."""
    return np.fromiter(seq, dtype=object, count=len(seq))


# A finished job's job_stats (SimBackend._stats_of of a job without a model or iterations that ran
# to its end, never stopped): these values, but for its remaining work, GPU-seconds and first progress.
_STATS_DONE = {"step": None, "remaining": 0.0, "rate": 0.0, "progress": 1.0, "loss": None, "gpu_s": 0.0,
               "first_progress_s": 0.0, "suspends": 0, "resumes": 0, "switch_lost_s": 0.0,
               "switch_lost_gpu_s": 0.0, "nic_bytes": 0.0, "cross_rack_bytes": 0.0}
_STATS_KEYS = tuple(_STATS_DONE)
