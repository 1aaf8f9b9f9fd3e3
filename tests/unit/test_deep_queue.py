"""Deep queues (issue "Scale on a real network and under deep queues"): a job the free GPUs
certainly cannot take is refused without a placement attempt (`Placing._refuse`), with the
answer `place` would have given, word for word, and nothing else changed."""
from __future__ import annotations

import pytest

from dlsched import api
from dlsched.scheduler.placing import Placing


@pytest.mark.parametrize("policy", ["tiresias", "srtf", "drf", "fifo", "fifo-backfill", "tetris", "k8s-spread"])
@pytest.mark.parametrize("workload", ["poisson:jobs=300,rate=0.02", "liquid:jobs=300,rate=0.02"])
def test_a_refusal_is_what_place_would_say(monkeypatch, policy, workload):
    orig = Placing._refuse
    refused = []

    def checked(self, rec, ctx):
        out = orig(self, rec, ctx)
        if out is not None:
            st = out[0]
            before = (len(ctx.txn.decided), ctx.txn.free.copy() if hasattr(ctx.txn, "free") else None)
            again = self.place(rec, ctx)
            assert not again.ok and again.reasons == st.reasons, (rec.job_id, st.reasons, again.reasons)
            assert len(ctx.txn.decided) == before[0]
            refused.append(rec.job_id)
        return out

    monkeypatch.setattr(Placing, "_refuse", checked)
    res = api.simulate("v100-4", workload, policy, seed=1)
    assert len(res.jobs) > 0
    if policy != "fifo":                     # fifo blocks at its first waiting job
        assert refused, "the deep queue never refused a job"


def test_the_refusal_changes_no_result():
    """The same jobs table with and without the quick refusal."""
    fast = api.simulate("v100-4", "poisson:jobs=300,rate=0.02", "tiresias", seed=1).jobs
    orig = Placing._refuse
    try:
        Placing._refuse = lambda self, rec, ctx: None
        slow = api.simulate("v100-4", "poisson:jobs=300,rate=0.02", "tiresias", seed=1).jobs
    finally:
        Placing._refuse = orig
    assert fast.equals(slow)


@pytest.mark.parametrize("cluster,workload,params", [
    ("v100-4", "poisson:jobs=300,rate=0.02", None),
    ("v100-2", "liquid:jobs=200,rate=0.05", {"tiresias": {"thresholds": [600, 7200]}}),
])
def test_the_kept_order_is_the_order_keyed_every_round(monkeypatch, cluster, workload, params):
    """Tiresias's waiting keys kept between rounds (scheduler/kept_order.py): the same decisions
    and engine events as keying every waiting job every round, demotions and preemptions
    included (the second case demotes at 600 GPU-s)."""
    from dlsched.policies.order.tiresias import TiresiasOrder
    cfg = None if params is None else {"policies": {"tiresias": {"params": params}}}
    every = _kept_then_every(monkeypatch, cluster, workload, "tiresias", cfg,
                             TiresiasOrder, property(lambda self: False))
    assert any(r[1] == "suspend" for r in every.decisions) or params is None


def _kept_then_every(monkeypatch, cluster, workload, policy, cfg, order_cls, off):
    """Run `policy` with its kept order (checked to be used), then with `order_cls`'s
    waiting_keys_kept set to `off`: the same decisions and engine events. The second run."""
    from dlsched.scheduler import kept_order
    calls = []
    orig = kept_order.KeptOrder.ordered

    def counted(self, ctx):
        calls.append(len(self.new))
        return orig(self, ctx)
    monkeypatch.setattr(kept_order.KeptOrder, "ordered", counted)
    kept = api.simulate(cluster, workload, policy, seed=1, policy_config=cfg)
    assert calls, "the kept order was not used"
    monkeypatch.setattr(order_cls, "waiting_keys_kept", off)
    every = api.simulate(cluster, workload, policy, seed=1, policy_config=cfg)
    assert list(kept.decisions) == list(every.decisions)
    assert list(kept.events) == list(every.events)
    return every


@pytest.mark.parametrize("policy", ["srtf", "sjf"])
@pytest.mark.parametrize("cluster,workload", [("v100-4", "poisson:jobs=300,rate=0.02"),
                                              ("v100-2", "liquid:jobs=200,rate=0.05")])
def test_size_orders_kept_keys_are_the_keys_of_every_round(monkeypatch, policy, cluster, workload):
    """SRTF's and SJF's waiting keys kept between rounds (a waiting job that holds nothing
    attains nothing), with SRTF's quiet rule bisecting the kept queue: the same decisions and
    engine events as keying every waiting job every round (SRTF's preemptions included)."""
    from dlsched.policies.order.srtf import SizeOrder
    every = _kept_then_every(monkeypatch, cluster, workload, policy, None, SizeOrder, False)
    assert policy == "sjf" or any(r[1] == "suspend" for r in every.decisions)


