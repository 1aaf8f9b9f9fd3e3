"""The compiled run of the FIFO family under Kueue quotas (sim/fastloop_tenancy.py) leaves
exactly what the Python loop with its Tenancy leaves: every record test_fastloop compares, and
the tenancy's summary (per queue waits, quota and placement waits, GPU-hours, entitlement,
fairness), its series and each job's finish-time fairness. On random clusters, workloads and
isolated queue trees (queues a job never fits, queues of no quota, jobs without a queue), for
every profile of the family; and trees or jobs where a job could borrow or be preempted run in
Python."""
from dataclasses import replace

import numpy as np
import pytest

from dlsched.metrics.result import build_result
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim import fastloop
from dlsched.sim.backend import SimBackend
from dlsched.tenancy.engine import Tenancy
from dlsched.tenancy.tree import tree_from_dict
from test_fastloop import PROFILES, assert_same, random_cluster, random_jobs

pytestmark = pytest.mark.skipif(not fastloop.available(), reason="numba does not import")


@pytest.fixture(autouse=True)
def small_runs_too(monkeypatch):
    monkeypatch.setattr(fastloop, "MIN_JOBS", 0)


def random_tree(rng, borrowing=0):
    queues = []
    for i in range(int(rng.integers(1, 5))):
        gpu = {"nominal": int(rng.choice([0, 2, 4, 8, 16, 32] if i else [4, 8]))}    # q0 makes jobs wait
        if borrowing is not None:
            gpu["borrowing_limit"] = borrowing
        queues.append({"name": f"q{i}", "quotas": {"gpu": gpu}})
    return tree_from_dict({"queues": queues})


def with_queues(rng, jobs, tree, none=False):
    names = [*sorted(tree.leaves)] + ([None] if none else [])
    return [replace(j, queue=names[int(rng.integers(0, len(names)))]) for j in jobs]


def run(profile, cl, jobs, tree, compiled: bool, record: bool):
    backend = SimBackend(cl, jobs, record_rates=record)
    backend.compiled_loop = compiled
    sched = Scheduler(build_profile(profile[0], profile[1]), seed=0, tenancy=Tenancy(tree, "kueue"))
    sched.run(backend)
    return sched, backend


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p[0] + ("+" if p[1] else ""))
@pytest.mark.parametrize("seed", range(5))
def test_compiled_run_under_quotas_leaves_what_the_python_loop_leaves(profile, seed):
    """Isolated queues (seeds 0-2), then a cohort that borrows (3: up to 4 GPUs; 4: any, and
    jobs without a queue, which run on what the others lend). Where a refused head could
    reclaim, the compiled run stops and the Python loop runs it (both give the same then too)."""
    rng = np.random.default_rng(100 + seed)
    cl = random_cluster(rng)
    tree = random_tree(rng, borrowing=[0, 0, 0, 4, None][seed])
    jobs = with_queues(rng, random_jobs(rng, int(rng.integers(50, 400))), tree, none=seed == 4)
    record = bool(seed % 2)
    ref = run(profile, cl, jobs, tree, compiled=False, record=record)
    got = run(profile, cl, jobs, tree, compiled=True, record=record)
    assert not ref[1].compiled_run
    done = all(ref[0].jobs[j].state.value in ("done", "rejected") for j in ref[0].jobs)
    assert got[1].compiled_run == done or (seed >= 3 and not got[1].compiled_run)
    assert_same(ref, got)
    res0, res1 = (build_result(s, b, policy="p", cluster_name="c", workload_name="w") for s, b in (ref, got))
    assert res1.queue_series.equals(res0.queue_series)
    assert res0.summary["queues"] and (seed >= 3 or any(q["quota_wait_s"] > 0 for q in res0.summary["queues"].values()))


def test_a_cohort_that_borrows_runs_compiled_where_nothing_is_reclaimed():
    """Queue a borrows b's idle nominal, then waits over quota while b runs; nobody reclaims:
    the compiled run, with the same records and the borrowed and lent GPU-hours."""
    from dlsched.cluster import cluster_from_dict
    from dlsched.workload.schema import job_from_row
    cl = cluster_from_dict({"name": "two", "node_groups": [{"count": 2, "gpus": 8, "gpu_type": "V100", "cpus": 32,
                                                            "mem_gb": 256, "gpu_mem_gb": 16}]})
    tree = tree_from_dict({"queues": [{"name": "a", "quotas": {"gpu": {"nominal": 8}}},
                                      {"name": "b", "quotas": {"gpu": {"nominal": 8}}}]})
    rows = [("a", 0, 4, 100), ("a", 0, 4, 100), ("a", 0, 4, 100), ("b", 50, 4, 300), ("a", 60, 8, 50),
            ("a", 60, 8, 50), ("b", 150, 4, 10)]
    jobs = [job_from_row(dict(job_id=f"j{i}", submit_time_s=float(t), duration_s=float(d), workers=1,
                              gpus_per_worker=float(g), cpus_per_worker=1.0, mem_gb_per_worker=1.0, queue=q))
            for i, (q, t, g, d) in enumerate(rows)]
    for profile in (("fifo", None), ("fifo-backfill", None), ("drf", None)):
        ref = run(profile, cl, jobs, tree, compiled=False, record=False)
        got = run(profile, cl, jobs, tree, compiled=True, record=False)
        assert got[1].compiled_run
        assert_same(ref, got)
        q = build_result(*got, policy="p", cluster_name="c", workload_name="w").summary["queues"]
        assert q["a"]["borrowed_gpu_hours"] > 0 and q["b"]["lent_gpu_hours"] > 0 and q["a"]["quota_wait_s"] > 0


@pytest.mark.parametrize("change", ["reclaim", "priorities", "mode", "memory"])
def test_quotas_it_does_not_mirror_run_in_python(change, monkeypatch):
    rng = np.random.default_rng(3)
    cl = random_cluster(rng)
    tree = random_tree(rng, borrowing=None if change == "reclaim" else 0)
    jobs = with_queues(rng, random_jobs(rng, 80), tree)
    if change == "priorities":
        jobs = [replace(j, priority=i % 2) for i, j in enumerate(jobs)]
    if change == "memory":
        from dlsched.sim import fastloop_tenancy
        monkeypatch.setattr(fastloop_tenancy, "MAX_BYTES", 1000)
    backend = SimBackend(cl, jobs)
    sched = Scheduler(build_profile("fifo"), seed=0,
                      tenancy=Tenancy(tree, "kueue-fair" if change == "mode" else "kueue"))
    sched.run(backend)
    assert not backend.compiled_run
    assert sched.n_done > 0 and len(sched.rounds) > 0          # the Python loop ran it
