"""Kueue's rules, scenario by scenario (research/tenancy-semantics.md section 7: 1-3, 5-9, 11, 13,
14), each run in the simulator with the `kueue` or `kueue-fair` tenancy mode. One cpu of the
source is one GPU here; the jobs run far longer than the scenario, so what runs is what was
admitted."""
from tenancy_harness import job, run, tree

COHORT = tree({"name": "a", "nominal": 9}, {"name": "b", "nominal": 12})


def test_1_a_borrows_what_b_leaves_idle_and_b_comes_first_when_it_asks():
    jobs = [job(f"a{i:02d}", "a", 1, t=0) for i in range(25)]
    out = run(COHORT, jobs, gpus=32)
    assert out.usage("a") == 21                        # 9 of its own + 12 of b's
    assert "cannot borrow" in out.why("a21")
    # b asks while a is above nominal; with reclaim off, b's job goes before a's next when one ends
    jobs += [job("b0", "b", 1, t=10)]
    out = run(COHORT, jobs, gpus=32, settings={"params": {"victims": {"reclaim_within_cohort": "never"}}},
              finish=[(20.0, "a00")], until=21)
    assert out.state("b0").value == "running" and out.state("a21").value == "pending"
    # with reclaim (Kueue's reclaimWithinCohort: Any) b takes its quota back at once
    out = run(COHORT, jobs, gpus=32)
    assert out.preempted() and all(r.startswith("reclaim: for b0") for r in out.preempted().values())
    assert out.usage("b") == 1 and out.usage("a") == 20


def test_2_a_borrowing_limit_caps_what_a_queue_takes():
    q = tree({"name": "a", "nominal": 9, "borrowing_limit": 1}, {"name": "b", "nominal": 12})
    out = run(q, [job(f"a{i:02d}", "a", 1) for i in range(25)], gpus=32)
    assert out.usage("a") == 10
    assert "borrowing limit of 1" in out.why("a10")
    out = run(q, [job(f"b{i:02d}", "b", 1) for i in range(25)], gpus=32)
    assert out.usage("b") == 21


def test_3_a_lending_limit_keeps_the_rest_of_the_nominal():
    q = tree({"name": "a", "nominal": 9}, {"name": "b", "nominal": 12, "lending_limit": 1})
    out = run(q, [job(f"a{i:02d}", "a", 1) for i in range(25)], gpus=32)
    assert out.usage("a") == 10


def test_5_strict_fifo_blocks_and_best_effort_does_not():
    q = tree({"name": "cq", "nominal": 5, "borrowing_limit": 0})
    jobs = [job("w1", "cq", 2, t=0, prio=100), job("w2", "cq", 5, t=1, prio=10), job("w3", "cq", 1, t=2, prio=1)]
    out = run(q, jobs, gpus=16, settings={"strategy": "strict"})
    assert out.running() == {"w1"} and out.waiting() == {"w2", "w3"}
    assert "behind w2 in queue cq" in out.why("w3")
    out = run(q, jobs, gpus=16, settings={"strategy": "best-effort"})
    assert out.running() == {"w1", "w3"} and out.waiting() == {"w2"}


NO_PREEMPTION = {"victims": "none"}          # the source's test runs with preemption off


def test_6_fair_sharing_admits_by_the_lowest_share_with_exact_shares():
    from dlsched.tenancy.orders import drs
    q = tree({"name": "cohort", "nominal": 4}, {"name": "a", "parent": "cohort", "nominal": 3},
             {"name": "b", "parent": "cohort", "nominal": 1})
    a = [job(f"a{i:02d}", "a", 1, t=0) for i in range(10)]
    b = [job(f"b{i:02d}", "b", 1, t=1) for i in range(5)]
    out = run(q, a, gpus=16, mode="kueue-fair", settings=NO_PREEMPTION)
    assert out.usage("a") == 8
    view = out.sched.tenancy._view
    assert round(drs(view, "a"), 1) == 625.0
    # a's jobs end one at a time: b, b, b, then a (a 5 / b 3: shares 250 / 250)
    ends = [(10.0 + i, f"a{i:02d}") for i in range(4)]
    out = run(q, a + b, gpus=16, mode="kueue-fair", finish=ends, until=14,
              settings=NO_PREEMPTION)
    after = [j for j in out.admitted_order() if j not in {f"a{i:02d}" for i in range(8)}]
    assert after == ["b00", "b01", "b02", "a08"]
    view = out.sched.tenancy._view
    assert (out.usage("a"), out.usage("b")) == (5, 3)
    assert (round(drs(view, "a")), round(drs(view, "b"))) == (250, 250)
    # two more of a's end: a's last job, then b (a 4 / b 4: shares 125 / 375)
    out = run(q, a + b, gpus=16, mode="kueue-fair", finish=ends + [(20.0, "a04"), (21.0, "a05")], until=22,
              settings=NO_PREEMPTION)
    view = out.sched.tenancy._view
    assert (out.usage("a"), out.usage("b")) == (4, 4)
    assert (round(drs(view, "a")), round(drs(view, "b"))) == (125, 375)