@pytest.mark.parametrize("cluster,workload", [("v100-4", "poisson:jobs=400,rate=0.02"),
                                              ("v100-2", "liquid:jobs=200,rate=0.05")])
def test_srtf_walk_without_victims_is_quiet_until_an_event(monkeypatch, cluster, workload):
    """Preempt's walk that suspends nobody under an order whose running keys only fall (SRTF)
    counts as no walk for SRTF's quiet time (running jobs only move ahead in its order): the
    same decisions and engine events as waking at every meeting of keys, in fewer rounds."""
    from dlsched.policies.order.srtf import SizeOrder
    quiet = api.simulate(cluster, workload, "srtf", seed=1)
    monkeypatch.setattr(SizeOrder, "running_keys_fall", False)
    every = api.simulate(cluster, workload, "srtf", seed=1)
    assert any(r[1] == "suspend" for r in every.decisions)
    assert list(quiet.decisions) == list(every.decisions)
    assert list(quiet.events) == list(every.events)
    assert len(quiet.rounds) < len(every.rounds)


@pytest.mark.parametrize("policy,cluster,workload", [
    ("drf", "v100-4", "poisson:jobs=400,rate=0.02"),
    ("drf", "v100-2", "liquid:jobs=200,rate=0.05"),
    ("test-drf-preempt", "v100-4", "poisson:jobs=300,rate=0.02"),
])
def test_drf_kept_per_user_is_the_sorted_queue(monkeypatch, policy, cluster, workload):
    """DRF's queue kept per user (scheduler/user_order.py: users with equal shares merged, the
    progressive filling from a heap of the users' first jobs): the same decisions and engine
    events as keying and sorting the whole queue after every placement. With an action in
    the profile (`rec.key` kept for it) too."""
    from dlsched.policies.order.drf import DrfOrder
    from dlsched.scheduler import user_order
    from dlsched.scheduler.framework import REGISTRY, ProfileSpec, register_profile
    if policy not in REGISTRY.names("profile"):
        register_profile(ProfileSpec(name=policy, description="test", order="drf", filters=("fits",),
                                     actions=("preempt",), gang=True, blocking=False))
    merged = []
    orig = user_order.ByUser.ordered

    def counted(self, ctx):
        out = orig(self, ctx)
        merged.append(len(self.merged))
        return out
    monkeypatch.setattr(user_order.ByUser, "ordered", counted)
    kept = api.simulate(cluster, workload, policy, seed=1)
    assert merged, "the queue was not kept per user"
    assert any(merged) or workload.startswith("liquid"), "no round had users with equal shares"
    monkeypatch.setattr(DrfOrder, "key_per_user", False)
    every = api.simulate(cluster, workload, policy, seed=1)
    assert list(kept.decisions) == list(every.decisions)
    assert list(kept.events) == list(every.events)


@pytest.mark.parametrize("policy", ["fifo-backfill", "tiresias", "edf", "sjf", "volcano-gang", "drf", "tetris", "srtf"])
def test_a_loop_stopped_with_no_gpu_free_decides_and_explains_the_same(monkeypatch, policy):
    """Placing._stopped: once nothing left could start on the GPUs free (none free, or too few
    for every job left: dlsched.scheduler.refusal), the queue loop ends early (DRF's dynamic loop
    too). The same decisions and engine events, and every waiting job's "why" after every round
    word for word, as trying every job."""
    from dlsched.scheduler.core import Scheduler
    seen, stops = [], []
    orig_round, orig_stopped = Scheduler.round, Placing._stopped

    def round_(self, snap):
        plan = orig_round(self, snap)
        seen.append([(j, self.jobs[j].why) for j in self.queue_order])
        return plan

    def stopped(self, queue, start, ctx):
        out = orig_stopped(self, queue, start, ctx)
        stops.append(out)
        return out
    monkeypatch.setattr(Scheduler, "round", round_)
    monkeypatch.setattr(Placing, "_stopped", stopped)
    wl = "liquid:jobs=250,rate=0.05"
    fast = api.simulate("v100-2", wl, policy, seed=3)
    fast_why, seen[:] = list(seen), []
    assert any(stops), "the loop never stopped early"
    monkeypatch.setattr(Placing, "_stopped", lambda self, queue, start, ctx: False)
    slow = api.simulate("v100-2", wl, policy, seed=3)
    assert list(fast.decisions) == list(slow.decisions)
    assert list(fast.events) == list(slow.events)
    assert fast_why == seen


