"""Gandiva on the whole Philly trace: what was made cheaper decides the same.

- Round state: each component saves its round-mutable attributes itself (a closure, not a
  generic deep copy per attribute). A round run twice on one snapshot (the framework puts the
  saved state back before the second) must leave the same state and make the same plan, and a
  run whose every round is run twice must log what a plain run logs.
- gandiva_place: a job of one worker is placed without `_packed_order` / `_pick_free`
  (`_place_one`), and the loads of Algorithm 1 are taken over the nodes of the job's size alone;
  both are compared here, at every placement of random workloads, with the general path and
  with the pass over every node. With numba, the steps of Algorithm 1 for a job of one worker
  are compiled passes (`_one_step_py`, `_tightest_py`): compared at every `_get_nodes` with the
  numpy path.
"""
import copy

import numpy as np
import pytest

import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.metrics import build_result
from dlsched.policies.actions import gandiva_place
from dlsched.policies.actions.gandiva_grow import GandivaGrow
from dlsched.policies.actions.gandiva_migrate import GandivaMigrate
from dlsched.policies.actions.gandiva_pack import GandivaPack
from dlsched.policies.actions.gandiva_timeslice import GandivaTimeslice
from dlsched.scheduler.context import RoundContext
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

MODELS = ("resnet50", "vgg16", "vae", "superresolution", "lstm", None)


def _cluster(nodes=4, gpus=4, groups=2):
    return cluster_from_dict({"node_groups": [{"count": nodes, "gpus": gpus, "gpus_per_group": groups,
                                               "gpu_type": "V100", "gpu_mem_gb": 32, "cpus": 32,
                                               "mem_gb": 256}]})


def _jobs(seed, n=60, span_s=15_000.0, cpus=(2,)):
    """Bursts (rings form, packs are tried) and lulls (jobs grow, parked jobs migrate)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = float(rng.uniform(0, span_s)) if i % 3 else float(rng.uniform(0, span_s / 10))
        model = MODELS[int(rng.integers(len(MODELS)))]
        row = dict(job_id=f"j{i:03d}", submit_time_s=round(t, 3), workers=int(rng.choice([1, 1, 1, 2, 4])),
                   cpus_per_worker=int(rng.choice(cpus)), mem_gb_per_worker=8)
        if model is not None:
            row.update(model=model, iterations=float(rng.integers(2000, 20000)), batch_size=64 * row["workers"])
        else:
            row["duration_s"] = float(rng.uniform(300, 6000))
        out.append(job_from_row(row))
    return out


PARAMS = {"gandiva_pack": {"max_util": 2.0}, "gandiva_grow": {"min_run_s": 120.0},
          "gandiva_migrate": {"min_run_s": 60.0}}


def _state(sched) -> tuple:
    """Everything the Gandiva components keep as round state, as plain values."""
    out = []
    for c in sched.profile.components():
        if isinstance(c, GandivaTimeslice):
            out.append((sorted((r.rid, r.home, r.shape, tuple(r.members), r.since, r.packed_since, r.pack_verdict)
                               for r in c.rings.values()),
                        sorted(c.ring_of.items()), c._next, sorted(c.costed), c._fingerprint, c._changed))
        elif isinstance(c, GandivaPack):
            out.append((sorted(c.kept), sorted(c.undone), list(c.log), [sorted(d.items()) for d in c.judged],
                        sorted(c.solo.items())))
        elif isinstance(c, GandivaMigrate):
            out.append((c.moves, c.defrags))
        elif isinstance(c, GandivaGrow):
            out.append((sorted(c.grown.items()), c.grows, c.shrinks))
    return tuple(out)


def _plan(plan) -> list:
    return [(type(d).__name__, repr(d)) for d in plan.decisions]


class TwiceScheduler(Scheduler):
    """Runs every round twice on its snapshot: the second starts from the saved round state."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.twice = 0
        self.changed = 0     # rounds that changed the round state (the restore had work to do)

    def round(self, snap):
        before = _state(self)
        first = super().round(snap)
        after = _state(self)
        self.rounds.pop()
        second = super().round(snap)
        assert _plan(second) == _plan(first)
        assert _state(self) == after
        self.twice += 1
        self.changed += after != before
        return second


