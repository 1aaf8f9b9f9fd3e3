"""Quiet rounds and kept state of the size-aware, fair-share and placement policies (issue 14,
"quiet and incremental policy rounds"): a run that skips the periodic rounds the policy says are
quiet gives the event log and the decisions of a run with every round, on random workloads
(bursts and lulls, mixed sizes, bags of tasks, models with iterations); a deliberately wrong
quiet rule makes the comparison fail."""
import numpy as np
import pytest

import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.metrics import build_result
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

MODELS = ("resnet50", "vgg16", "bert", "lstm", None)


def _cluster(nodes=5, gpus=4):
    return cluster_from_dict({"node_groups": [{"count": nodes, "gpus": gpus, "gpus_per_group": 2,
                                               "gpu_type": "V100", "gpu_mem_gb": 32, "cpus": 32,
                                               "mem_gb": 256}]})


def _jobs(seed, n=60, span_s=30_000.0, bags=True, users=3):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = float(rng.uniform(0, span_s)) if i % 3 else float(rng.uniform(0, span_s / 10))
        model = MODELS[int(rng.integers(len(MODELS)))]
        row = dict(job_id=f"j{i:03d}", submit_time_s=round(t, 3), workers=int(rng.choice([1, 1, 2, 3, 4, 8])),
                   cpus_per_worker=2, mem_gb_per_worker=8, user=f"u{int(rng.integers(users))}")
        if bags and i % 7 == 3:
            row.update(kind="tasks", duration_s=float(rng.uniform(200, 4000)),
                       gpus_per_worker=float(rng.choice([0.0, 1.0])))
        elif model is not None and i % 2:
            row.update(model=model, iterations=float(rng.integers(2000, 20000)), batch_size=64 * row["workers"])
        else:
            row["duration_s"] = float(rng.uniform(300, 9000))
            if i % 5 == 0:
                row["gpus_per_worker"] = 2.0
        out.append(job_from_row(row))
    return out


def run(cl, jobs, policy, params=None, quiet=True, seed=0):
    sched = Scheduler(build_profile(policy, {"params": params} if params else None), seed=seed)
    if not quiet:
        sched._can_be_quiet = False
    be = SimBackend(cl, jobs)
    sched.run(be)
    res = build_result(sched, be, policy=policy, cluster_name=cl.name, workload_name="w")
    return res, sched


def same_run(cl, jobs, policy, params=None):
    every, s1 = run(cl, jobs, policy, params, quiet=False)
    quiet, s2 = run(cl, jobs, policy, params, quiet=True)
    assert quiet.events == every.events
    assert quiet.decisions == every.decisions
    assert s1.rounds_skipped == 0
    return s2


SRTF_PARAMS = [None, {"srtf": {"gpu_weighted": False}}, {"preempt": {"min_run_s": 600.0}}]


