"""Gandiva's reactive placement in the compiled run (sim/fastloop_gandiva.py) leaves exactly what
the Python loop with GandivaPlace leaves: every record test_fastloop compares, untenanted and
under Kueue quotas. On random clusters (GPU types, nodes without GPUs) and workloads of alike
tasks (one to six workers of one, two or four GPUs, GPU-type constraints, jobs that never fit,
equal times), with over-subscription off (the compiled run then finishes) and on (where a GPU
would be shared, the run goes back to Python: the same records still); and workloads it does not
place as GandivaPlace does (parameter servers, unlike tasks, GPU affinity groups) run in Python."""
from dataclasses import replace

import numpy as np
import pytest

from dlsched.cluster import cluster_from_dict
from dlsched.metrics.result import build_result
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim import fastloop
from dlsched.sim.backend import SimBackend
from dlsched.tenancy.engine import Tenancy
from dlsched.tenancy.tree import tree_from_dict
from dlsched.workload.schema import job_from_row
from test_fastloop import assert_same, random_cluster
from test_fastloop_tenancy import random_tree, with_queues

pytestmark = pytest.mark.skipif(not fastloop.available(), reason="numba does not import")

NO_OVER = {"params": {"gandiva_place": {"oversubscribe": False}}}


@pytest.fixture(autouse=True)
def small_runs_too(monkeypatch):
    monkeypatch.setattr(fastloop, "MIN_JOBS", 0)


def small_cluster(rng):
    """test_fastloop's random cluster, of a few nodes per group (so that jobs wait)."""
    groups = [{"count": int(rng.integers(1, 4)), "gpus": int(rng.choice([0, 2, 4, 8] if g else [2, 4, 8])),
               "gpu_type": str(rng.choice(["V100", "K80"])), "gpu_mem_gb": 16, "cpus": int(rng.choice([16, 32])),
               "mem_gb": int(rng.choice([64, 256])), "nodes_per_rack": 2} for g in range(int(rng.integers(1, 4)))]
    return cluster_from_dict({"name": "rand", "node_groups": groups})


def roomy_cluster():
    return cluster_from_dict({"name": "roomy", "node_groups": [
        {"count": 4, "gpus": 8, "gpu_type": "V100", "cpus": 64, "mem_gb": 512, "gpu_mem_gb": 16},
        {"count": 2, "gpus": 4, "gpu_type": "K80", "cpus": 32, "mem_gb": 256, "gpu_mem_gb": 12}]})


def light_jobs(rng, n=120):
    """A light load for roomy_cluster: at most a few jobs of a few GPUs at once, each up to
    1,500 s (many 60 s rounds)."""
    jobs, t = [], 0.0
    for j in range(n):
        t += float(rng.choice([0.0, 60.0, 120.0, rng.uniform(100, 900)]))
        jobs.append(job_from_row(dict(job_id=f"r{j:03d}", submit_time_s=t, duration_s=float(rng.uniform(0, 1500)),
                                      workers=int(rng.choice([1, 1, 2])), gpus_per_worker=float(rng.choice([1, 2])),
                                      cpus_per_worker=4.0, mem_gb_per_worker=16.0)))
    return jobs


def two_queues():
    """Two isolated queues of 14 GPUs in all (roomy_cluster has 40): jobs wait on their quota."""
    return tree_from_dict({"queues": [{"name": "a", "quotas": {"gpu": {"nominal": 6, "borrowing_limit": 0}}},
                                      {"name": "b", "quotas": {"gpu": {"nominal": 8, "borrowing_limit": 0}}}]})


def alike_jobs(rng, n):
    """Jobs of alike workers with whole GPUs (a Philly trace's shape)."""
    jobs, t = [], 0
    for j in range(n):
        t += int(rng.choice([0, 0, 1, 5, 30]))
        row = dict(job_id=f"g{int(rng.integers(0, 10**6)):06d}-{j}", submit_time_s=float(t),
                   duration_s=float(rng.choice([0.0, 10.0, 60.0, rng.uniform(1, 900), rng.uniform(1, 5000)])),
                   workers=int(rng.choice([1, 1, 1, 2, 3, 4, 6])), cpus_per_worker=float(rng.integers(1, 9)),
                   mem_gb_per_worker=float(rng.integers(2, 16)), gpus_per_worker=float(rng.choice([1, 1, 2, 4])))
        if rng.random() < 0.15:
            row["gpu_type"] = str(rng.choice(["V100", "K80", "A100"]))     # A100: no such node
        if rng.random() < 0.03:
            row["workers"] = 400                                           # larger than the cluster
        jobs.append(job_from_row(row))
    return jobs


def run(profile, cl, jobs, compiled: bool, record: bool, tree=None, name="gandiva-reactive"):
    backend = SimBackend(cl, jobs, record_rates=record)
    backend.compiled_loop = compiled
    sched = Scheduler(build_profile(name, profile), seed=0,
                      tenancy=Tenancy(tree, "kueue") if tree is not None else None)
    sched.run(backend)
    return sched, backend


