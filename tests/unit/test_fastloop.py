"""The compiled run of the FIFO family (sim/fastloop.py) leaves exactly what the Python loop
leaves: the scheduler's event log, rounds (but for their wall seconds) and timeline, the
backend's engine log, every job's record and job_stats, the clock and the effective GPU-seconds,
and the same result tables. On random clusters (GPU types, nodes without GPUs) and workloads
that queue (multi-task jobs with parameter servers, CPU-only tasks, GPU-type constraints, jobs
that never fit, arrivals and finishes at equal times, jobs of no duration), for every profile it
applies to and with rate records on and off; and runs it does not apply to run in Python."""
import numpy as np
import pytest

import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.metrics.result import build_result
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim import fastloop
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

pytestmark = pytest.mark.skipif(not fastloop.available(), reason="numba does not import")


@pytest.fixture(autouse=True)
def small_runs_too(monkeypatch):
    monkeypatch.setattr(fastloop, "MIN_JOBS", 0)


def random_cluster(rng):
    groups = []
    for _ in range(int(rng.integers(1, 4))):
        groups.append({"count": int(rng.integers(2, 12)), "gpus": int(rng.choice([0, 2, 4, 8])),
                       "gpu_type": str(rng.choice(["V100", "K80"])), "gpu_mem_gb": 16,
                       "cpus": int(rng.choice([16, 32])), "mem_gb": int(rng.choice([64, 256])), "nodes_per_rack": 4})
    return cluster_from_dict({"name": "rand", "node_groups": groups})


def random_jobs(rng, n):
    jobs = []
    t = 0
    for j in range(n):
        t += int(rng.choice([0, 0, 1, 5, 30]))                 # equal submit times too
        row = dict(job_id=f"j{int(rng.integers(0, 10**6)):06d}-{j}", submit_time_s=float(t),
                   duration_s=float(rng.choice([0.0, 10.0, 60.0, rng.uniform(1, 900), rng.uniform(1, 5000)])),
                   workers=int(rng.choice([1, 1, 2, 3, 6])), cpus_per_worker=float(rng.integers(1, 9)),
                   mem_gb_per_worker=float(rng.integers(2, 40)), gpus_per_worker=float(rng.choice([0, 1, 1, 2, 4])))
        if rng.random() < 0.2:
            row.update(comm="ps", ps=int(rng.integers(1, 3)), ps_cpus=float(rng.integers(1, 5)))
        if rng.random() < 0.15:
            row["gpu_type"] = str(rng.choice(["V100", "K80", "A100"]))     # A100: no such node
        if rng.random() < 0.03:
            row["workers"] = 400                                           # larger than the cluster
        row["user"] = str(rng.choice(["ann", "bob", "cy", "dee"]))      # (drf's order)
        if rng.random() < 0.3:
            row["deadline_s"] = float(t + rng.integers(0, 20000))          # (edf's order)
        jobs.append(job_from_row(row))
    return jobs


def run(profile, cl, jobs, compiled: bool, record: bool):
    backend = SimBackend(cl, jobs, record_rates=record)
    backend.compiled_loop = compiled
    sched = Scheduler(build_profile(profile[0], profile[1]), seed=0)
    sched.run(backend)
    return sched, backend


def rounds_less_wall(sched):
    return [(r[0], r[1], r.stats[1]) if r[1] == "round" else tuple(r) for r in sched.log]


def assert_same(ref, got):
    (s0, b0), (s1, b1) = ref, got
    assert rounds_less_wall(s1) == rounds_less_wall(s0)
    assert list(b1.log) == list(b0.log)
    assert list(s1.timeline) == list(s0.timeline)
    assert [(r[0], r[2]) for r in s1.rounds] == [(r[0], r[2]) for r in s0.rounds]
    assert (b1.now(), b1.effective_gpu_s(), b1.usage()) == (b0.now(), b0.effective_gpu_s(), b0.usage())
    assert list(s1.jobs) == list(s0.jobs) and list(b1.runs) == list(b0.runs) and s1.n_done == s0.n_done
    for jid, r0 in s0.jobs.items():
        r1 = s1.jobs[jid]
        for f in ("state", "first_start_s", "finish_s", "attained_gpu_s", "reject_reason", "placed", "queued"):
            assert getattr(r1, f) == getattr(r0, f), (jid, f)
        st0, st1 = b0.job_stats(jid), b1.job_stats(jid)
        assert st1 == st0 and [type(v) for v in st1.values()] == [type(v) for v in st0.values()], jid
    res0 = build_result(s0, b0, policy="p", cluster_name="c", workload_name="w")
    res1 = build_result(s1, b1, policy="p", cluster_name="c", workload_name="w")
    assert res1.jobs.equals(res0.jobs)
    assert res1.timeline.equals(res0.timeline)
    # the rounds' wall seconds (sched_*) are the one thing measured, not computed
    assert {k: v for k, v in res1.summary.items() if not k.startswith("sched_")} == \
        {k: v for k, v in res0.summary.items() if not k.startswith("sched_")}