def _run(cls, cl, jobs, policy="gandiva", params=None):
    sched = cls(build_profile(policy, {"params": params} if params else None), seed=0)
    be = SimBackend(cl, jobs)
    sched.run(be)
    return build_result(sched, be, policy=policy, cluster_name=cl.name, workload_name="w"), sched


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_round_run_twice_restores_its_state(seed):
    cl, jobs = _cluster(), _jobs(seed)
    plain, _ = _run(Scheduler, cl, jobs, params=PARAMS)
    twice, s = _run(TwiceScheduler, cl, jobs, params=PARAMS)
    assert twice.events == plain.events and twice.decisions == plain.decisions
    assert s.twice > 100 and s.changed > 10
    ts = next(c for c in s.profile.components() if isinstance(c, GandivaTimeslice))
    pack = next(c for c in s.profile.components() if isinstance(c, GandivaPack))
    assert ts._next > 0 and pack.log          # rings formed and packs were tried


def test_saved_round_state_is_independent_of_the_live_state():
    """The saved state is a copy: changing the live attributes after saving (and after one
    restore) changes nothing a later restore puts back."""
    ts = GandivaTimeslice()
    from dlsched.policies.actions.gandiva_timeslice import Ring
    ts.rings = {0: Ring(0, (), (1.0,), ["a", "b"], since=5.0)}
    ts.ring_of = {"a": 0, "b": 0}
    ts.costed = {"b"}
    ts._next = 1
    want = copy.deepcopy((ts.rings[0].members, ts.ring_of, ts.costed, ts._next))
    saved = copy.deepcopy(ts._round_state)       # as the framework saves it
    ts.rings[0].members.append("c")
    ts.ring_of["c"] = 0
    ts.costed.add("c")
    ts._next = 2
    ts._round_state = copy.deepcopy(saved)       # as the framework puts it back
    assert (ts.rings[0].members, ts.ring_of, ts.costed, ts._next) == want
    ts.rings[0].members.append("d")
    ts._round_state = copy.deepcopy(saved)       # a second restore: still the saved values
    assert ts.rings[0].members == ["a", "b"]


@pytest.fixture
def checked_place(monkeypatch):
    """At every placement: `_place` (with its one-worker shortcut) against the general path on a
    fork of the round's transaction, and the loads of nodes0 against the pass over all nodes."""
    seen = {"one": 0, "one_placed": 0, "calls": 0, "loads": 0}
    place, one, load = (gandiva_place.GandivaPlace._place, gandiva_place.GandivaPlace._place_one,
                        gandiva_place._NodeView.load)

    def counted_one(self, txn, job_id, task, nodes):
        got = one(self, txn, job_id, task, nodes)
        seen["one"] += got is not None
        seen["one_placed"] += got is True
        return got

    def general(self, ctx, rec, tasks, nodes, over=False):
        monkeypatch.setattr(gandiva_place.GandivaPlace, "_place_one", lambda *a: None)
        try:
            return place(self, ctx, rec, tasks, nodes, over)
        finally:
            monkeypatch.setattr(gandiva_place.GandivaPlace, "_place_one", counted_one)

    def checked(self, ctx, rec, tasks, nodes, over=False):
        fork = ctx.txn.fork()
        ref_ctx = RoundContext(ctx.snap, fork, ctx.now, ctx.jobs, ctx.queue, ctx.rng, ctx._sched, ctx.stats)
        ref = general(self, ref_ctx, rec, tasks, nodes, over)
        got = place(self, ctx, rec, tasks, nodes, over)
        assert got == ref
        assert ctx.txn.reserved(rec.job_id) == fork.reserved(rec.job_id)
        assert (ctx.txn.free == fork.free).all() and (ctx.txn.gpu_load == fork.gpu_load).all()
        seen["calls"] += 1
        return got

    def checked_load(self, nodes):
        got = load(self, nodes)
        gl = np.maximum(self.ctx.txn.gpu_load, 0).sum(axis=1)
        full = np.divide(gl, self.gpus, out=np.zeros(len(self.gpus)), where=self.gpus > 0)
        assert got.tolist() == full[nodes].tolist()
        seen["loads"] += 1
        return got

    monkeypatch.setattr(gandiva_place, "_one_step", lambda: None)   # the numpy path (no numba)
    monkeypatch.setattr(gandiva_place.GandivaPlace, "_place", checked)
    monkeypatch.setattr(gandiva_place.GandivaPlace, "_place_one", counted_one)
    monkeypatch.setattr(gandiva_place._NodeView, "load", checked_load)
    return seen