@pytest.mark.parametrize("params", SRTF_PARAMS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_srtf_skips_rounds_and_decides_the_same(seed, params):
    s = same_run(_cluster(), _jobs(seed), "srtf", params)
    assert s.rounds_skipped > 0


def _crossing_jobs():
    """Two 4-GPU nodes. P (a bag of tasks: never preempted) holds 2 GPUs of node 0 beside X (2
    GPUs); Y holds 1 GPU of node 1. W (4 GPUs on one node) arrives at 100 s ahead of both in
    SRTF's order: the walk makes X its victim, which frees no whole node, so nothing happens.
    X's key falls twice as fast as Y's and passes it at 2,000 s: then Y is the victim, which
    frees node 1 for W. No event happens in between."""
    rows = [dict(job_id="P", submit_time_s=0.0, kind="tasks", workers=1, gpus_per_worker=2.0, duration_s=20_000.0),
            dict(job_id="X", submit_time_s=1.0, workers=1, gpus_per_worker=2.0, duration_s=6_000.0),
            dict(job_id="Y", submit_time_s=2.0, workers=1, gpus_per_worker=1.0, duration_s=10_000.0),
            dict(job_id="W", submit_time_s=100.0, workers=1, gpus_per_worker=4.0, duration_s=1_000.0)]
    return [job_from_row(r) for r in rows]


def test_srtf_running_jobs_passing_each_other_wake_the_walk():
    cl = _cluster(nodes=2)
    s = same_run(cl, _crossing_jobs(), "srtf")
    assert s.rounds_skipped > 0
    res, _ = run(cl, _crossing_jobs(), "srtf")
    sus = [e for e in res.decisions if e[1] == "suspend"]
    assert [e[2] for e in sus] == ["Y"] and 2000.0 <= sus[0][0] <= 2060.0


@pytest.mark.parametrize("wrong", ["never", "waiting_only", "no_walk"])
def test_srtf_a_wrong_quiet_rule_is_caught(monkeypatch, wrong):
    """Quiet until the next event (forgetting that keys fall with time), watching only running
    keys passing waiting ones (forgetting running jobs that pass each other), or deciding that
    preempt does not walk: the scenario above then misses Y's preemption."""
    import math
    from dlsched.policies.order.srtf import SrtfOrder
    if wrong == "never":
        monkeypatch.setattr(SrtfOrder, "quiet_until", lambda self, now, running: math.inf)
    elif wrong == "no_walk":
        from dlsched.policies.order import srtf
        monkeypatch.setattr(srtf, "_walks", lambda ctx: False)
    else:
        real = SrtfOrder.quiet_until
        monkeypatch.setattr(SrtfOrder, "quiet_until",
                            lambda self, now, running: real(self, now, running[:1]))
    cl = _cluster(nodes=2)
    every, _ = run(cl, _crossing_jobs(), "srtf", quiet=False)
    quiet, _ = run(cl, _crossing_jobs(), "srtf", quiet=True)
    assert quiet.events != every.events


# -- DRF: holdings kept between rounds ------------------------------------------------------------
@pytest.fixture
def drf_checked(monkeypatch):
    """Compare DRF's per-user holdings, kept between rounds, with those summed from the records
    at every round (the order's own path when demands are not integer-valued)."""
    from dlsched.policies.order.drf import DrfOrder
    start = DrfOrder._start_round
    seen = {"kept": 0}

    def checked(self, ctx, user):
        start(self, ctx, user)
        if not self._exact:
            return
        ref = DrfOrder()
        ref._exact = False
        ref._start_round(ctx, user)
        for u in sorted(self._users - ref._users):
            ref._start_round(ctx, u)
        assert ref._users == self._users
        for u in set(ref._used) | set(self._used):
            zero = np.zeros(5)
            assert np.array_equal(self._used.get(u, zero), ref._used.get(u, zero)), u
        seen["kept"] += 1

    monkeypatch.setattr(DrfOrder, "_start_round", checked)
    return seen


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_drf_kept_holdings_match_the_records(drf_checked, seed):
    res, s = run(_cluster(), _jobs(seed, users=4), "drf")
    assert drf_checked["kept"] > 20
    assert s.profile.order._exact


def test_drf_kept_holdings_give_the_same_run():
    cl = _cluster()
    for seed in (1, 2):
        jobs = _jobs(seed, users=5)
        kept, _ = run(cl, jobs, "drf")
        sched = Scheduler(build_profile("drf"), seed=0)
        sched.profile.order._exact = False            # the pass over the records at every round
        be = SimBackend(cl, jobs)
        sched.run(be)
        ref = build_result(sched, be, policy="drf", cluster_name=cl.name, workload_name="w")
        assert kept.events == ref.events and kept.decisions == ref.decisions


def test_drf_fractional_demands_fall_back_to_the_records(drf_checked):
    from dataclasses import replace
    jobs = _jobs(5, users=3)
    jobs = [replace(j, tasks=tuple(replace(t, demand=(t.demand[0], 1.5) + t.demand[2:]) for t in j.tasks))
            if i % 4 == 0 else j for i, j in enumerate(jobs)]
    _, s = run(_cluster(), jobs, "drf")
    assert not s.profile.order._exact


def test_drf_forgetting_an_event_is_caught(drf_checked, monkeypatch):
    """A kept view that misses finishes (the events) drifts from the records."""
    from dlsched.policies.actions.gandiva_common import ChangedJobs
    real = ChangedJobs.observe
    monkeypatch.setattr(ChangedJobs, "observe", lambda self, events, applied: real(self, [], applied))
    with pytest.raises(AssertionError):
        run(_cluster(), _jobs(1, users=4), "drf")


def test_srtf_quiet_time_reads_this_rounds_queue_not_an_earlier_one():
    """A job started by a round and finished at the same time (no duration), then a round at
    that time that keys nobody (its queue kept), then a periodic tick at that time: SRTF's quiet
    time read the first round's queue, whose finished job has no key any more, and the run
    stopped with an IndexError (test_fastloop's small case, at t = 178 s). It reads the round's
    own queue now, and the quiet run is the run with every round."""
    from test_fastloop import small_case
    cl, jobs = small_case()
    assert any(j.duration_s == 0 for j in jobs)
    quiet, s1 = run(cl, jobs, "srtf")
    every, _ = run(cl, jobs, "srtf", quiet=False)
    assert quiet.events == every.events and quiet.decisions == every.decisions
    assert s1.rounds_skipped > 0 and s1.n_done > 0
