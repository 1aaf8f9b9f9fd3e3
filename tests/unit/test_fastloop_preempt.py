"""SRTF (the `srtf` profile: a size order, first fit, the `preempt` action, a 60 s periodic
round) in the compiled run (sim/fastloop_preempt.py) leaves exactly what the Python loop
leaves, where preempt's gate never opens (every admitted job's GPUs are free when it is
admitted: a light load, or jobs that wait on their queue's quota): every record
test_fastloop compares, the rounds skipped as quiet, and the tenancy's series. Where the gate
opens (jobs wait for GPUs), the run goes back to Python; so does a minimum run time."""
import numpy as np
import pytest

from dlsched.metrics.result import build_result
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim import fastloop
from dlsched.sim.backend import SimBackend
from dlsched.tenancy.engine import Tenancy
from test_fastloop import assert_same, small_case
from test_fastloop_gandiva import light_jobs, roomy_cluster, two_queues
from test_fastloop_tenancy import with_queues

pytestmark = pytest.mark.skipif(not fastloop.available(), reason="numba does not import")


@pytest.fixture(autouse=True)
def small_runs_too(monkeypatch):
    monkeypatch.setattr(fastloop, "MIN_JOBS", 0)


def run(cl, jobs, compiled: bool, record: bool = False, tree=None, over=None, name="srtf"):
    backend = SimBackend(cl, jobs, record_rates=record)
    backend.compiled_loop = compiled
    sched = Scheduler(build_profile(name, over), seed=0, tenancy=Tenancy(tree, "kueue") if tree else None)
    sched.run(backend)
    return sched, backend


@pytest.mark.parametrize("seed", range(6))
def test_compiled_srtf_leaves_what_the_python_loop_leaves(seed):
    """Seeds 0-2 untenanted, 3-5 under two isolated queues (jobs wait on quota, shortest first)."""
    rng = np.random.default_rng(700 + seed)
    cl, jobs, tree = roomy_cluster(), light_jobs(rng), None
    if seed >= 3:
        tree = two_queues()
        jobs = with_queues(rng, jobs, tree)
    ref = run(cl, jobs, False, bool(seed % 2), tree)
    got = run(cl, jobs, True, bool(seed % 2), tree)
    assert got[1].compiled_run and not ref[1].compiled_run
    assert_same(ref, got)
    assert got[0].rounds_skipped == ref[0].rounds_skipped > 0
    if tree is not None:
        r0, r1 = (build_result(s, b, policy="p", cluster_name="c", workload_name="w") for s, b in (ref, got))
        assert r1.queue_series.equals(r0.queue_series)
        assert any(q["quota_wait_s"] > 0 for q in r0.summary["queues"].values())
        waited = [r for r in ref[0].jobs.values() if r.first_start_s is not None and r.first_start_s > r.spec.submit_time_s]
        assert waited, "nobody waited: the test would not exercise the order"


def test_where_preempt_would_walk_the_run_goes_back_to_python():
    """Jobs wait for GPUs: preempt's gate opens, so the Python loop runs it. A short job that
    arrives while a long one holds every GPU suspends it; a random contended case too."""
    from dlsched.cluster import cluster_from_dict
    from dlsched.workload.schema import job_from_row
    one = cluster_from_dict({"name": "one", "node_groups": [{"count": 1, "gpus": 4, "gpu_type": "V100", "cpus": 32,
                                                            "mem_gb": 256, "gpu_mem_gb": 16}]})
    pair = [job_from_row(dict(job_id=i, submit_time_s=t, duration_s=d, workers=1, gpus_per_worker=4.0,
                              cpus_per_worker=1.0, mem_gb_per_worker=1.0)) for i, t, d in (("a", 0.0, 1000.0),
                                                                                          ("b", 5.0, 10.0))]
    for cl, jobs in ((one, pair), small_case()):
        ref = run(cl, jobs, False)
        got = run(cl, jobs, True)
        assert not got[1].compiled_run
        assert_same(ref, got)
    ref = run(one, pair, False)
    assert [kind for _, kind, j, *_ in ref[0].log if j == "a"][-4:] == ["launch", "suspend", "resume", "finish"]


def test_a_minimum_run_time_runs_in_python():
    """preempt's min_run_s makes its quiet time finite (rounds at ticks that are not quiet)."""
    rng = np.random.default_rng(9)
    cl, jobs = roomy_cluster(), light_jobs(rng)
    got = run(cl, jobs, True, over={"params": {"preempt": {"min_run_s": 300.0}}})
    assert not got[1].compiled_run and got[0].n_done == len(jobs)


def run_tiresias(cl, jobs, compiled: bool, record: bool = False, tree=None, over=None):
    return run(cl, jobs, compiled, record, tree, over, "tiresias")


