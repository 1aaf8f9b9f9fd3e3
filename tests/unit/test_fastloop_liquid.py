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


def run(cl, jobs, compiled: bool, record: bool = False, tree=None, over=None):
    backend = SimBackend(cl, jobs, record_rates=record)
    backend.compiled_loop = compiled
    sched = Scheduler(build_profile("liquid-immediate", over), seed=0,
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
