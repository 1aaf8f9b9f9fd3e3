"""Tiresias's discretised 2D-LAS (Gu et al., NSDI 2019; Pollux's baseline, petuum/adaptdl
simulator/tiresias.py), the SRTF / SJF size oracles and the `preempt` action: queue indices at
the threshold boundaries, demotion -> preemption -> resume with progress kept, the starvation
guard, SRTF preempting where SJF does not, min_run_s against thrashing, no suspension for a job
that cannot use the room, and every job finishing.

Scenario clusters have no model on the jobs, so a job runs at rate 1 wherever it is placed: its
work is its duration_s, and JCTs can be worked out by hand. The `tiresias` profile runs rounds
only at multiples of 60 s, as Pollux's simulator (an arrival, finish or node event waits for the
next one); SRTF and SJF run a round at every event and every 60 s. A resume costs the backend's
restart delay of 30 s, a first launch nothing."""
import numpy as np
import pytest

import dlsched
import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict, load_cluster
from dlsched.core.errors import ConfigError
from dlsched.policies.order.srtf import packed_placement
from dlsched.policies.order.tiresias import TiresiasOrder
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.scheduler.framework import REGISTRY, build, params_of
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row
from dlsched.workload.speed import SpeedModel

ONE_NODE = {"node_groups": [{"count": 1, "gpus": 4, "gpu_mem_gb": 32, "cpus": 32, "mem_gb": 128}]}


def cluster(spec=ONE_NODE):
    return cluster_from_dict(spec)


def job(job_id, t, workers, duration, **kw):
    return job_from_row(dict(job_id=job_id, submit_time_s=t, workers=workers, duration_s=duration, **kw))


def config(policy, **params):
    return {"policies": {policy: {"params": params}}}


def table(res):
    """job_id -> (first start, finish, JCT, preemptions, GPU-seconds held)."""
    j = res.jobs.set_index("job_id")
    return {i: (r.first_start_s, r.finish_s, r.jct_s, int(r.preemptions), r.gpu_s) for i, r in j.iterrows()}


def runs(res, job_id):
    """(take, stop) time pairs of one job from the backend's log (stop None: it finished)."""
    out = []
    for t, kind, jid, _ in res.events:
        if jid != job_id:
            continue
        if kind == "take":
            out.append([t, None])
        elif kind == "stop":
            out[-1][1] = t
    return out


# -- registrations and parameters ----------------------------------------------------------------
def test_registered_names_and_defaults():
    assert {"tiresias", "srtf", "sjf"} <= set(REGISTRY.names("order"))
    assert {"tiresias", "srtf", "sjf"} <= set(REGISTRY.names("profile"))
    assert "preempt" in REGISTRY.names("action")
    # Pollux's simulator/tiresias.py: _queue_threshold = 3600 * 16, _solve_starvation = 0.
    assert params_of("order", "tiresias") == {"thresholds": [57600.0], "starve_factor": 0.0,
                                                "running_first": False}
    assert params_of("action", "preempt") == {"min_run_s": 0.0, "enabled": True}
    t = REGISTRY.get("profile", "tiresias")
    assert (t.order, t.actions, t.gang, t.blocking, t.round_s) == ("tiresias", ("preempt",), True, False, 60.0)
    assert (t.scores, t.event_rounds) == ((("most_free", 1.0),), False)   # Pollux's semantics
    s = REGISTRY.get("profile", "srtf")
    assert (s.order, s.actions, s.gang, s.blocking, s.round_s) == ("srtf", ("preempt",), True, False, 60.0)
    j = REGISTRY.get("profile", "sjf")
    assert (j.order, j.actions, j.gang, j.blocking) == ("sjf", (), True, False)


@pytest.mark.parametrize("params", [{"thresholds": [100.0, 50.0]}, {"thresholds": [0.0]},
                                    {"thresholds": ["x"]}, {"starve_factor": -1.0}])
def test_bad_tiresias_parameters_are_config_errors(params):
    with pytest.raises(ConfigError):
        build("order", "tiresias", params)


def test_bad_preempt_parameter_is_a_config_error():
    with pytest.raises(ConfigError):
        build("action", "preempt", {"min_run_s": -5.0})


