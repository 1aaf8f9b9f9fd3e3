"""Every registered component and profile passes the same checks (ARCHITECTURE.md habit 5):
builds with defaults, leaves the snapshot untouched, same input -> same plan, scores in [0, 1],
handles an empty queue and an empty cluster."""
import numpy as np
import pytest

import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict, load_cluster
from dlsched.scheduler.core import RoundContext, Scheduler, build_profile
from dlsched.scheduler.events import JobArrival
from dlsched.scheduler.framework import REGISTRY, NodeMask, build
from dlsched.scheduler.transaction import Transaction
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

PROFILES = REGISTRY.names("profile")
COMPONENTS = [(k, n) for k in ("order", "allocate", "filter", "score", "action") for n in REGISTRY.names(k)]


def _jobs():
    rows = [dict(job_id="a", submit_time_s=0, workers=2, model="resnet50", batch_size=64, iterations=100),
            dict(job_id="b", submit_time_s=1, workers=4, model="bert", batch_size=48, iterations=50),
            dict(job_id="c", submit_time_s=2, workers=1, ps=1, comm="ps", model="alexnet", iterations=10),
            dict(job_id="d", submit_time_s=3, kind="tasks", workers=3, cpus_per_worker=4, duration_s=30),
            dict(job_id="e", submit_time_s=4, workers=8, duration_s=100)]
    return [job_from_row(r) for r in rows]


def _round(profile_name, cluster, jobs):
    sched = Scheduler(build_profile(profile_name), seed=1)
    backend = SimBackend(cluster, [])
    for j in jobs:
        sched.handle(JobArrival(j.submit_time_s, j), backend)
    snap = backend.snapshot()
    before = (snap.free.copy(), snap.up.copy(), snap.gpu_load.copy())
    plan = sched.round(snap)
    assert (snap.free == before[0]).all() and (snap.up == before[1]).all() and (snap.gpu_load == before[2]).all()
    return plan


def _ctx(cluster):
    backend = SimBackend(cluster, [])
    snap = backend.snapshot()
    sched = Scheduler(build_profile("fifo"))
    return RoundContext(snap, Transaction(snap), 0.0, {}, [], np.random.default_rng(0), sched)


@pytest.mark.parametrize("kind, name", COMPONENTS)
def test_component_builds_with_defaults_and_has_a_doc(kind, name):
    obj = build(kind, name)
    assert obj.name == name
    assert REGISTRY.entry(kind, name).doc, f"{kind} {name} needs a one-line docstring"


@pytest.mark.parametrize("name", REGISTRY.names("score"))
def test_scores_in_range(name):
    cl = load_cluster("seed002")
    ctx = _ctx(cl)
    scorer = build("score", name)
    for job in _jobs():
        for task in job.tasks:
            nodes = np.arange(cl.num_nodes)
            s = np.asarray(scorer.score(ctx, job, task, ctx.txn.free, nodes))
            assert s.shape == nodes.shape and (s >= 0).all() and (s <= 1).all()


@pytest.mark.parametrize("name", REGISTRY.names("filter"))
def test_filters_return_node_masks(name):
    cl = load_cluster("seed002")
    ctx = _ctx(cl)
    f = build("filter", name)
    free = ctx.txn.free.copy()
    for job in _jobs():
        m = f.filter(ctx, job, job.tasks[0], ctx.txn.free)
        assert isinstance(m, NodeMask) and m.ok.dtype == bool and m.ok.shape == (cl.num_nodes,)
    assert (ctx.txn.free == free).all()


@pytest.mark.parametrize("name", PROFILES)
def test_profile_builds_is_deterministic_and_pure(name):
    cl = load_cluster("seed002")
    p1 = _round(name, cl, _jobs())
    p2 = _round(name, cl, _jobs())
    assert p1.decisions == p2.decisions
    assert len(p1) > 0, "a profile must place something on an idle cluster"


@pytest.mark.parametrize("name", PROFILES)
def test_profile_handles_empty_queue_and_empty_cluster(name):
    cl = load_cluster("seed002")
    assert len(_round(name, cl, [])) == 0
    tiny = cluster_from_dict({"node_groups": [{"count": 1, "gpus": 0, "cpus": 1, "mem_gb": 1}]})
    plan = _round(name, tiny, _jobs())   # GPU jobs are rejected, tasks jobs too big: nothing placed
    assert len(plan) == 0


@pytest.mark.parametrize("name", PROFILES)
def test_profile_runs_a_whole_simulation(name):
    """Every job ends: finished, or rejected at arrival because this policy can never run it
    (co-location of the 8-GPU job on 4-GPU servers)."""
    import dlsched
    r = dlsched.simulate("seed002", _jobs(), name)
    assert r.summary["finished"] + r.summary["rejected"] == 5 and r.summary["finished"] >= 4
