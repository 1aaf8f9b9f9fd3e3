import numpy as np
import pytest

import dlsched
import dlsched.policies  # noqa: F401
from dlsched.cluster import ClusterState, load_cluster
from dlsched.core.errors import ConfigError
from dlsched.core.types import Launch, Status
from dlsched.scheduler.core import build_profile
from dlsched.scheduler.framework import REGISTRY, Action, Order, Registry, RegistryError, Score, build, register
from dlsched.scheduler.transaction import Transaction
from dlsched.workload.schema import job_from_row


def test_registry_rejects_duplicates_and_unknown_names():
    reg = Registry()
    reg.add("order", "x", object)
    with pytest.raises(RegistryError, match="duplicate order name 'x'"):
        reg.add("order", "x", object)
    with pytest.raises(RegistryError, match="unknown order 'y'"):
        reg.get("order", "y")
    with pytest.raises(RegistryError, match="duplicate"):
        @register("order", "fifo")
        class Again(Order):
            static = True

            def key(self, job, ctx):
                return ()


def test_register_checks_the_declared_extension_point():
    # a component subclasses its point's Protocol (every hook declared there) ...
    with pytest.raises(RegistryError, match="must subclass dlsched.scheduler.framework.Score"):
        @register("score", "not-a-scorer")
        class Loose:
            def score(self, ctx, job, task, free, nodes):
                return np.ones(len(nodes))
    # ... and defines the point's hook
    with pytest.raises(RegistryError, match="does not define score"):
        @register("score", "no-score-method")
        class Bad(Score):
            pass
    with pytest.raises(RegistryError, match="neither before_place"):
        @register("action", "no-hook")
        class Idle(Action):
            pass
    assert "not-a-scorer" not in REGISTRY.names("score") and "no-hook" not in REGISTRY.names("action")


def test_build_validates_parameters_by_path():
    @register("score", "test-weighted")
    class WeightedScorer(Score):
        """Test scorer."""

        def __init__(self, weight: float = 1.0, mode: str = "a"):
            if mode not in ("a", "b"):
                raise ValueError("mode must be a or b")
            self.weight = weight

        def score(self, ctx, job, task, free, nodes):
            return np.ones(len(nodes))
    try:
        assert build("score", "test-weighted", {"weight": 2}).weight == 2
        with pytest.raises(ConfigError) as e:
            build("score", "test-weighted", {"wieght": 2}, "policies.p.params.test-weighted")
        assert e.value.path == "policies.p.params.test-weighted.wieght"
        with pytest.raises(ConfigError, match="expected float"):
            build("score", "test-weighted", {"weight": "heavy"})
        with pytest.raises(ConfigError, match="mode must be"):
            build("score", "test-weighted", {"mode": "c"})
    finally:
        REGISTRY._items.pop(("score", "test-weighted"))