# -- queue index --------------------------------------------------------------------------------
@pytest.mark.parametrize("service, queue", [
    # thresholds [3600, 7200]: queue = number of thresholds the service has reached (>=)
    (0.0, 0), (3599.9, 0), (3600.0, 1), (7199.9, 1), (7200.0, 2), (1e9, 2)])
def test_queue_index_at_threshold_boundaries(service, queue):
    assert TiresiasOrder(thresholds=[3600.0, 7200.0]).queue_of(service) == queue


@pytest.mark.parametrize("service, queue", [(0.0, 0), (57599.0, 0), (57600.0, 1), (1e7, 1)])
def test_default_two_queues_at_sixteen_gpu_hours(service, queue):
    assert TiresiasOrder().queue_of(service) == queue


def test_round_keys_waiting_jobs_by_attained_service():
    # Four 1-GPU jobs waiting with the attained GPU-seconds of an earlier run; the round's keys
    # are (queue, submit time, id): queue 0 for 0 and 3599.9, 1 for 3600, 2 for 7200.
    cl = cluster()
    jobs = [job(f"j{i}", i, 1, 100.0) for i in range(4)]
    sched = Scheduler(build_profile("tiresias", {"params": {"tiresias": {"thresholds": [3600.0, 7200.0]}}}))
    backend = SimBackend(cl, jobs)
    while len(sched.jobs) < 4:
        for e in backend.poll():
            sched.handle(e, backend)
    for jid, service in zip(["j0", "j1", "j2", "j3"], [7200.0, 3600.0, 3599.9, 0.0]):
        sched.jobs[jid].attained_gpu_s = service
    plan = sched.round(backend.snapshot())
    assert {j: sched.jobs[j].key for j in sched.jobs} == {
        "j0": (2, 0.0, "j0"), "j1": (1, 1.0, "j1"), "j2": (0, 2.0, "j2"), "j3": (0, 3.0, "j3")}
    # all four fit; they are launched in key order
    assert [d.job_id for d in plan.decisions] == ["j2", "j3", "j1", "j0"]


# -- demotion -> preemption -> resume --------------------------------------------------------
def test_demoted_long_job_is_preempted_by_new_short_job_and_resumes_with_its_progress():
    # 1 node x 4 GPUs, threshold 3500 GPU-s. L (4 GPUs, 3000 s of work) starts at 0.
    # S (4 GPUs, 600 s) arrives at 850: L has 4 x 850 = 3400 < 3500, both queue 0, FIFO -> L
    # keeps running. L crosses 3500 at 875; the next round (tick at 900) puts it in queue 1:
    # S preempts it at 900 and runs 900-1500 (JCT 650). L resumes at 1500, restores until 1530
    # and has 3000 - 900 = 2100 s left: finishes at 3630 (progress kept: 3000 + 600 + 30).
    # L holds its GPUs 0-900 and 1500-3630: 4 x 3030 = 12120 GPU-s.
    res = dlsched.simulate(cluster(), [job("L", 0, 4, 3000.0), job("S", 850, 4, 600.0)], "tiresias",
                           policy_config=config("tiresias", tiresias={"thresholds": [3500.0]}))
    t = table(res)
    assert t["S"] == pytest.approx((900.0, 1500.0, 650.0, 0, 2400.0))
    assert t["L"] == pytest.approx((0.0, 3630.0, 3630.0, 1, 12120.0))
    assert runs(res, "L") == [[0.0, 900.0], [1500.0, None]]
    assert res.summary["unfinished"] == 0


def test_without_preemption_the_short_job_waits():
    # Same jobs, preempt disabled: S waits for L (3000) and finishes at 3600.
    res = dlsched.simulate(cluster(), [job("L", 0, 4, 3000.0), job("S", 850, 4, 600.0)], "tiresias",
                           policy_config=config("tiresias", tiresias={"thresholds": [3500.0]},
                                                preempt={"enabled": False}))
    t = table(res)
    assert t["L"][1:4] == pytest.approx((3000.0, 3000.0, 0))
    assert t["S"][1:4] == pytest.approx((3600.0, 2750.0, 0))


