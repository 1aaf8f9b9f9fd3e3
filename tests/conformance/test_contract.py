"""The policy contract (dlsched.scheduler.framework), enforced for every registered profile and
component: each component checked on its own, a round idempotent for an unchanged snapshot,
records and snapshots left as they were, no handle on the scheduler, and a profile refused by a
backend that cannot carry out what it needs."""
import ast
import copy
from pathlib import Path

import numpy as np
import pytest

import dlsched.policies  # noqa: F401
from dlsched.cluster import load_cluster
from dlsched.core.errors import DlschedError
from dlsched.core.types import Launch, Resize, Resume, Suspend
from dlsched.scheduler.backend import CAPABILITIES, STATS_KEYS
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.scheduler.events import JobArrival
from dlsched.scheduler.framework import KINDS, REGISTRY, build
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

PROFILES = REGISTRY.names("profile")
POLICIES = Path(dlsched.policies.__file__).parent


def _jobs(n=40, seed=7, horizon=3000.0):
    rng = np.random.default_rng(seed)
    models = ["bert", "resnet50", "vgg16", "ncf"]
    return [job_from_row(dict(job_id=f"j{i}", submit_time_s=float(rng.uniform(0, horizon)),
                              workers=int(rng.choice([1, 2, 4])), model=models[i % 4],
                              batch_size=64, iterations=float(rng.integers(200, 3000))))
            for i in range(n)]


def _plain(v):
    """A component's state as plain data: containers and dataclasses compared by value, anything
    else (a cache of pure functions, a model) by its type only."""
    import dataclasses
    if isinstance(v, (str, int, float, bool, type(None))):
        return v
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted(map(repr, v))
    if dataclasses.is_dataclass(v):
        return (type(v).__name__, {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)})
    if isinstance(v, np.ndarray):
        return v.tolist()
    return type(v).__name__


def _state(comp):
    return {k: _plain(v) for k, v in vars(comp).items()}


def _fingerprint(sched):
    """What a round must not change in the job records (the framework's own fields aside:
    `key`, and `tasks` of unplaced jobs, which it sets from the allocator)."""
    return {j: (r.state, dict(r.placed), frozenset(r.done_tasks), r.first_start_s, r.finish_s, r.preemptions,
                r.migrations, r.attained_gpu_s, r.queued) for j, r in sched.jobs.items()}