def test_policy_config_validation(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("policies:\n  fifo:\n    blocking: false\n    colour: red\n")
    with pytest.raises(ConfigError) as e:
        dlsched.load_policy_config(bad)
    assert e.value.path == "policies.fifo.colour" and "p.yaml" in str(e.value)
    bad.write_text("policies:\n  nosuch: {}\n")
    with pytest.raises(ConfigError, match="policies.nosuch"):
        dlsched.load_policy_config(bad)
    bad.write_text("policies:\n  fifo:\n    params: {tetris: {}}\n")
    with pytest.raises(ConfigError, match="policies.fifo.params.tetris"):
        dlsched.load_policy_config(bad)
    ok = tmp_path / "ok.yaml"
    ok.write_text("policies:\n  fifo:\n    blocking: false\n    round_s: 60\n")
    cfg = dlsched.load_policy_config(ok)
    prof = build_profile("fifo", cfg["fifo"])
    assert prof.blocking is False and prof.round_s == 60


def _job(jid, workers, **kw):
    return job_from_row(dict(job_id=jid, submit_time_s=0, workers=workers, duration_s=10, **kw))


def test_transaction_commit_discard_and_gang():
    cl = load_cluster("seed002")
    snap = ClusterState(cl).snapshot(0.0)
    txn = Transaction(snap)
    job = _job("a", 3)
    for t in job.tasks[:2]:
        txn.reserve("a", t, 2)
    assert txn.free[2, 0] == 0
    st = txn.commit("a", total_tasks=3, already_placed=0, gang=True)
    assert not st.ok and "gang: 2 of 3" in st.reasons[0]
    assert (txn.free == snap.free).all() and len(txn.plan) == 0  # all or nothing
    for t in job.tasks[:2]:
        txn.reserve("a", t, 2)
    st = txn.commit("a", total_tasks=3, already_placed=0, gang=False)
    assert "partial" in st.reasons[0]
    assert isinstance(txn.plan.decisions[0], Launch) and len(txn.plan.decisions[0].placements) == 2
    assert (snap.free[2] == cl.capacity[2]).all()  # the snapshot is never written


def test_gpu_ids_are_least_loaded_first():
    cl = load_cluster("seed002")
    txn = Transaction(ClusterState(cl).snapshot(0.0))
    j = _job("a", 2, gpus_per_worker=2)
    a = txn.reserve("a", j.tasks[0], 0)
    b = txn.reserve("a", j.tasks[1], 0)
    assert a.gpu_ids == (0, 1) and b.gpu_ids == (2, 3)


def test_status_is_not_a_bool():
    with pytest.raises(TypeError):
        bool(Status.success())


def test_partial_hold_fifo_versus_gang():
    """seed002 (4+4+2+2 GPUs). j0 4 GPUs 100 s, j1 4 GPUs 200 s, j2 8 workers 50 s, all at t<=20.
    fifo places j2's workers one at a time: 4 on nodes 2, 3 at t=20 (held, no progress), the other
    4 when j0 ends at t=100 -> 4 GPUs x 80 s = 320 GPU-s of partial hold. Gang waits instead."""
    jobs = [job_from_row(dict(job_id="j0", submit_time_s=0, workers=4, duration_s=100)),
            job_from_row(dict(job_id="j1", submit_time_s=10, workers=4, duration_s=200)),
            job_from_row(dict(job_id="j2", submit_time_s=20, workers=8, duration_s=50))]
    fifo = dlsched.simulate("seed002", jobs, "fifo")
    gang = dlsched.simulate("seed002", jobs, "fifo-gang")
    assert fifo.summary["partial_hold_gpu_s"] == pytest.approx(320)
    assert gang.summary["partial_hold_gpu_s"] == 0
    for r in (fifo, gang):
        j = r.jobs.set_index("job_id")
        assert list(j.jct_s) == pytest.approx([100, 200, 130])
        assert j.loc["j2", "first_start_s"] == 100
    # allocated GPU-s: j0 400 + j1 800 + j2 (4 x 130 + 4 x 50) = 1920 over 12 GPUs x 210 s
    assert fifo.summary["gpu_util"] == pytest.approx(1920 / (12 * 210))
    assert gang.summary["gpu_util"] == pytest.approx(1600 / (12 * 210))
    assert fifo.summary["effective_gpu_util"] == pytest.approx(1600 / (12 * 210))


def test_jobs_that_never_fit_are_rejected_not_blocking():
    jobs = [job_from_row(dict(job_id="huge", submit_time_s=0, workers=13, duration_s=10)),
            job_from_row(dict(job_id="big-task", submit_time_s=0, workers=1, gpus_per_worker=5, duration_s=10)),
            job_from_row(dict(job_id="ok", submit_time_s=1, workers=1, duration_s=10))]
    r = dlsched.simulate("seed002", jobs, "fifo")
    j = r.jobs.set_index("job_id")
    assert j.loc["huge", "state"] == "rejected" and j.loc["big-task", "state"] == "rejected"
    assert j.loc["ok", "jct_s"] == 10
    assert r.summary["rejected"] == 2 and r.summary["finished"] == 1


def test_blocking_fifo_versus_backfill():
    jobs = [job_from_row(dict(job_id="a", submit_time_s=0, workers=10, duration_s=100)),
            job_from_row(dict(job_id="b", submit_time_s=1, workers=4, duration_s=100)),
            job_from_row(dict(job_id="c", submit_time_s=2, workers=2, duration_s=10))]
    strict = dlsched.simulate("seed002", jobs, "fifo-gang").jobs.set_index("job_id")
    back = dlsched.simulate("seed002", jobs, "fifo-backfill").jobs.set_index("job_id")
    # a holds 10 GPUs until t=100; b (4) does not fit the 2 left; strict c waits behind b.
    assert strict.loc["c", "first_start_s"] == 100
    assert back.loc["c", "first_start_s"] == 2       # fills the 2 free GPUs


def test_node_failure_requeues_and_resumes_elsewhere():
    jobs = [job_from_row(dict(job_id="a", submit_time_s=0, workers=2, duration_s=100))]
    r = dlsched.simulate("seed002", jobs, "fifo", node_events=[(40, 0, False)], restart_delay_s=30)
    j = r.jobs.set_index("job_id").loc["a"]
    # 40 s done on node 0, then restarts on node 1 at t=40, 30 s restore, 60 s left -> t=130.
    assert j.finish_s == pytest.approx(130) and j.preemptions == 1
    kinds = [e[1] for e in r.events]
    assert "node_down" in kinds and "stop" in kinds


def test_colocation_rejects_a_job_no_server_can_hold_and_places_the_rest_on_one_node():
    jobs = [job_from_row(dict(job_id="big", submit_time_s=0, workers=6, duration_s=10)),
            job_from_row(dict(job_id="ok", submit_time_s=1, workers=3, duration_s=10))]
    r = dlsched.simulate("seed002", jobs, "co-location")
    j = r.jobs.set_index("job_id")
    assert j.loc["big", "state"] == "rejected" and j.loc["ok", "state"] == "done"
    takes = [d for _, k, jid, d in r.events if k == "take" and jid == "ok"]
    assert len({x.split("@")[1] for x in takes[0].split(";")}) == 1
