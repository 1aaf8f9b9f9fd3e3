"""KAI-Scheduler, Volcano and Kueue's admission fair sharing, scenario by scenario
(research/tenancy-semantics.md section 7: 15-17, 19, 20, 22-25), in the simulator."""
import math

import pytest
from tenancy_harness import job, run, tree

from dlsched.tenancy.entitle import kai_split
from dlsched.tenancy.ledger import DecayedLedger, alpha


def test_15_decayed_usage_orders_admission_and_its_decay_by_hand():
    # one queue with two leaves (Kueue: one ClusterQueue, two LocalQueues)
    q = tree({"name": "cq", "nominal": 8}, {"name": "lq1", "parent": "cq"}, {"name": "lq2", "parent": "cq"})
    jobs = [job(f"old{i}", "lq1", 1, t=0, dur=3600) for i in range(8)]      # lq1 used 8 GPUs for an hour
    jobs += [job("x1", "lq1", 1, t=3600.5), job("x2", "lq2", 1, t=3600.5)]
    jobs += [job(f"fill{i}", "lq2", 1, t=3600.2) for i in range(7)]          # 1 GPU left for x1, x2
    out = run(q, jobs, gpus=8, mode="kueue", until=3601,
              settings={"queue_order": "usage", "strategy": "best-effort",
                        "ledger": "decayed", "params": {"ledger": {"form": "ema", "half_life_s": 3600.0,
                                                                   "sample_s": 300.0, "entry_penalty": True}}})
    assert out.state("x2").value == "running" and out.state("x1").value == "pending"
    a = alpha(300.0, 3600.0)
    assert round(a, 4) == 0.0561 and round(round(a, 4) * 4, 3) == 0.224   # the 4-GPU entry penalty
    led = DecayedLedger(half_life_s=3600.0, form="ema", sample_s=300.0, entry_penalty=True)
    led.advance(0.0, {})
    led.admit("queue:q", 4.0)
    assert led.value("queue:q") == pytest.approx(a * 4)
    led.advance(3600.0, {"queue:q": 8.0})               # 12 samples of 8 GPUs: half way to 8
    assert led.value("queue:q") == pytest.approx(a * 4 * 0.5 + 8 * 0.5, rel=1e-9)


def test_16_weighted_over_quota_split():
    qs = [dict(name="q1", quota=10, limit=math.inf, request=100, weight=3, priority=0, usage=0.0),
          dict(name="q2", quota=10, limit=math.inf, request=100, weight=1, priority=0, usage=0.0)]
    assert kai_split(100, qs) == {"q1": 70, "q2": 30}


def test_17_time_based_share():
    base = dict(quota=0, limit=math.inf, request=300, weight=1, priority=0)
    qs = [dict(base, name="q1", usage=0.5), dict(base, name="q2", usage=0.0)]
    assert kai_split(300, qs, k=1.0) == {"q1": 100, "q2": 200}        # P = 0.5 and 1.0: 1/3 : 2/3
    assert kai_split(300, qs, k=0.0) == {"q1": 150, "q2": 150}


def _departments(d_quota, q_quota):
    return tree({"name": "d1", "nominal": d_quota}, {"name": "q0", "parent": "d1", "nominal": q_quota},
                {"name": "d2", "nominal": d_quota}, {"name": "q1", "parent": "d2", "nominal": q_quota})


def test_19_a_department_over_its_fair_share_does_not_reclaim():
    jobs = [job("t0", "q0", 3, prio=50), job("b1", "q1", 1, prio=100), job("t1", "q1", 2, t=10, prio=50)]
    out = run(_departments(2, 1), jobs, gpus=4, mode="kai")
    assert out.preempted() == {} and out.state("t1").value == "pending"


def test_20_within_fair_share_no_reclaim():
    jobs = [job(f"a{i}", "q0", 1) for i in range(3)] + [job(f"b{i}", "q1", 1) for i in range(3)]
    jobs += [job("new", "q1", 1, t=10)]
    out = run(_departments(1, 1), jobs, gpus=6, nodes=2, mode="kai")
    assert out.preempted() == {} and out.state("new").value == "pending"