@pytest.mark.parametrize("mode", ["kueue", "kai", "volcano-capacity"])
def test_the_admission_walk_kept_answers_change_nothing(monkeypatch, tmp_path, mode):
    """The admission walk keeps view.fits's answer per (queue, request, priority) until the book
    changes (tenancy/view.py `fits_kept`): under a deep queue in queues over their quotas, the same
    decisions and engine events as asking every job."""
    import dataclasses
    from dlsched.tenancy import entitle
    from dlsched.tenancy.points import Entitlement
    from dlsched.workload.io import load_workload
    q = tmp_path / "q.yaml"
    q.write_text("queues:\n" + "".join(f"  - {{name: u{i}, quotas: {{gpu: {{nominal: 4}}}}}}\n" for i in range(4)))
    jobs = [dataclasses.replace(j, queue=j.user) for j in load_workload("poisson:jobs=80,rate=0.02,users=4", seed=1)]
    kept = api.simulate("v100-2", jobs, "tiresias", seed=1, queues=str(q), tenancy=mode)
    for cls in [Entitlement, *[c for c in vars(entitle).values() if isinstance(c, type)]]:
        monkeypatch.setattr(cls, "admits_by_request", False, raising=False)
    every = api.simulate("v100-2", jobs, "tiresias", seed=1, queues=str(q), tenancy=mode)
    assert list(kept.decisions) == list(every.decisions)
    assert list(kept.events) == list(every.events)
    assert kept.summary["mean_wait_s"] > 3600


def _oversubscribed(nodes: int, k: int):
    from dlsched.cluster import cluster_from_dict
    from dlsched.cluster.topology import preset_spec
    spec = preset_spec(f"v100-{nodes}")
    spec["rack_uplink_gbps"] = spec["rack_uplink_gbps"] / k
    return cluster_from_dict(spec)


def test_a_waiting_job_holds_a_small_run_that_reads_as_a_new_one():
    """A job that has arrived and never been placed is a `Waiting` in SimBackend.runs (a
    JobRun is made at its first decision): it reads as a new JobRun would, stats included, and
    the run's records are those of runs made whole at arrival."""
    from dlsched.cluster.topology import load_cluster
    from dlsched.scheduler.core import Scheduler, build_profile
    from dlsched.sim.backend import SimBackend
    from dlsched.sim.run import JobRun, Waiting
    from dlsched.workload.io import load_workload

    jobs = load_workload("poisson:jobs=200,rate=0.05", seed=2)
    seen = {}

    class Watch(SimBackend):
        def poll(self):
            out = super().poll()
            for jid, r in self.runs.items():
                if type(r) is Waiting:
                    seen[jid] = (self.job_stats(jid), r)
            return out

    b = Watch(load_cluster("v100-4"), jobs)
    s = Scheduler(build_profile("fifo", {}))
    s.run(b)
    assert len(seen) > 20, "no deep queue"
    fields = [f for f in JobRun.__dataclass_fields__ if f not in ("spec", "tasks", "remaining", "last_t", "k")]
    for jid, (stats, r) in seen.items():
        new = JobRun(r.spec, r.tasks, r.remaining, last_t=r.last_t, k=r.k)
        assert all(getattr(r, f) == getattr(new, f) for f in fields), jid
        assert stats["progress"] == 0.0 and stats["gpu_s"] == 0.0 and stats["rate"] == 0.0
    assert not any(type(r) is Waiting for r in b.runs.values())    # every job ran


@pytest.mark.parametrize("policy", ["fifo", "fifo-backfill", "edf", "k8s-spread"])
def test_a_static_orders_waiting_list_stays_in_key_order(monkeypatch, policy):
    """A static order's waiting list (a SortedKeyList) holds every waiting job once, in key
    order, after every round; the round's "why pending" order is that list."""
    from dlsched.scheduler.core import Scheduler
    orig, checked = Scheduler.round, []

    def round(self, snap):
        q = list(self.queue)
        assert self._static
        assert [r.key for r in q] == sorted(r.key for r in q)
        assert all(r.queued for r in q) and len({r.job_id for r in q}) == len(q)
        plan = orig(self, snap)
        assert self.queue_order[:len(q)] == tuple(r.job_id for r in q)
        checked.append(len(q))
        return plan

    monkeypatch.setattr(Scheduler, "round", round)
    api.simulate("v100-4", "poisson:jobs=300,rate=0.02", policy, seed=1)
    assert max(checked) > 20


def test_event_times_are_python_floats_on_an_oversubscribed_network():
    """Every record's time is a float, not a numpy float: a numpy time in a round record sent a
    1M-job run's rounds table through its per-record path (and its odd times into a dict)."""
    res = api.simulate(_oversubscribed(64, 8), "poisson:jobs=400,rate=0.05", "fifo", seed=1)
    assert {type(r[0]) for r in res.events} == {float}
    assert {type(r[0]) for r in res.decisions} == {float}