@pytest.mark.parametrize("over", [False, True], ids=["exclusive", "oversubscribe"])
@pytest.mark.parametrize("seed", range(6))
def test_compiled_gandiva_leaves_what_the_python_loop_leaves(over, seed):
    """Seeds 0-2 untenanted, 3-5 under isolated Kueue queues."""
    rng = np.random.default_rng(300 + seed)
    cl = small_cluster(rng)
    jobs = alike_jobs(rng, int(rng.integers(50, 400)))
    tree = None
    if seed >= 3:
        tree = random_tree(rng, borrowing=0)
        jobs = with_queues(rng, jobs, tree)
    profile = None if over else NO_OVER
    record = bool(seed % 2)
    ref = run(profile, cl, jobs, False, record, tree)
    got = run(profile, cl, jobs, True, record, tree)
    assert not ref[1].compiled_run
    done = all(r.state.value in ("done", "rejected") for r in ref[0].jobs.values())
    assert got[1].compiled_run == done if not over else done or not got[1].compiled_run
    assert max(n for *_, n in ref[0].timeline) > 1, "nothing queued: the test would not exercise the round"
    assert_same(ref, got)


@pytest.mark.parametrize("seed", range(4))
def test_compiled_gandiva_with_its_actions_and_ticks_leaves_what_the_python_loop_leaves(seed):
    """The `gandiva` profile: its actions decide nothing while every job it admits starts at once
    (jobs wait on their queue's quota, seeds 2-3, not on GPUs), and its periodic round (60 s)
    runs after a round that started something and is skipped as quiet otherwise: the compiled
    run, with the same rounds, skips and records. Jobs run up to 5,000 s: many ticks each."""
    rng = np.random.default_rng(500 + seed)
    cl, jobs = roomy_cluster(), light_jobs(rng)
    tree = None
    if seed >= 2:
        tree = two_queues()
        jobs = with_queues(rng, jobs, tree)
    record = bool(seed % 2)
    ref = run(None, cl, jobs, False, record, tree, "gandiva")
    got = run(None, cl, jobs, True, record, tree, "gandiva")
    assert got[1].compiled_run and not ref[1].compiled_run
    assert_same(ref, got)
    assert got[0].rounds_skipped == ref[0].rounds_skipped > 0
    ticks = {t for t, kind, *_ in ref[0].log if kind == "round"} - {t for t, *_ in ref[1].log}
    assert ticks, "no round at a tick alone: the test would not exercise the ticks"
    if tree is not None:
        assert any(q["quota_wait_s"] > 0 for q in build_result(*ref, policy="p", cluster_name="c",
                                                               workload_name="w").summary["queues"].values())


@pytest.mark.parametrize("seed", range(3))
def test_gandiva_where_its_actions_would_act_runs_in_python(seed):
    """On a small cluster jobs wait for GPUs: time slicing or defragmentation would act, so the
    compiled run stops and the Python loop runs it (the same records)."""
    rng = np.random.default_rng(600 + seed)
    cl = small_cluster(rng)
    jobs = alike_jobs(rng, 200)
    ref = run(None, cl, jobs, False, False, None, "gandiva")
    got = run(None, cl, jobs, True, False, None, "gandiva")
    assert not got[1].compiled_run
    assert any(kind in ("suspend", "migrate") for _, kind, *_ in ref[0].log)
    assert_same(ref, got)


def test_a_shared_gpu_sends_the_run_back_to_python():
    """Two one-node jobs of one size fill a node; a third of that size can only time-share:
    GandivaPlace over-subscribes (rates change), so the compiled run stops and Python runs it."""
    cl = cluster_from_dict({"name": "one", "node_groups": [{"count": 1, "gpus": 4, "gpu_type": "V100",
                                                            "cpus": 32, "mem_gb": 256, "gpu_mem_gb": 16}]})
    jobs = [job_from_row(dict(job_id=f"j{i}", submit_time_s=float(i), duration_s=100.0, workers=1,
                              gpus_per_worker=2.0, cpus_per_worker=1.0, mem_gb_per_worker=1.0)) for i in range(3)]
    ref = run(None, cl, jobs, False, False)
    got = run(None, cl, jobs, True, False)
    assert not got[1].compiled_run
    assert ref[0].jobs["j2"].first_start_s == 2.0          # it shared the GPUs at once
    assert_same(ref, got)
    exclusive = run(NO_OVER, cl, jobs, True, False)
    assert exclusive[1].compiled_run and exclusive[0].jobs["j2"].first_start_s == 100.0


@pytest.mark.parametrize("change", ["parameter server", "unlike tasks", "affinity groups", "no GPU"])
def test_jobs_it_does_not_place_as_gandiva_does_run_in_python(change):
    rng = np.random.default_rng(5)
    cl = random_cluster(rng)
    jobs = alike_jobs(rng, 60)
    j0 = jobs[0]
    if change == "parameter server":
        jobs[0] = job_from_row(dict(job_id="ps", submit_time_s=0.0, duration_s=10.0, workers=2, gpus_per_worker=1.0,
                                    cpus_per_worker=1.0, mem_gb_per_worker=1.0, comm="ps", ps=1, ps_cpus=1.0))
    elif change == "unlike tasks":
        t = j0.tasks[0]
        jobs[0] = replace(j0, tasks=(t, replace(t, index=1, demand=(2.0, *t.demand[1:]))))
    elif change == "no GPU":
        t = j0.tasks[0]
        jobs[0] = replace(j0, tasks=(replace(t, demand=(0.0, *t.demand[1:])),))
    else:
        cl = cluster_from_dict({"name": "grouped", "node_groups": [
            {"count": 4, "gpus": 8, "gpu_type": "V100", "cpus": 64, "mem_gb": 512, "gpu_mem_gb": 16,
             "gpus_per_group": 4}]})
    got = run(NO_OVER, cl, jobs, True, False)
    assert not got[1].compiled_run
    assert got[0].n_done > 0 and len(got[0].rounds) > 0        # the Python loop ran it
