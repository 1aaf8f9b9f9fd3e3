"""Liquid's best fit (the `liquid-immediate` profile) in the compiled run (sim/fastloop_liquid.py)
leaves exactly what the Python loop leaves: every record test_fastloop compares (the launches'
nodes and GPUs among them), untenanted and under Kueue quotas, on random clusters of several
racks and workloads of multi-node jobs, for lam 0.5 (the default), 0, 1 and 0.3. Jobs with
parameter servers (partners by role) and an estimating allocator run in Python."""
import numpy as np
import pytest

from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim import fastloop
from dlsched.sim.backend import SimBackend
from dlsched.tenancy.engine import Tenancy
from dlsched.workload.schema import job_from_row
from test_fastloop import assert_same, random_cluster
from test_fastloop_gandiva import alike_jobs
from test_fastloop_tenancy import random_tree, with_queues

pytestmark = pytest.mark.skipif(not fastloop.available(), reason="numba does not import")


@pytest.fixture(autouse=True)
def small_runs_too(monkeypatch):
    monkeypatch.setattr(fastloop, "MIN_JOBS", 0)


def run(cl, jobs, compiled: bool, record: bool = False, tree=None, over=None, profile="liquid-immediate"):
    backend = SimBackend(cl, jobs, record_rates=record)
    backend.compiled_loop = compiled
    sched = Scheduler(build_profile(profile, over), seed=0,
                      tenancy=Tenancy(tree, "kueue") if tree is not None else None)
    sched.run(backend)
    return sched, backend


@pytest.mark.parametrize("lam", [None, 0.0, 1.0, 0.3])
@pytest.mark.parametrize("seed", range(4))
def test_compiled_liquid_leaves_what_the_python_loop_leaves(seed, lam):
    """Seeds 0-1 untenanted, 2-3 under isolated Kueue queues."""
    rng = np.random.default_rng(800 + seed)
    cl = random_cluster(rng)
    jobs = alike_jobs(rng, int(rng.integers(80, 300)))
    tree = None
    if seed >= 2:
        tree = random_tree(rng, borrowing=0)
        jobs = with_queues(rng, jobs, tree)
    over = None if lam is None else {"params": {"liquid": {"lam": lam}}}
    ref = run(cl, jobs, False, bool(seed % 2), tree, over)
    got = run(cl, jobs, True, bool(seed % 2), tree, over)
    done = all(r.state.value in ("done", "rejected") for r in ref[0].jobs.values())
    assert got[1].compiled_run == done and not ref[1].compiled_run
    assert_same(ref, got)
    spread = [r for r in ref[0].log if r.kind == "launch" and len({p.node for p in r.placements}) > 1]
    assert spread, "no job on two nodes: the test would not exercise the network cost"


@pytest.mark.parametrize("change", ["parameter server", "estimate"])
def test_what_the_kernel_does_not_score_runs_in_python(change):
    rng = np.random.default_rng(5)
    cl = random_cluster(rng)
    jobs = alike_jobs(rng, 60)
    over = None
    if change == "parameter server":
        jobs[0] = job_from_row(dict(job_id="ps", submit_time_s=0.0, duration_s=10.0, workers=2, gpus_per_worker=1.0,
                                    cpus_per_worker=1.0, mem_gb_per_worker=1.0, comm="ps", ps=1, ps_cpus=1.0))
    else:
        over = {"params": {"liquid_estimate": {"estimate": True}}}
    got = run(cl, jobs, True, over=over)
    assert not got[1].compiled_run
    assert got[0].n_done > 0 and len(got[0].rounds) > 0        # the Python loop ran it


FAST_BATCHES = {"params": {"liquid_batch": {"rate_threshold_per_s": 0.0, "generations": 5}}}


def _counting(monkeypatch):
    """The genetic algorithm's rounds the compiled run hands to Python (fastloop_liquid)."""
    from dlsched.sim import fastloop_liquid
    calls, ga = [], fastloop_liquid._ga_round
    monkeypatch.setattr(fastloop_liquid, "_ga_round", lambda *a: calls.append(1) or ga(*a))
    return calls


@pytest.mark.parametrize("seed", range(4))
def test_the_liquid_profiles_genetic_rounds_leave_what_the_python_loop_leaves(seed, monkeypatch):
    """The `liquid` profile: where waiting jobs arrive faster than 1 per 30 s, LiquidBatch's
    genetic algorithm places the batch. The kernel hands those rounds to Python (fastloop_ga's
    object mode) and goes on: the same records, the same draws from the scheduler's generator
    (its state after the run), the same last batch. Seeds 0-1 untenanted, 2-3 under isolated
    Kueue queues."""
    rng = np.random.default_rng(900 + seed)
    cl = random_cluster(rng)
    jobs = alike_jobs(rng, int(rng.integers(150, 300)))
    tree, over = None, {"params": {"liquid_batch": {"generations": 5}}}     # (fewer: the test's time)
    if seed >= 2:                # (quotas admit few at a time: a batch from one job in 300 s)
        tree = random_tree(rng, borrowing=0)
        jobs = with_queues(rng, jobs, tree)
        over = FAST_BATCHES
    ref = run(cl, jobs, False, bool(seed % 2), tree, over, profile="liquid")
    calls = _counting(monkeypatch)
    got = run(cl, jobs, True, bool(seed % 2), tree, over, profile="liquid")
    done = all(r.state.value in ("done", "rejected") for r in ref[0].jobs.values())
    assert got[1].compiled_run == done and not ref[1].compiled_run     # (seed 0 leaves jobs that never fit)
    assert calls, "no genetic round: the test would not exercise the batch strategy"
    assert_same(ref, got)
    assert got[0].rng.bit_generator.state == ref[0].rng.bit_generator.state
    last = [p.last and {k: v for k, v in p.last.items() if k != "wall_s"}
            for s in (ref[0], got[0]) for p in s.profile.placers if type(p).__name__ == "LiquidBatch"]
    assert len(last) == 2 and last[0] == last[1]      # (None where the last round was not a batch's)


def test_a_run_the_kernel_stops_after_genetic_rounds_replays_them_with_the_same_draws(monkeypatch):
    """A borrowing tree where Kueue reclaims stops the kernel (fastloop_tenancy) after it has
    handed genetic rounds to Python: the generator's state goes back to the run's start, and the
    Python loop's replay is the one a Python run gives."""
    rng = np.random.default_rng(3)
    cl = random_cluster(rng)
    tree = random_tree(rng, borrowing=None)
    jobs = with_queues(rng, alike_jobs(rng, 300), tree)
    ref = run(cl, jobs, False, tree=tree, over=FAST_BATCHES, profile="liquid")
    calls = _counting(monkeypatch)
    got = run(cl, jobs, True, tree=tree, over=FAST_BATCHES, profile="liquid")
    assert not got[1].compiled_run and calls
    assert_same(ref, got)
    assert got[0].rng.bit_generator.state == ref[0].rng.bit_generator.state