# the last: workers one at a time and no head of line; jobs may hold parts of the cluster
# between them for good, and a run whose jobs are left waiting goes back to Python
PROFILES = [("fifo", None), ("fifo-gang", None), ("fifo-backfill", None), ("fifo", {"blocking": False}),
            ("edf", None), ("sjf", None), ("sjf", {"gang": False}), ("tetris", None), ("k8s-binpack", None),
            ("k8s-spread", None), ("volcano-gang", None), ("drf", None), ("drf", {"gang": False}),
            ("co-location", None)]


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p[0] + ("+" if p[1] else ""))
@pytest.mark.parametrize("seed", range(5))
def test_compiled_run_leaves_what_the_python_loop_leaves(profile, seed):
    rng = np.random.default_rng(seed)
    cl = random_cluster(rng)
    jobs = random_jobs(rng, int(rng.integers(50, 400)))
    record = bool(seed % 2)
    ref = run(profile, cl, jobs, compiled=False, record=record)
    got = run(profile, cl, jobs, compiled=True, record=record)
    assert not ref[1].compiled_run
    assert got[1].compiled_run or not all(ref[0].jobs[j].state.value in ("done", "rejected") for j in ref[0].jobs)
    assert any(r.state.value == "rejected" for r in ref[0].jobs.values()) or seed, "the workload rejects none"
    assert max(n for *_, n in ref[0].timeline) > 1, "nothing queued: the test would not exercise the round"
    assert_same(ref, got)


def small_case():
    rng = np.random.default_rng(7)
    return random_cluster(rng), random_jobs(rng, 60)


@pytest.mark.parametrize("change", ["optimus", "liquid", "model", "node events", "fraction", "start delay", "jit off",
                                    "few jobs"])
def test_runs_it_does_not_apply_to_run_in_python(change, monkeypatch):
    from dataclasses import replace
    cl, jobs = small_case()
    profile, kw = "fifo", {}
    if change in ("optimus", "liquid"):           # parameter-server jobs: neither is compiled for them
        profile = change
    elif change == "model":
        jobs = [replace(jobs[0], model="resnet50"), *jobs[1:]]      # its speed depends on placement
    elif change == "node events":
        kw["node_events"] = [(100.0, 0, False), (200.0, 0, True)]
    elif change == "fraction":
        t = jobs[0].tasks[0]
        jobs = [replace(jobs[0], tasks=(replace(t, demand=(0.5, *t.demand[1:])),)), *jobs[1:]]
    elif change == "start delay":
        kw["start_delay_s"] = 5.0
    elif change == "few jobs":
        monkeypatch.setattr(fastloop, "MIN_JOBS", len(jobs) + 1)
    else:
        monkeypatch.setenv("DLSCHED_JIT", "0")
    backend = SimBackend(cl, jobs, **kw)
    sched = Scheduler(build_profile(profile), seed=0)
    sched.run(backend)
    assert not backend.compiled_run
    assert sched.n_done == len(jobs)          # the Python loop ran it


def test_the_compiled_run_reports_its_progress_and_rounds():
    cl, jobs = small_case()
    seen = []
    backend = SimBackend(cl, jobs)
    sched = Scheduler(build_profile("fifo"), seed=0)
    sched.run(backend, progress=lambda now, done: seen.append((now, done)))
    assert backend.compiled_run
    assert seen == [(backend.now(), len(jobs))]
    walls = [w for _, w, _ in sched.rounds]
    assert len(walls) > 10 and min(walls) > 0 and len(set(walls)) == 1    # the call's time, shared


def test_the_warm_up_compiles_the_signature_a_run_uses():
    """benchmarks/bench_sim.py warms the kernel up untimed: a run after it compiles nothing."""
    assert fastloop.warm() > 0
    cl, jobs = small_case()
    backend = SimBackend(cl, jobs)
    Scheduler(build_profile("fifo-gang"), seed=0).run(backend)
    assert backend.compiled_run
    assert len(fastloop._kernel.signatures) == 1