@pytest.mark.parametrize("seed", [0, 1])
def test_one_worker_placement_equals_the_general_path(checked_place, seed):
    _run(Scheduler, _cluster(groups=0), _jobs(seed, n=80), params=PARAMS)
    # CPU-heavy workers: nodes with free GPUs but not the CPUs
    _run(Scheduler, _cluster(groups=0), _jobs(seed + 20, n=80, cpus=(12, 2)), params=PARAMS)
    _run(Scheduler, _cluster(groups=0), _jobs(seed + 30, n=80, cpus=(14,)), policy="gandiva-reactive")
    _run(Scheduler, _cluster(groups=2), _jobs(seed + 5, n=80), params=PARAMS)
    _run(Scheduler, _cluster(3, groups=0), _jobs(seed + 10, n=80), policy="gandiva-reactive")
    seen = checked_place
    assert seen["calls"] > 100 and seen["loads"] > 100
    assert seen["one"] > 20 and 10 < seen["one_placed"] < seen["one"]   # placed, and found no room


@pytest.fixture
def checked_step(monkeypatch):
    """At every `_get_nodes`: the answer with the compiled first step for one worker against the
    numpy path (`_one_step` answering None), on a fork of the round's transaction."""
    if gandiva_place._one_step() is None:
        pytest.skip("numba is not available: the numpy path is the only one")
    monkeypatch.setattr(gandiva_place, "JIT_AFTER", 0)      # compiled from the first job
    seen = {"calls": 0, "compiled": 0, "placed": 0}
    get_nodes, step = gandiva_place.GandivaPlace._get_nodes, gandiva_place._one_step

    def checked(self, ctx, view, rec, tasks, size):
        fork = ctx.txn.fork()
        ref_ctx = RoundContext(ctx.snap, fork, ctx.now, ctx.jobs, ctx.queue, ctx.rng, ctx._sched, ctx.stats)
        ref_view = gandiva_place._NodeView(ref_ctx, view.aff)
        monkeypatch.setattr(gandiva_place, "_one_step", lambda: None)
        try:
            ref = get_nodes(self, ref_ctx, ref_view, rec, tasks, size)
        finally:
            monkeypatch.setattr(gandiva_place, "_one_step", step)
        got = get_nodes(self, ctx, view, rec, tasks, size)
        assert got == ref
        assert ctx.txn.reserved(rec.job_id) == fork.reserved(rec.job_id)
        assert (ctx.txn.free == fork.free).all() and (ctx.txn.gpu_load == fork.gpu_load).all()
        seen["calls"] += 1
        seen["compiled"] += len(tasks) == 1
        seen["placed"] += bool(got) and len(tasks) == 1
        return got

    monkeypatch.setattr(gandiva_place.GandivaPlace, "_get_nodes", checked)
    return seen


@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_first_step_equals_the_numpy_path(checked_step, seed):
    _run(Scheduler, _cluster(groups=0), _jobs(seed, n=80), params=PARAMS)
    _run(Scheduler, _cluster(groups=2), _jobs(seed + 5, n=80), params=PARAMS)
    _run(Scheduler, _cluster(groups=0), _jobs(seed + 20, n=80, cpus=(12, 2)), params=PARAMS)
    _run(Scheduler, _cluster(3, groups=0), _jobs(seed + 30, n=80, cpus=(14,)), policy="gandiva-reactive")
    # nodes of two sizes (the load is per GPU; GPU slots a node does not have are -1)
    mixed = cluster_from_dict({"node_groups": [
        {"count": 3, "gpus": 2, "gpu_type": "P100", "gpu_mem_gb": 16, "cpus": 16, "mem_gb": 128},
        {"count": 2, "gpus": 8, "gpu_type": "V100", "gpu_mem_gb": 32, "gpus_per_group": 4, "cpus": 64,
         "mem_gb": 512}]})
    _run(Scheduler, mixed, _jobs(seed + 40, n=80, cpus=(2, 6)), params=PARAMS)
    _run(Scheduler, mixed, _jobs(seed + 50, n=80), policy="gandiva-reactive")
    seen = checked_step
    assert seen["calls"] > 200 and seen["compiled"] > 100 and 20 < seen["placed"] < seen["compiled"]