# -- starvation guard --------------------------------------------------------------------------
def starvation_run(starve_factor):
    cl = cluster()
    jobs = [job("A", 0, 4, 700.0), job("B", 530, 4, 1000.0)]
    profile = build_profile("tiresias", {"params": {"tiresias": {"thresholds": [2000.0],
                                                                 "starve_factor": starve_factor}}})
    backend = SimBackend(cl, jobs)
    sched = Scheduler(profile)
    sched.run(backend)
    from dlsched.metrics import build_result
    return sched, build_result(sched, backend, policy="tiresias", cluster_name="one", workload_name="w")


def test_starvation_guard_promotes_a_waiting_job():
    # Threshold 2000 GPU-s, 1 node x 4 GPUs, rounds at multiples of 60 s. A (700 s) starts at 0
    # and crosses 2000 at 500; B arrives at 530 (queue 0) and preempts A (queue 1) at the round
    # at 540. A's last run: 540 s, 160 s left.
    # starve_factor 0.5: A is promoted when it has waited 270 s, at the first round from 810:
    # 840. B then has 4 x 300 = 1200 < 2000 (queue 0), A (queue 0 again, submitted first)
    # preempts B at 840, restores until 870 and finishes at 1030. B (300 s done) resumes at
    # the round at 1080, restores until 1110, finishes its 700 s at 1810 (JCT 1280).
    sched, res = starvation_run(0.5)
    t = table(res)
    assert sched.profile.order.promotions == {"A": 1}
    assert t["A"] == pytest.approx((0.0, 1030.0, 1030.0, 1, 4 * 730.0))
    assert t["B"] == pytest.approx((540.0, 1810.0, 1280.0, 1, 4 * 1030.0))
    assert runs(res, "A") == [[0.0, 540.0], [840.0, None]]


def test_no_starvation_guard_by_default():
    # starve_factor 0 (Pollux's default): A waits until B is demoted too (B crosses 2000 at
    # 1040; round at 1080), then FIFO in queue 1 puts A first: A resumes at 1080, restores
    # until 1110, finishes at 1270. B (540 s done) resumes at the round at 1320, restores until
    # 1350, ends at 1810.
    sched, res = starvation_run(0.0)
    t = table(res)
    assert sched.profile.order.promotions == {}
    assert t["A"] == pytest.approx((0.0, 1270.0, 1270.0, 1, 4 * 730.0))
    assert t["B"] == pytest.approx((540.0, 1810.0, 1280.0, 1, 4 * 1030.0))
    assert runs(res, "A") == [[0.0, 540.0], [1080.0, None]]


# -- SRTF and SJF ----------------------------------------------------------------------------------
def test_srtf_preempts_a_long_job_for_a_short_one():
    # L (4 GPUs, 1000 s) at 0; S (4 GPUs, 100 s) at 200. At 200: L has 4 x 1000 - 4 x 200 =
    # 3200 GPU-s left, S 400 -> S preempts L at once, runs 200-300. L resumes at 300, restores
    # until 330, has 800 s left: finishes at 1130.
    res = dlsched.simulate(cluster(), [job("L", 0, 4, 1000.0), job("S", 200, 4, 100.0)], "srtf")
    t = table(res)
    assert t["S"] == pytest.approx((200.0, 300.0, 100.0, 0, 400.0))
    assert t["L"] == pytest.approx((0.0, 1130.0, 1130.0, 1, 4 * 1030.0))


def test_sjf_does_not_preempt():
    # Same jobs under SJF: S waits for L to finish at 1000 and runs 1000-1100.
    res = dlsched.simulate(cluster(), [job("L", 0, 4, 1000.0), job("S", 200, 4, 100.0)], "sjf")
    t = table(res)
    assert t["L"] == pytest.approx((0.0, 1000.0, 1000.0, 0, 4000.0))
    assert t["S"] == pytest.approx((1000.0, 1100.0, 900.0, 0, 400.0))


