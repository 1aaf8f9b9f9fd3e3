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


def run(cl, jobs, compiled: bool, record: bool = False, tree=None, over=None):
    backend = SimBackend(cl, jobs, record_rates=record)
    backend.compiled_loop = compiled
    sched = Scheduler(build_profile("srtf", over), seed=0, tenancy=Tenancy(tree, "kueue") if tree else None)
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
    backend = SimBackend(cl, jobs, record_rates=record)
    backend.compiled_loop = compiled
    sched = Scheduler(build_profile("tiresias", over), seed=0, tenancy=Tenancy(tree, "kueue") if tree else None)
    sched.run(backend)
    return sched, backend


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
