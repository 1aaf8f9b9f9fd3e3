"""The compiled placement (scheduler/fastplace.py) gives exactly what the numpy path gives: the
same nodes, GPU slots, free resources and GPU loads after a round, on random heterogeneous
clusters (GPU types, nodes down, some nodes without GPUs) and queues (parameter servers and
workers of different demands in one job, multi-GPU and CPU-only tasks, GPU-type constraints,
fractions of a GPU), for every profile it applies to (first fit's scan stops at the first fitting nodes); and the same event log over a whole
simulation. MIN_NODES is lowered so that small clusters take the compiled path."""
import numpy as np
import pytest

import dlsched
import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.scheduler import fastplace
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.scheduler.events import JobArrival
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

PROFILES = ("tetris", "k8s-binpack", "k8s-spread", "volcano-gang", "fifo", "fifo-gang", "drf")


@pytest.fixture(autouse=True)
def small_clusters_too(monkeypatch):
    monkeypatch.setattr(fastplace, "MIN_NODES", 0)
    monkeypatch.setattr(fastplace, "FIRST_FIT_AFTER", 0)
    monkeypatch.setattr(fastplace, "FIRST_FIT_MIN_NODES", 0)


def random_cluster(rng):
    groups = []
    for g in range(int(rng.integers(2, 5))):
        gpus = int(rng.choice([0, 2, 4, 8]))
        groups.append({"count": int(rng.integers(3, 30)), "gpus": gpus, "gpu_type": str(rng.choice(["V100", "K80"])),
                       "gpu_mem_gb": 16, "cpus": int(rng.choice([16, 32, 64])), "mem_gb": int(rng.choice([64, 256])),
                       "nodes_per_rack": 8})
    return cluster_from_dict({"name": "rand", "node_groups": groups})


def random_jobs(rng, n):
    jobs = []
    for j in range(n):
        row = dict(job_id=f"j{j:04d}", submit_time_s=0.0, duration_s=100.0,
                   workers=int(rng.integers(1, 9)), cpus_per_worker=float(rng.integers(1, 9)),
                   mem_gb_per_worker=float(rng.integers(2, 40)),
                   gpus_per_worker=float(rng.choice([0, 0.5, 1, 1, 2, 4])))
        if rng.random() < 0.3:
            row.update(comm="ps", ps=int(rng.integers(1, 3)), ps_cpus=float(rng.integers(1, 5)))
        if rng.random() < 0.2:
            row["gpu_type"] = str(rng.choice(["V100", "K80"]))
        if rng.random() < 0.3 and "ps" not in row:
            row["kind"] = "tasks"
        jobs.append(job_from_row(row))
    return jobs