def test_sjf_orders_waiting_jobs_by_total_work():
    # B (4 GPUs x 500 s = 2000 GPU-s) blocks the node; C (4 x 300 = 1200) and D (2 x 400 = 800)
    # arrive while it runs: SJF runs D first at 500 (2 GPUs), then C needs all 4 -> after D (900).
    jobs = [job("B", 0, 4, 500.0), job("C", 10, 4, 300.0), job("D", 20, 2, 400.0)]
    t = table(dlsched.simulate(cluster(), jobs, "sjf"))
    assert t["D"][0] == pytest.approx(500.0) and t["C"][0] == pytest.approx(900.0)


def test_work_estimate_uses_the_isolated_iteration_time_on_a_packed_placement():
    cl = load_cluster("seed002")   # 2 nodes x 4 V100 + 2 nodes x 2 V100
    spec = job_from_row(dict(job_id="m", submit_time_s=0, workers=6, model="resnet50", batch_size=192,
                             iterations=1000))
    placed = packed_placement(spec, cl)
    assert [tp.node for tp in placed] == [0, 0, 0, 0, 1, 1]
    assert [tp.gpu_ids for tp in placed] == [(0,), (1,), (2,), (3,), (0,), (1,)]
    expected = 1000 * SpeedModel(cl).isolated_iter_time(spec, placed) * 6
    order = build("order", "srtf")
    assert order.work.estimate(spec, cl) == pytest.approx(expected)
    assert order.work.estimate(job("t", 0, 2, 300.0), cl) == pytest.approx(600.0)   # duration x GPUs


# -- the preempt action ------------------------------------------------------------------------
def test_min_run_s_prevents_thrashing():
    # Thresholds every 400 GPU-s: two equal 4-GPU jobs take turns each time the running one
    # crosses a threshold (every 100 s of running, noticed at the next 60 s tick): with
    # min_run_s = 0 they swap every 120 s. min_run_s = 600: each run lasts at least 600 s.
    # A: 0-600, B: 600-1200 (first launch), A: 1200-1800, B: 1800-2400, A: 2400 -> 2430 restore,
    # 330 s left -> 2760; B resumes at 2760 -> 2790, 330 s left -> 3120.
    ths = [400.0 * k for k in range(1, 50)]
    jobs = [job("A", 0, 4, 1500.0), job("B", 10, 4, 1500.0)]
    thrash = dlsched.simulate(cluster(), jobs, "tiresias",
                              policy_config=config("tiresias", tiresias={"thresholds": ths}))
    calm = dlsched.simulate(cluster(), jobs, "tiresias",
                            policy_config=config("tiresias", tiresias={"thresholds": ths},
                                                 preempt={"min_run_s": 600.0}))
    assert thrash.summary["preemptions"] >= 20
    t = table(calm)
    assert t["A"] == pytest.approx((0.0, 2760.0, 2760.0, 2, 4 * 1560.0))
    assert t["B"] == pytest.approx((600.0, 3120.0, 3110.0, 2, 4 * 1560.0))
    for jid in ("A", "B"):
        assert all(stop - take >= 600.0 - 1e-9 for take, stop in runs(calm, jid) if stop is not None)
    assert thrash.summary["unfinished"] == calm.summary["unfinished"] == 0


def test_min_run_s_above_the_restart_delay_keeps_the_starvation_guard_making_progress():
    # Thresholds 100 / 1000 GPU-s, starve_factor 2, restart delay 300 s: a resumed 4-GPU job
    # crosses a threshold while it restores and the guard promotes the other one back, so runs
    # would end before any training (a livelock, see tiresias.py). With min_run_s = 400 > 300
    # every run trains for at least 100 s and both jobs finish.
    jobs = [job("A", 0, 4, 1000.0), job("B", 10, 4, 1000.0)]
    res = dlsched.simulate(cluster(), jobs, "tiresias", restart_delay_s=300.0,
                           policy_config=config("tiresias", tiresias={"thresholds": [100.0, 1000.0],
                                                                      "starve_factor": 2.0},
                                                preempt={"min_run_s": 400.0}))
    assert res.summary["finished"] == 2 and res.summary["preemptions"] >= 2
    for jid in ("A", "B"):
        assert all(stop - take >= 400.0 - 1e-9 for take, stop in runs(res, jid) if stop is not None)


