"""DRF (Ghodsi et al., NSDI 2011): dominant shares worked out by hand, progressive filling on the
paper's example, and a heavy user's jobs yielding to a light user's job."""
import numpy as np
import pytest

import dlsched
import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.core.types import Launch
from dlsched.scheduler.core import RoundContext, Scheduler, build_profile
from dlsched.scheduler.transaction import Transaction
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

# The paper's example (section 4): 9 CPUs, 18 GB; no GPUs, so GPU (capacity 0) is left out.
PAPER = {"node_groups": [{"count": 1, "gpus": 0, "cpus": 9, "mem_gb": 18}]}
# 2 nodes x (4 GPUs, 32 CPUs, 128 GB): capacity 8 GPUs, 64 CPUs, 256 GB.
GPUS8 = {"node_groups": [{"count": 2, "gpus": 4, "gpu_mem_gb": 32, "cpus": 32, "mem_gb": 128}]}


def task_job(job_id, user, cpus, mem, n=1, t=0.0, duration=100.0):
    return job_from_row(dict(job_id=job_id, submit_time_s=t, kind="tasks", workers=n, cpus_per_worker=cpus,
                             mem_gb_per_worker=mem, duration_s=duration, user=user))


def dl_job(job_id, user, workers, t=0.0, duration=100.0, cpus=1, mem=4):
    return job_from_row(dict(job_id=job_id, submit_time_s=t, workers=workers, cpus_per_worker=cpus,
                             mem_gb_per_worker=mem, duration_s=duration, user=user))


def first_round(cluster, jobs, policy="drf"):
    """Deliver the arrivals at t=0 and run one round; returns (scheduler, backend, plan)."""
    cl = cluster_from_dict(cluster)
    backend = SimBackend(cl, jobs)
    sched = Scheduler(build_profile(policy))
    for e in backend.poll():
        sched.handle(e, backend)
    plan = sched.round(backend.snapshot())
    return sched, backend, plan


def shares_after_first_round(cluster, jobs):
    """Apply the first round's plan, then read every user's dominant share in a fresh round."""
    sched, backend, plan = first_round(cluster, jobs)
    backend.apply(plan)
    sched._after_apply(plan, backend.now())
    snap = backend.snapshot()
    ctx = RoundContext(snap, Transaction(snap), snap.now, sched.jobs, list(sched.queue),
                       np.random.default_rng(0), sched)
    order = sched.profile.order
    return {rec.spec.user: order.key(rec, ctx)[0] for rec in sched.jobs.values()}


@pytest.mark.parametrize("cluster, jobs, expected", [
    # A holds <1 CPU, 4 GB>: max(1/9, 4/18) = 2/9 (memory dominant)
    (PAPER, [task_job("a", "A", 1, 4)], {"A": 2 / 9}),
    # B holds <3 CPU, 1 GB>: max(3/9, 1/18) = 1/3 (CPU dominant)
    (PAPER, [task_job("b", "B", 3, 1)], {"B": 1 / 3}),
    # A holds 3 x <1, 4> = <3, 12>: max(3/9, 12/18) = 2/3; B 2 x <3, 1> = <6, 2>: max(6/9, 2/18) = 2/3
    (PAPER, [task_job("a", "A", 1, 4, n=3), task_job("b", "B", 3, 1, n=2)], {"A": 2 / 3, "B": 2 / 3}),
    # C: DL job, 2 workers x <1 GPU, 4 CPU, 16 GB> = <2, 8, 32>: max(2/8, 8/64, 32/256) = 1/4 (GPU)
    # D: 4 tasks x <0 GPU, 8 CPU, 8 GB> = <0, 32, 32>: max(0, 32/64, 32/256) = 1/2 (CPU)
    (GPUS8, [dl_job("c", "C", 2, cpus=4, mem=16), task_job("d", "D", 8, 8, n=4)], {"C": 0.25, "D": 0.5}),
    # Two jobs of one user add up: 2 + 3 workers x <1 GPU, 1 CPU, 4 GB> = <5, 5, 20>: 5/8 (GPU)
    (GPUS8, [dl_job("e1", "E", 2), dl_job("e2", "E", 3)], {"E": 5 / 8}),
])
def test_dominant_shares_by_hand(cluster, jobs, expected):
    assert shares_after_first_round(cluster, jobs) == pytest.approx(expected)