class TwiceScheduler(Scheduler):
    """Every round is run twice on the same snapshot (the rng rewound); the plans must match,
    and neither run may touch the records or the snapshot."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.checked = 0
        self.mismatch: list = []

    def round(self, snap):
        before = _fingerprint(self)
        arrays = (snap.free.copy(), snap.up.copy(), snap.gpu_load.copy())
        rng = copy.deepcopy(self.rng.bit_generator.state)
        p1 = super().round(snap)
        assert _fingerprint(self) == before, "a round changed the job records"
        self.rng.bit_generator.state = rng
        p2 = super().round(snap)
        assert _fingerprint(self) == before, "a round changed the job records"
        assert all((a == b).all() for a, b in zip(arrays, (snap.free, snap.up, snap.gpu_load)))
        self.checked += 1
        if p1.decisions != p2.decisions:
            self.mismatch.append((snap.now, p1.decisions, p2.decisions))
        return p2


@pytest.mark.parametrize("name", PROFILES)
def test_same_snapshot_twice_gives_the_same_plan(name):
    sched = TwiceScheduler(build_profile(name), seed=1)
    backend = SimBackend(load_cluster("seed002"), _jobs())
    sched.run(backend)
    assert sched.checked >= 20, "the workload must give the profile rounds to decide"
    assert sched.mismatch == [], f"{len(sched.mismatch)} of {sched.checked} rounds differ, first at t={sched.mismatch[0][0]}"
    assert sched.n_done == len(sched.jobs)


def test_policies_have_no_handle_on_the_scheduler():
    """RoundContext has no `scheduler`: policies read the view and change the transaction."""
    bad = []
    for p in POLICIES.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("scheduler", "_sched", "log"):
                if isinstance(node.value, ast.Name) and node.value.id == "ctx":
                    bad.append(f"{p.name}:{node.lineno} ctx.{node.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
                # hooks and flags are declared (framework.py), never discovered
                if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in (
                        "before_place", "act", "place", "never_fits", "static", "dynamic", "node_local",
                        "first_fit", "observe", "begin_round", "cost", "packed", "stats"):
                    bad.append(f"{p.name}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    assert bad == []


@pytest.mark.parametrize("kind, name", [(k, n) for k in KINDS if k != "profile" for n in REGISTRY.names(k)])
def test_every_component_is_checked_on_its_own(kind, name):
    cl = load_cluster("seed002")
    backend = SimBackend(cl, [])
    sched = Scheduler(build_profile("fifo"), seed=0)
    for j in _jobs(8, horizon=0.0):
        sched.handle(JobArrival(0.0, j), backend)
    snap = backend.snapshot()
    ctx = sched.context(snap)
    ctx.queue = list(sched.queue)
    comp = REGISTRY.get(kind, name) if kind == "tenancy" else build(kind, name)   # (a mode is a spec)
    assert getattr(comp, "needs", frozenset()) <= set(CAPABILITIES), f"{name} needs unknown capabilities"
    if kind == "order":
        comp.begin_round(ctx)
        state = _state(comp)
        comp.begin_round(ctx)
        assert _state(comp) == state, "begin_round() must be idempotent for one round time"
        keys = [comp.key(r, ctx) for r in ctx.queue]
        assert all(isinstance(k, tuple) for k in keys)
        assert [comp.key(r, ctx) for r in ctx.queue[::-1]] == keys[::-1], "key() must be pure"
    elif kind == "allocate":
        out = comp.allocate(ctx.queue, ctx)
        assert isinstance(out, dict) and all(isinstance(v, tuple) for v in out.values())
        assert comp.allocate(ctx.queue, ctx) == out
    elif kind == "filter":
        for r in ctx.queue:
            m = comp.filter(ctx, r.spec, r.tasks[0], ctx.txn.free)
            assert m.ok.shape == (cl.num_nodes,) and m.ok.dtype == bool
            assert isinstance(comp.never_fits(r.spec, cl), str)
    elif kind == "score":
        nodes = np.arange(cl.num_nodes)
        for r in ctx.queue:
            s = np.asarray(comp.score(ctx, r.spec, r.tasks[0], ctx.txn.free, nodes))
            assert s.shape == nodes.shape and (s >= 0).all() and (s <= 1).all()
    elif kind == "place":
        comp.place(ctx)
        plan = ctx.txn.plan
        queued = {r.job_id for r in ctx.queue}
        assert all(isinstance(d, (Launch, Resume, Resize)) and d.job_id in queued for d in plan.decisions)
        if "gpu_sharing" not in comp.needs:
            assert (ctx.txn.free >= -1e-9).all(), "placed beyond the free resources"
        again = sched.context(snap)
        again.queue = list(sched.queue)
        comp.place(again)
        assert again.txn.plan.decisions == plan.decisions, "place() must be idempotent"
    elif kind == "action":
        comp.before_place(ctx)
        comp.act(ctx)
        # nothing runs: an action has nobody to suspend, move, pack or grow
        assert not any(isinstance(d, Suspend) for d in ctx.txn.plan.decisions)
    else:
        _check_tenancy_part(kind, name, comp, sched, ctx)
    assert (snap.free == backend.snapshot().free).all()


def _check_tenancy_part(kind, name, comp, sched, ctx):
    """A tenancy part (dlsched.tenancy.points) on a two-queue tree: pure where its contract says
    so, of the declared type, and a whole mode's walk the same twice on one snapshot."""
    from dlsched.tenancy import tree_from_dict
    from dlsched.tenancy.engine import Tenancy
    tree = tree_from_dict({"queues": [{"name": "a", "quotas": {"gpu": {"nominal": 2}}},
                                      {"name": "b", "quotas": {"gpu": {"nominal": 1}}}]})
    ten = Tenancy(tree, name if kind == "tenancy" else "kueue", None if kind == "tenancy" else {kind: name})
    ten.bind(sched)
    first = [r.job_id for r in ten.admit(list(ctx.queue), ctx)]
    assert [r.job_id for r in ten.admit(list(ctx.queue), ctx)] == first, "the walk must be pure"
    view = ten._view
    usage = {n: dict(u) for n, u in view.book.usage.items()}
    rec = ctx.queue[0]
    req = ten.request(rec)
    if kind == "entitlement":
        out = comp.compute(view)
        assert isinstance(out, dict) and comp.compute(view) == out
        assert isinstance(comp.admits(view, "default", rec, req), str)
    elif kind == "queue_order":
        k = comp.key(view, "default", rec, req)
        assert isinstance(k, tuple) and comp.key(view, "default", rec, req) == k
    elif kind == "victims":
        assert comp.choose(view, rec, "default", req) == []     # nothing runs: nobody to take
    elif kind == "ledger":
        comp.capacity = 8.0
        comp.advance(0.0, {})
        comp.advance(3600.0, {"queue:a": 4.0})
        v = comp.value("queue:a")
        assert v > 0 and comp.value("queue:a") == v and comp.value("queue:b") == 0
        again = build(kind, name)
        again.load(comp.state())
        assert again.value("queue:a") == v
    assert {n: dict(u) for n, u in view.book.usage.items()} == usage, "a part changed the book"