def test_22_a_non_preemptible_job_runs_only_within_quota():
    q = tree({"name": "leaf", "nominal": 0})
    out = run(q, [job("build", "leaf", 1, prio=100)], gpus=4, mode="kai")
    assert out.state("build").value == "pending" and "non-preemptible" in out.why("build")
    out = run(q, [job("train", "leaf", 1, prio=50)], gpus=4, mode="kai")
    assert out.state("train").value == "running"
    # a queue of 1 GPU: a running train job yields to a build job of the same queue
    q = tree({"name": "leaf", "nominal": 1, "limit": 1})
    out = run(q, [job("train", "leaf", 1, prio=50), job("build", "leaf", 1, t=10, prio=100)], gpus=4, mode="kai")
    assert out.preempted() == {"train": "within-queue: for build (leaf)"}
    assert out.state("build").value == "running"


@pytest.mark.parametrize("arrive, taken", [(20.0, False), (31.0, True)])
def test_23_minimum_runtime_before_a_reclaim(arrive, taken):
    q = tree({"name": "a", "nominal": 2}, {"name": "b", "nominal": 2})
    jobs = [job(f"a{i}", "a", 1) for i in range(4)] + [job("b0", "b", 1, t=arrive)]
    out = run(q, jobs, gpus=4, settings={"reclaim_min_runtime_s": 30.0}, until=arrive + 0.5)
    assert bool(out.preempted()) is taken
    if not taken:     # refused at 20 s; the round at 30 s, when the protection ends, takes it
        out = run(q, jobs, gpus=4, settings={"reclaim_min_runtime_s": 30.0}, until=31.0)
        assert out.state("b0").value == "running"
        assert [r.time_s for r in out.sched.log if r.kind == "suspend"] == [30.0]


def test_24_proportion_reclaims_the_preemptable_job_only():
    q = tree({"name": "q1"}, {"name": "q2"})
    jobs = [job("p1", "q1", 1, prio=100), job("preemptee2", "q1", 1), job("p3", "q1", 1, prio=100),
            job("r", "q2", 1, t=10)]
    out = run(q, jobs, gpus=3, mode="volcano-proportion")
    assert out.preempted() == {"preemptee2": "reclaim: for r (q2)"}
    # two queues over their share: the lower queue priority gives
    q = tree({"name": "q1", "priority": 5}, {"name": "q2", "priority": 10}, {"name": "q3", "priority": 1})
    jobs = [job("a1", "q1", 1), job("a2", "q1", 1), job("b1", "q2", 1), job("b2", "q2", 1),
            job("c", "q3", 1, t=10)]
    out = run(q, jobs, gpus=4, mode="volcano-proportion")
    assert list(out.preempted()) in (["a1"], ["a2"])


def test_25_capacity_no_reclaim_beyond_deserved_and_the_guarantee_holds():
    both = lambda c, m: {"gpu": {"nominal": c}, "mem_gb": {"nominal": m}}  # noqa: E731
    q = {"queues": [{"name": "q12", "quotas": both(1, 2)}, {"name": "q13", "quotas": both(0, 0)}]}
    jobs = [job("run12", "q12", 1, mem=1), job("run13", "q13", 1, mem=1), job("ask", "q12", 1, t=10, mem=2)]
    out = run(q, jobs, gpus=2, mode="volcano-capacity")
    assert out.preempted() == {} and out.state("ask").value == "pending"
    # q1 guarantees 20 of its 60; q2 reclaims: at most 40 are taken from q1
    q = {"queues": [{"name": "q1", "quotas": {"gpu": {"nominal": 60, "lending_limit": 40, "limit": 60}}},
                    {"name": "q2", "quotas": {"gpu": {"nominal": 0}}}]}
    jobs = [job(f"a{i:02d}", "q1", 1) for i in range(60)] + [job(f"b{i:02d}", "q2", 1, t=10) for i in range(60)]
    out = run(q, jobs, gpus=60, nodes=6, mode="volcano-capacity")
    assert out.usage("q1") >= 20