def one_round(profile, cl, jobs, down, compiled: bool):
    backend = SimBackend(cl, [])
    for n in down:
        backend.state.up[n] = False
    sched = Scheduler(build_profile(profile), check_scores=True)
    if not compiled:
        sched._fast = None
    else:
        assert sched._fast is not None
    for j in jobs:
        sched.handle(JobArrival(0.0, j), backend)
    snap = backend.snapshot()
    plan = sched.round(snap)
    return plan, sched


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("seed", range(6))
def test_compiled_round_equals_numpy_round(profile, seed):
    rng = np.random.default_rng(seed)
    cl = random_cluster(rng)
    jobs = random_jobs(rng, int(rng.integers(20, 120)))
    down = [int(x) for x in rng.choice(len(cl.nodes), size=len(cl.nodes) // 10, replace=False)]
    ref, _ = one_round(profile, cl, jobs, down, compiled=False)
    got, _ = one_round(profile, cl, jobs, down, compiled=True)
    assert [(type(d).__name__, d.job_id, d.placements) for d in got.decisions] == \
           [(type(d).__name__, d.job_id, d.placements) for d in ref.decisions]
    assert len(ref.decisions) > 0


@pytest.mark.parametrize("profile", PROFILES)
def test_compiled_transaction_state_equals_numpy(profile):
    rng = np.random.default_rng(11)
    cl = random_cluster(rng)
    jobs = random_jobs(rng, 150)
    states = []
    for compiled in (False, True):
        backend = SimBackend(cl, [])
        sched = Scheduler(build_profile(profile), check_scores=True)
        if not compiled:
            sched._fast = None
        for j in jobs:
            sched.handle(JobArrival(0.0, j), backend)
        from dlsched.scheduler.transaction import Transaction
        txn_seen = []
        orig = Transaction.__init__

        def spy(self, snap, _orig=orig, _seen=txn_seen):
            _orig(self, snap)
            _seen.append(self)
        Transaction.__init__ = spy
        try:
            sched.round(backend.snapshot())
        finally:
            Transaction.__init__ = orig
        txn = txn_seen[0]
        states.append((txn.free.copy(), txn.gpu_load.copy(), None if txn.gpu_used is None else txn.gpu_used.copy()))
    (f0, l0, u0), (f1, l1, u1) = states
    assert np.array_equal(f0, f1)          # bit for bit: the same subtractions in the same order
    assert np.array_equal(l0, l1)
    assert (u0 is None) == (u1 is None) and (u0 is None or np.array_equal(u0, u1))


@pytest.mark.parametrize("profile", ("tetris", "k8s-binpack", "fifo", "fifo-backfill"))
def test_whole_simulation_same_event_log(profile, monkeypatch):
    rng = np.random.default_rng(5)
    cl = random_cluster(rng)
    jobs = []
    for j in range(300):
        row = dict(job_id=f"s{j:04d}", submit_time_s=float(j * 7), duration_s=float(rng.integers(60, 2000)),
                   workers=int(rng.integers(1, 5)), gpus_per_worker=float(rng.choice([0, 1, 2])),
                   cpus_per_worker=float(rng.integers(1, 8)), mem_gb_per_worker=float(rng.integers(2, 30)))
        jobs.append(job_from_row(row))
    logs = []
    for jit in ("0", "1"):
        monkeypatch.setenv("DLSCHED_JIT", jit)
        r = dlsched.simulate(cl, jobs, profile, node_events=[(500.0, 1, False), (3000.0, 1, True)])
        logs.append((r.events, [d[:4] for d in r.decisions]))
    assert logs[0] == logs[1]
    assert sum(d[1] == "launch" for d in logs[1][1]) >= 300


def test_not_used_where_it_does_not_apply(monkeypatch):
    assert fastplace.FastPlacer.for_profile(build_profile("tiresias")) is None      # other scorers
    assert fastplace.FastPlacer.for_profile(build_profile("fifo")) is not None      # first fit
    assert fastplace.FastPlacer.for_profile(build_profile("tetris")) is not None
    monkeypatch.setenv("DLSCHED_JIT", "0")
    assert fastplace.FastPlacer.for_profile(build_profile("tetris")) is None


def test_first_fit_takes_over_mid_run_with_the_same_log(monkeypatch):
    """A first-fit profile places its first FIRST_FIT_AFTER tasks through numpy, then compiled:
    the event log is the one numpy alone gives."""
    monkeypatch.setattr(fastplace, "FIRST_FIT_AFTER", 120)
    rng = np.random.default_rng(8)
    cl = random_cluster(rng)
    jobs = [job_from_row(dict(job_id=f"f{j:04d}", submit_time_s=float(j * 5), duration_s=float(rng.integers(60, 3000)),
                              workers=int(rng.integers(1, 4)), gpus_per_worker=float(rng.choice([0, 1, 2])),
                              cpus_per_worker=float(rng.integers(1, 8)), mem_gb_per_worker=float(rng.integers(2, 30))))
            for j in range(400)]
    logs = []
    for jit in ("0", "1"):
        monkeypatch.setenv("DLSCHED_JIT", jit)
        r = dlsched.simulate(cl, jobs, "fifo")
        logs.append((r.events, [d[:4] for d in r.decisions]))
    assert logs[0] == logs[1]
    assert sum(d[1] == "launch" for d in logs[1][1]) >= 400