def test_a_backend_without_a_capability_refuses_the_profile_naming_both():
    class NoSharing(SimBackend):
        capabilities = SimBackend.capabilities - {"gpu_sharing"}

    with pytest.raises(DlschedError) as e:
        Scheduler(build_profile("gandiva")).run(NoSharing(load_cluster("seed002"), _jobs(4)))
    msg = str(e.value)
    assert "profile gandiva" in msg and "NoSharing" in msg and "gpu_sharing (needed by gandiva_pack)" in msg
    # the parameters that drop the need (no packing) make the same profile acceptable
    prof = build_profile("gandiva", {"params": {"gandiva_pack": {"enabled": False}}})
    sched = Scheduler(prof)
    sched.run(NoSharing(load_cluster("seed002"), _jobs(4, horizon=10.0)))
    assert sched.n_done == 4


def test_every_profile_declares_what_it_needs_from_the_simulator():
    for name in PROFILES:
        needs = build_profile(name).needs()
        assert set(needs) <= SimBackend.capabilities, name


def test_both_backends_fill_one_stats_vocabulary():
    backend = SimBackend(load_cluster("seed002"), _jobs(3, horizon=0.0))
    prof = build_profile("fifo")
    seen = []

    class Probe(type(prof.order)):
        static = False          # keyed in every round, with the round's view

        def key(self, job, ctx):
            seen.append(ctx.stats(job.job_id))
            return ()
    prof.order = Probe()
    Scheduler(prof).run(backend)
    assert seen and all(set(s) == set(STATS_KEYS) for s in seen)
    st = backend.job_stats("j0")
    assert set(st) == set(STATS_KEYS) and st["progress"] == pytest.approx(1.0) and st["remaining"] == 0


def test_observe_sees_every_applied_plan_and_event():
    from dlsched.policies.order.tiresias import TiresiasOrder
    got = []

    class Watching(TiresiasOrder):
        def observe(self, now, events, applied):
            got.append((now, [type(e).__name__ for e in events], None if applied is None else len(applied)))
            super().observe(now, events, applied)
    prof = build_profile("tiresias")
    prof.order = Watching()
    Scheduler(prof).run(SimBackend(load_cluster("seed002"), _jobs(6)))
    assert any(a for _, _, a in got) and any("JobFinish" in ev for _, ev, _ in got)
    assert [t for t, _, _ in got] == sorted(t for t, _, _ in got)