@pytest.mark.parametrize("thresholds", [None, [600.0, 3000.0]], ids=["pollux", "low"])
@pytest.mark.parametrize("seed", range(4))
def test_compiled_tiresias_leaves_what_the_python_loop_leaves(seed, thresholds):
    """Tiresias: rounds only at multiples of 60 s (a job waits for the next), most-free
    placement, and a quiet time that ends where a running job's attained service crosses a
    threshold (low thresholds: many crossings, two queues). Seeds 2-3 under two queues."""
    rng = np.random.default_rng(900 + seed)
    cl, jobs, tree = roomy_cluster(), light_jobs(rng), None
    if seed >= 2:
        tree = two_queues()
        jobs = with_queues(rng, jobs, tree)
    over = None if thresholds is None else {"params": {"tiresias": {"thresholds": thresholds}}}
    ref = run_tiresias(cl, jobs, False, bool(seed % 2), tree, over)
    got = run_tiresias(cl, jobs, True, bool(seed % 2), tree, over)
    assert got[1].compiled_run and not ref[1].compiled_run
    assert_same(ref, got)
    assert got[0].rounds_skipped == ref[0].rounds_skipped > 0
    starts = [r.first_start_s for r in ref[0].jobs.values() if r.first_start_s is not None]
    assert all(t % 60 == 0 for t in starts)           # rounds only at the ticks
    if thresholds is not None:
        crossed = [r for r in ref[0].jobs.values() if r.attained_gpu_s > 600.0]
        assert crossed, "nobody crossed a threshold: the test would not exercise the quiet time"


def run_optimus(cl, jobs, compiled: bool, record: bool = False, tree=None):
    return run(cl, jobs, compiled, record, tree, None, "optimus")


@pytest.mark.parametrize("seed", range(4))
def test_compiled_optimus_leaves_what_the_python_loop_leaves(seed):
    """Optimus on rigid jobs: every 60 s its allocation grants the waiting jobs that fit in
    arrival order, and its placer starts them fewest tasks first on the most-free nodes in
    chunks. Seeds 2-3 under two queues. Nobody is suspended: the compiled run."""
    rng = np.random.default_rng(950 + seed)
    cl, jobs, tree = roomy_cluster(), light_jobs(rng), None
    if seed >= 2:
        tree = two_queues()
        jobs = with_queues(rng, jobs, tree)
    ref = run_optimus(cl, jobs, False, bool(seed % 2), tree)
    got = run_optimus(cl, jobs, True, bool(seed % 2), tree)
    assert got[1].compiled_run and not ref[1].compiled_run
    assert_same(ref, got)
    assert got[0].rounds_skipped == ref[0].rounds_skipped > 0


def test_compiled_optimus_places_wide_jobs_in_chunks_as_python_does():
    """Jobs of up to 12 one-GPU workers on nodes of 8 and 4 GPUs: chunks on several nodes."""
    from dlsched.workload.schema import job_from_row
    rng = np.random.default_rng(11)
    t, jobs = 0.0, []
    for j in range(60):
        t += float(rng.uniform(60, 900))
        jobs.append(job_from_row(dict(job_id=f"w{j:02d}", submit_time_s=t, duration_s=float(rng.uniform(10, 900)),
                                      workers=int(rng.integers(1, 13)), gpus_per_worker=1.0, cpus_per_worker=2.0,
                                      mem_gb_per_worker=8.0)))
    ref = run_optimus(roomy_cluster(), jobs, False)
    got = run_optimus(roomy_cluster(), jobs, True)
    assert got[1].compiled_run
    assert_same(ref, got)
    assert any(len({p.node for p in r.placements}) > 1 for r in ref[0].log if r.kind == "launch")


def test_where_optimus_would_suspend_the_run_goes_back_to_python():
    """A large job waits while later small ones run; when it fits in what they hold, the
    allocation gives them nothing (they are suspended): the Python loop runs it."""
    from dlsched.cluster import cluster_from_dict
    from dlsched.workload.schema import job_from_row
    one = cluster_from_dict({"name": "one", "node_groups": [{"count": 1, "gpus": 4, "gpu_type": "V100", "cpus": 32,
                                                            "mem_gb": 256, "gpu_mem_gb": 16}]})
    rows = (("a", 0.0, 100.0, 2), ("big", 10.0, 50.0, 4), ("c", 20.0, 500.0, 2))
    jobs = [job_from_row(dict(job_id=i, submit_time_s=t, duration_s=d, workers=1, gpus_per_worker=float(g),
                              cpus_per_worker=1.0, mem_gb_per_worker=1.0)) for i, t, d, g in rows]
    ref = run_optimus(one, jobs, False)
    got = run_optimus(one, jobs, True)
    assert not got[1].compiled_run
    assert_same(ref, got)
    assert any(r.kind == "suspend" for r in ref[0].log)