def test_7_the_share_of_a_queue_that_took_the_cohort():
    from dlsched.tenancy.orders import drs
    q = tree({"name": "a", "nominal": 3}, {"name": "b", "nominal": 3}, {"name": "c", "nominal": 3})
    out = run(q, [job(f"a{i:02d}", "a", 1) for i in range(10)], gpus=16, mode="kueue-fair")
    assert out.usage("a") == 9
    assert round(drs(out.sched.tenancy._view, "a"), 1) == 666.7


ABC = tree({"name": "a", "nominal": 3}, {"name": "b", "nominal": 3}, {"name": "c", "nominal": 3})


def test_8_reclaim_takes_from_the_heaviest_borrower():
    jobs = ([job(f"a{i:02d}", "a", 1) for i in range(3)] + [job(f"b{i:02d}", "b", 1) for i in range(5)]
            + [job("c0", "c", 1), job("c1", "c", 1, t=10)])
    out = run(ABC, jobs, gpus=9, mode="kueue-fair")
    assert list(out.preempted()) and all(j.startswith("b") for j in out.preempted())
    assert len(out.preempted()) == 1
    assert next(iter(out.preempted().values())).startswith("reclaim: for c1")
    assert out.state("c1").value == "running"


def test_9_no_preemption_that_would_flip_the_imbalance():
    jobs = [job(f"a{i:02d}", "a", 1) for i in range(3)] + [job(f"b{i:02d}", "b", 1) for i in range(5)]
    jobs += [job("a-big", "a", 2, t=10)]
    out = run(ABC, jobs, gpus=9, mode="kueue-fair")
    assert out.preempted() == {} and out.state("a-big").value == "pending"


def test_11_huge_against_huge():
    jobs = [job("a1", "a", 2), job("b1", "b", 7), job("a2", "a", 5, t=10)]
    out = run(ABC, jobs, gpus=9, mode="kueue-fair")
    assert out.preempted() == {} and out.state("a2").value == "pending"
    jobs = [job("b1", "b", 9), job("a2", "a", 2, t=10)]
    out = run(ABC, jobs, gpus=9, mode="kueue-fair")
    assert set(out.preempted()) == {"b1"} and out.preempted()["b1"].startswith("reclaim")


def test_13_guaranteed_takes_from_the_lowest_priority_best_effort_queue():
    q = tree({"name": "cohort"}, {"name": "guaranteed", "parent": "cohort", "nominal": 8},
             {"name": "be-a", "parent": "cohort", "nominal": 0}, {"name": "be-b", "parent": "cohort", "nominal": 0})
    jobs = [job("ja", "be-a", 4, prio=2), job("jb", "be-b", 4, prio=1), job("g", "guaranteed", 4, t=10)]
    out = run(q, jobs, gpus=8, mode="kueue-fair")
    assert set(out.preempted()) == {"jb"}


def test_14_a_lender_that_may_not_reclaim_keeps_its_capacity():
    q = tree({"name": "A", "nominal": 2}, {"name": "B", "nominal": 0})
    jobs = [job("a1", "A", 1), job("a2", "A", 2, t=1), job("b1", "B", 1, t=2)]
    out = run(q, jobs, gpus=4, settings={"params": {"victims": {"reclaim_within_cohort": "any"}}})
    assert out.state("b1").value == "running"
    for policy in ("lower_priority", "never"):
        out = run(q, jobs, gpus=4, settings={"params": {"victims": {"reclaim_within_cohort": policy}}})
        assert out.state("b1").value == "pending", policy
        assert "may need it back" in out.why("b1")


def test_a_job_above_its_queues_limits_is_rejected_at_arrival_with_the_numbers():
    q = tree({"name": "org", "limit": 6}, {"name": "a", "parent": "org", "nominal": 2, "borrowing_limit": 1},
             {"name": "b", "parent": "org", "nominal": 4})
    out = run(q, [job("big", "a", 4), job("wide", "b", 8, workers=2), job("ok", "a", 3)], gpus=16)
    assert out.state("big").value == "rejected" and out.state("wide").value == "rejected"
    assert out.sched.jobs["big"].reject_reason == ("field 'queue': the job asks 4 GPUs at once; queue a's nominal "
                                                   "quota plus borrowing limit is 3")
    assert out.sched.jobs["wide"].reject_reason == ("field 'queue': the job asks 8 GPUs at once; queue org's limit "
                                                    "is 6 (an ancestor of b)")
    assert out.state("ok").value == "running"