def test_no_job_is_suspended_for_a_job_that_cannot_use_the_room():
    # Node 0: 2 V100, node 1: 2 T4. Q (2 GPUs, 1000 s) takes node 0, R (2 GPUs, 5000 s) node 1.
    # W (2 GPUs, must be V100, 2000 s) arrives at 10. SRTF by GPU count would keep Q and W and
    # suspend R (Q 1980 < W 4000 < R 9980 GPU-s left), but W cannot use R's T4s: R keeps
    # running; W starts when Q ends (1000) and finishes at 3000.
    spec = {"node_groups": [
        {"count": 1, "gpus": 2, "gpu_type": "V100", "gpu_mem_gb": 32, "cpus": 32, "mem_gb": 128},
        {"count": 1, "gpus": 2, "gpu_type": "T4", "gpu_mem_gb": 16, "cpus": 32, "mem_gb": 128}]}
    jobs = [job("Q", 0, 2, 1000.0), job("R", 0, 2, 5000.0), job("W", 10, 2, 2000.0, gpu_type="V100")]
    t = table(dlsched.simulate(cluster(spec), jobs, "srtf"))
    assert t["R"] == pytest.approx((0.0, 5000.0, 5000.0, 0, 10000.0))
    assert t["W"] == pytest.approx((1000.0, 3000.0, 2990.0, 0, 4000.0))


def test_node_failure_stop_is_not_mistaken_for_a_run_of_the_order():
    # The only node fails at 100 and comes back at 400: L is stopped (not by a Suspend of the
    # plan) and resumed at the next round, 420 (restore until 450), finishing its 900 s left
    # at 1350.
    res = dlsched.simulate(cluster(), [job("L", 0, 4, 1000.0)], "tiresias",
                           node_events=[(100.0, 0, False), (400.0, 0, True)])
    t = table(res)
    assert t["L"][1:4] == pytest.approx((1350.0, 1350.0, 1))


@pytest.mark.parametrize("policy", ["tiresias", "srtf", "sjf"])
def test_every_job_finishes_on_a_random_workload(policy):
    # 60 gang jobs of 1-8 workers x 1-2 GPUs (some with a model), arriving over 3000 s on seed002
    # (12 GPUs), with low thresholds so that Tiresias demotes and preempts often.
    rng = np.random.default_rng(7)
    jobs = []
    for i in range(60):
        row = dict(job_id=f"r{i}", submit_time_s=float(rng.uniform(0, 3000)), workers=int(rng.integers(1, 7)),
                   gpus_per_worker=int(rng.integers(1, 3)))
        if rng.random() < 0.3:
            row.update(model=str(rng.choice(["resnet50", "bert", "ncf"])), iterations=float(rng.integers(50, 500)))
        else:
            row.update(duration_s=float(rng.uniform(30, 3000)))
        jobs.append(job_from_row(row))
    cfg = config("tiresias", tiresias={"thresholds": [1000.0, 5000.0], "starve_factor": 2.0}) \
        if policy == "tiresias" else None
    res = dlsched.simulate("seed002", jobs, policy, policy_config=cfg)
    assert res.summary["finished"] == 60 and res.summary["unfinished"] == 0
    if policy != "sjf":
        assert res.summary["preemptions"] > 0
    else:
        assert res.summary["preemptions"] == 0


def test_pollux_thresholds_on_a_model_workload_finish_and_preempt_deterministically():
    # A small Pollux-style workload (models, iterations) on the pollux preset: same result twice.
    jobs = [job_from_row(dict(job_id=f"p{i}", submit_time_s=30.0 * i, workers=w, model=m,
                              batch_size=b, iterations=it))
            for i, (w, m, b, it) in enumerate([(8, "cifar10", 1024, 4000), (4, "bert", 48, 300),
                                               (16, "imagenet", 3200, 2000), (2, "ncf", 1024, 3000),
                                               (32, "cifar10", 4096, 8000), (1, "deepspeech2", 20, 500)])]
    a = dlsched.simulate("pollux", jobs, "tiresias")
    b = dlsched.simulate("pollux", jobs, "tiresias")
    assert a.summary["unfinished"] == 0
    assert a.jobs.equals(b.jobs)