def test_user_holding_nothing_has_share_zero():
    # F's job needs 10 CPUs: more than the node, rejected at arrival; F holds nothing.
    shares = shares_after_first_round(PAPER, [task_job("a", "A", 1, 4), task_job("f", "F", 10, 1)])
    assert shares == pytest.approx({"A": 2 / 9, "F": 0.0})


def test_progressive_filling_on_the_papers_example():
    # Each user submits five one-task jobs; every job is one DRF step. Hand trace (shares A, B):
    #   0, 0       -> a1 (tie: earlier id)   A = max(1/9, 4/18)  = 2/9
    #   2/9, 0     -> b1                     B = max(3/9, 1/18)  = 1/3
    #   2/9, 1/3   -> a2                     A = max(2/9, 8/18)  = 4/9
    #   4/9, 1/3   -> b2                     B = max(6/9, 2/18)  = 2/3
    #   4/9, 2/3   -> a3                     A = max(3/9, 12/18) = 2/3
    # now 9 CPUs are used (3 + 6): nothing else fits. A gets 3 tasks, B 2, both at 2/3.
    jobs = ([task_job(f"a{i}", "A", 1, 4) for i in range(1, 6)]
            + [task_job(f"b{i}", "B", 3, 1) for i in range(1, 6)])
    _, _, plan = first_round(PAPER, jobs)
    assert [d.job_id for d in plan.decisions if isinstance(d, Launch)] == ["a1", "b1", "a2", "b2", "a3"]


def test_progressive_filling_equalises_shares():
    jobs = ([task_job(f"a{i}", "A", 1, 4) for i in range(1, 6)]
            + [task_job(f"b{i}", "B", 3, 1) for i in range(1, 6)])
    assert shares_after_first_round(PAPER, jobs) == pytest.approx({"A": 2 / 3, "B": 2 / 3})


def test_fifo_would_not_be_fair_on_the_same_jobs():
    # Control: FIFO-backfill on the same jobs gives A (submitted first) the whole memory.
    jobs = ([task_job(f"a{i}", "A", 1, 4) for i in range(1, 6)]
            + [task_job(f"b{i}", "B", 3, 1) for i in range(1, 6)])
    _, _, plan = first_round(PAPER, jobs, "fifo-backfill")
    # 4 x 4 GB of A fill 16 of 18 GB; one B fits on what is left (3 CPUs, 1 GB).
    assert [d.job_id for d in plan.decisions] == ["a1", "a2", "a3", "a4", "b1"]


def test_heavy_users_later_job_yields_to_a_light_user():
    # 8 GPUs. Heavy user H runs h_long (4 GPUs, until t=1000) and h_fill (4 GPUs, until t=100).
    # H submits h2 (4 GPUs) at t=10, light user L submits l1 (4 GPUs) at t=20: both wait.
    # At t=100, 4 GPUs free up: H still holds 4/8 = 1/2, L holds 0, so DRF starts l1 although
    # h2 came first; FIFO starts h2.
    def jobs():
        return [dl_job("h_long", "H", 4, t=0, duration=1000), dl_job("h_fill", "H", 4, t=0, duration=100),
                dl_job("h2", "H", 4, t=10, duration=100), dl_job("l1", "L", 4, t=20, duration=100)]
    cl = cluster_from_dict(GPUS8)
    drf = dlsched.simulate(cl, jobs(), "drf").jobs.set_index("job_id")
    fifo = dlsched.simulate(cl, jobs(), "fifo-backfill").jobs.set_index("job_id")
    assert drf.loc["l1", "first_start_s"] == 100 and drf.loc["h2", "first_start_s"] == 200
    assert fifo.loc["h2", "first_start_s"] == 100 and fifo.loc["l1", "first_start_s"] == 200


def test_drf_finishes_every_job_of_a_mixed_workload():
    r = dlsched.simulate("seed002", "sample", "drf")
    assert r.summary["unfinished"] == 0
