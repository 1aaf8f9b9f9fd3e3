"""Gandiva's introspective mechanisms (Xiao et al., OSDI 2018; seed 001): the packing model
(Table 1), the simulator's switch costs, intra-server affinity groups, and one scenario per
mechanism (time slicing, packing kept / undone, migration to freed GPUs, defragmentation,
grow-shrink). Expected values are worked out in the comments."""
import pytest

import dlsched
import dlsched.metrics
import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict, load_cluster
from dlsched.core.errors import ConfigError
from dlsched.core.types import Launch, Plan, Resume, Suspend, TaskPlacement
from dlsched.policies.actions import gandiva_common as gc
from dlsched.policies.actions.gandiva_pack import GandivaPack
from dlsched.scheduler import events as ev
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim.backend import SimBackend
from dlsched.workload import packing
from dlsched.workload.schema import job_from_row
from dlsched.workload.speed import SpeedModel


# -- the packing model (Table 1) -----------------------------------------------------------------
@pytest.mark.parametrize("models, factor", [
    # c_VAE = 81.8 / 419.3 = 0.19509: two VAEs need 0.39 of the GPU -> both at full speed.
    (["vae", "vae"], 1.0),
    # c_ResNet-50 = 10.3 / 9.0 = 1.14444; two: 2.28889 -> 0.43689 each, aggregate 0.87379 = 9.0 / 10.3.
    (["resnet50", "resnet50"], 9.0 / 10.3 / 2),
    # six VAEs: 6 x 0.19509 = 1.17054 -> 0.85431 each, aggregate 5.1259 = 419.3 / 81.8 (Table 1's max).
    (["vae"] * 6, 419.3 / 81.8 / 6),
    # VAE + ResNet-50: 0.19509 + 1.14444 = 1.33953 -> 0.74653 each.
    (["vae", "resnet50"], 1 / (81.8 / 419.3 + 10.3 / 9.0)),
    # mobilenet is not in Table 1: c = u / 0.9 = 0.5 / 0.9; two -> 1.1111 -> 0.9 each.
    (["mobilenet", "mobilenet"], 0.9),
    # an unknown model costs a whole GPU: two -> 0.5 each (no better than time slicing).
    (["nosuchmodel", None], 0.5),
    (["lstm"], 1.0),     # alone: never slower than solo
])
def test_packed_factor(models, factor):
    assert packing.packed_factor(models) == pytest.approx(factor, rel=1e-9)


def test_table1_gains_are_the_published_ratios():
    for model, (_, ts, pk, gain) in packing.TABLE1.items():
        assert 100 * (packing.packing_gain(model) - 1) == pytest.approx(gain, abs=1.0)
    assert packing.gpu_util("vae") == pytest.approx(0.087)
    assert packing.gpu_util("mobilenet") == pytest.approx(0.5)   # from the zoo


def test_switch_cost_arithmetic():
    c = packing.SwitchCost()
    # ResNet-50: 3 x 102.2 MB = 306.6 MB; 80 Gbps = 1e10 B/s -> 0.03066 s + 0.5 s fixed.
    assert packing.checkpoint_bytes("resnet50") == pytest.approx(306.6e6)
    assert c.copy_s("resnet50") == pytest.approx(0.53066)
    # Over a 10 Gbps NIC (1.25e9 B/s): 0.24528 s.
    assert c.transfer_s("resnet50", 10.0) == pytest.approx(0.24528)
    with pytest.raises(ValueError):
        packing.SwitchCost(host_gbps=0)


# -- the simulator charges costed decisions ------------------------------------------------------
def _drive(b, t):
    b.wake_at(t)
    while True:
        out = b.poll()
        if b.now() >= t or out is None:
            return out


def _one(plan_items):
    p = Plan()
    for d in plan_items:
        p.add(d)
    return p


def test_costed_suspend_finishes_the_minibatch_and_delays_the_next_job():
    # resnet50, batch 64 on a V100: 15 ms + 64 x 1.9 ms = 136.6 ms per iteration.
    it = 0.1366
    cost = packing.SwitchCost()
    jobs = [job_from_row(dict(job_id=j, submit_time_s=0, model="resnet50", batch_size=64, iterations=1000))
            for j in ("a", "b")]
    b = SimBackend(load_cluster("seed002"), jobs, restart_delay_s=30)
    b.poll()
    b.apply(_one([Launch("a", (TaskPlacement(0, 0, (0,)),))]))
    _drive(b, 10.05)
    # At 10.05 s a has done 10.05 / 0.1366 = 73.5725 iterations; it finishes the 74th first
    # (w = 0.4275 x 0.1366 = 0.0584 s), then copies 0.53066 s: GPU 0 is busy until 10.6391.
    b.apply(_one([Suspend("a", cost=cost), Launch("b", (TaskPlacement(0, 0, (0,)),), cost=cost)]))
    assert b.runs["a"].remaining == pytest.approx(1000 - 74)
    busy = 10.05 + (74 - 10.05 / it) * it + cost.copy_s("resnet50")
    assert b.runs["b"].restart_until == pytest.approx(busy)
    _drive(b, 20.0)
    b.job_stats("b")                                          # brings b's lazy progress up to date
    assert b.runs["a"].remaining == pytest.approx(926)          # a suspended job's progress never moves
    assert b.runs["b"].remaining == pytest.approx(1000 - (20.0 - busy) / it)
    # a resumes on GPU 1 of the same node: restore 0.53066 s, no transfer, then 926 iterations.
    b.apply(_one([gc.Resume("a", (TaskPlacement(0, 0, (1,)),), cost=cost)]))
    out = []
    while (e := b.poll()) is not None:
        out += [x for x in e if isinstance(x, ev.JobFinish) and x.job_id == "a"]
        if out:
            break
    assert b.now() == pytest.approx(20.0 + cost.copy_s("resnet50") + 926 * it)
    st = b.job_stats("a")
    assert st["suspends"] == 1 and st["resumes"] == 1
    assert st["switch_lost_s"] == pytest.approx(cost.copy_s("resnet50"))   # its restore
    assert b.job_stats("b")["switch_lost_s"] == pytest.approx(busy - 10.05)  # waited for a's GPU


def test_costed_migration_moves_the_checkpoint():
    # a on node 0 migrates to node 2 at t=0.0 exactly on a mini-batch boundary (nothing to
    # finish): checkpoint 0.53066 + restart 5 + transfer over 10 Gbps 0.24528 + restore 0.53066.
    cost = packing.SwitchCost()
    job = job_from_row(dict(job_id="a", submit_time_s=0, model="resnet50", batch_size=64, iterations=100))
    b = SimBackend(load_cluster("seed002"), [job])
    b.poll()
    b.apply(_one([Launch("a", (TaskPlacement(0, 0, (0,)),))]))
    b.apply(_one([gc.Migrate("a", (TaskPlacement(0, 2, (0,)),), cost=cost)]))
    assert b.runs["a"].restart_until == pytest.approx(0.53066 + 5 + 0.24528 + 0.53066)


def test_plain_decisions_keep_restart_delay():
    job = job_from_row(dict(job_id="a", submit_time_s=0, workers=1, duration_s=100))
    b = SimBackend(load_cluster("seed002"), [job], restart_delay_s=30)
    b.poll()
    b.apply(_one([Launch("a", (TaskPlacement(0, 0, (0,)),))]))
    _drive(b, 10)
    b.apply(_one([Suspend("a")]))
    b.apply(_one([Resume("a", (TaskPlacement(0, 0, (0,)),))]))
    assert b.runs["a"].restart_until == pytest.approx(40)
    assert b.job_stats("a")["switch_lost_s"] == pytest.approx(30)


# -- intra-server affinity groups ----------------------------------------------------------------
def _grouped(groups=2):
    return cluster_from_dict({"node_groups": [{"count": 1, "gpus": 4, "gpus_per_group": groups, "gpu_type": "V100",
                                               "gpu_mem_gb": 32, "cpus": 32, "mem_gb": 256, "gpu_link_gbps": 100}]})


def test_a_two_gpu_job_across_groups_is_slower():
    # resnet50, global batch 64 on 2 V100: compute 15 + 32 x 1.9 = 75.8 ms; all-reduce moves
    # 2 x 1/2 x 102.2 MB = 102.2 MB over the GPU link (12.5 GB/s) = 8.176 ms, overlap 0.5:
    # within a group 75.8 + 8.176 - 4.088 = 79.888 ms; across (0.4 x the link) 20.44 ms:
    # 75.8 + 20.44 - 10.22 = 86.02 ms.
    job = job_from_row(dict(job_id="a", submit_time_s=0, workers=2, model="resnet50", batch_size=64, iterations=10))
    sm = SpeedModel(_grouped())
    same = sm.isolated_iter_time(job, (TaskPlacement(0, 0, (0,)), TaskPlacement(1, 0, (1,))))
    across = sm.isolated_iter_time(job, (TaskPlacement(0, 0, (0,)), TaskPlacement(1, 0, (2,))))
    assert same == pytest.approx(0.079888) and across == pytest.approx(0.08602)
    flat = SpeedModel(_grouped(0)).isolated_iter_time(job, (TaskPlacement(0, 0, (0,)), TaskPlacement(1, 0, (2,))))
    assert flat == pytest.approx(0.079888)           # no groups: every pair of GPUs alike


def test_affinity_groups_are_validated_and_used_for_picking():
    with pytest.raises(ConfigError, match="gpus_per_group"):
        cluster_from_dict({"node_groups": [{"count": 1, "gpus": 4, "gpus_per_group": 3, "gpu_mem_gb": 16,
                                            "cpus": 8, "mem_gb": 64}]})
    cl = _grouped()
    import numpy as np
    load = np.zeros((1, 4), dtype=np.int32)
    load[0, 1] = 1                                   # GPU 1 busy: group 0 has one free GPU
    assert gc.pick_gpus_affine(cl, load, 0, 2) == (2, 3)     # both in group 1, not (0, 2)
    assert gc.pick_gpus_affine(cl, load, 0, 1) == (0,)       # best fit: the group with one free
    assert gc.pick_gpus_affine(cl, load, 0, 1, prefer={1}) == (2,)
    assert gc.pick_gpus_affine(cl, load, 0, 4) is None


# -- scenarios -----------------------------------------------------------------------------------
def _cluster(nodes, gpus, mem=24):
    return cluster_from_dict({"node_groups": [{"count": nodes, "gpus": gpus, "gpu_type": "P40", "gpu_mem_gb": mem,
                                               "cpus": 32, "mem_gb": 256}]})


def _job(j, t, model="resnet50", work=3000.0, gpus=1, **kw):
    return job_from_row(dict(job_id=j, submit_time_s=t, workers=gpus, model=model, duration_s=work,
                             cpus_per_worker=2, mem_gb_per_worker=8, **kw))


def _run(cl, jobs, params=None, policy="gandiva"):
    sched = Scheduler(build_profile(policy, {"params": params} if params else None))
    be = SimBackend(cl, jobs)
    sched.run(be)
    res = dlsched.metrics.build_result(sched, be, policy=policy, cluster_name="c", workload_name="w")
    return res, sched, be


def _action(sched, cls):
    return next(a for a in (*sched.profile.actions, *sched.profile.placers) if isinstance(a, cls))


NO_GROW = {"gandiva_grow": {"enabled": False}}


def test_time_slicing_gives_a_late_job_a_turn_at_once():
    # 1 node x 2 GPUs: a and b run alone from 0. c arrives at 100: nothing is free, so it joins
    # the ring of a (fewest members, lowest GPU) whose quantum (60 s) is long over: a is
    # suspended at 100 and c starts at once (a finishes its mini-batch and copies out, c waits
    # for that: first progress within a second). b is never touched.
    res, sched, be = _run(_cluster(1, 2), [_job("a", 0), _job("b", 0), _job("c", 100)], NO_GROW)
    j = res.jobs.set_index("job_id")
    assert j.loc["c", "ttfp_s"] < 1.0
    assert j.loc["b", "suspends"] == 0 and j.loc["b", "jct_s"] == pytest.approx(3000)
    assert j.loc["a", "suspends"] >= 1 and j.loc["c", "suspends"] >= 1
    sus = [e for e in sched.log if e[1] == "suspend"]
    assert sus[0][:3] == (100.0, "suspend", "a")
    # Turns end on time, not at the next 60 s tick (180): c from 100 to 160 (the timeslice
    # asks for a round then), then a from 160 to 220.
    assert sus[1][:3] == (160.0, "suspend", "c")
    assert sus[2][:3] == (220.0, "suspend", "a")
    # Under FIFO c waits for a GPU until 3000.
    fifo = dlsched.simulate(_cluster(1, 2), [_job("a", 0), _job("b", 0), _job("c", 100)], "fifo").jobs.set_index("job_id")
    assert fifo.loc["c", "ttfp_s"] == pytest.approx(2900)


def test_time_slicing_respects_max_load():
    # 1 GPU, three jobs: with max_load 2 the third waits for a GPU (no ring of 3).
    res, sched, _ = _run(_cluster(1, 1), [_job("a", 0), _job("b", 1), _job("c", 2)],
                         {**NO_GROW, "gandiva_pack": {"enabled": False}})
    j = res.jobs.set_index("job_id")
    assert j.loc["c", "first_start_s"] > 3000      # after a or b finished
    assert j.loc["b", "ttfp_s"] < 100


def test_packing_is_kept_when_it_beats_time_slicing():
    # Two VAEs on one P40: time-sliced until each has had a turn alone (its solo rate measured),
    # then packed (both fit: 1 GB, 8.7 % each), profiled for 120 s and kept from the rates
    # measured: each runs at full speed packed (factor 1.0, aggregate 2), so they end together
    # at about 3000 s + the first turns, far below time slicing's ~6000 s.
    res, sched, _ = _run(_cluster(1, 1), [_job("a", 0, "vae"), _job("b", 1, "vae")], NO_GROW)
    pack = _action(sched, GandivaPack)
    assert [v for *_, v in pack.log] == ["pack", "kept"]
    assert pack.judged[0]["how"] == "measured" and pack.judged[0]["packed"] == pytest.approx(2.0)
    assert res.summary["makespan_s"] < 3200
    sliced, _, _ = _run(_cluster(1, 1), [_job("a", 0, "vae"), _job("b", 1, "vae")],
                        {**NO_GROW, "gandiva_pack": {"enabled": False}})
    assert sliced.summary["makespan_s"] > 5900


def test_packing_is_undone_when_it_loses():
    # Two ResNet-50s (94 % each) are never packed by default (max_util 1.0); with max_util raised
    # they are packed, run at 0.437 each for the 120 s window (aggregate 0.874 < time slicing's
    # 1 - 2 x 0.53066 / 60 = 0.982), and unpacked; the mix is not tried again.
    jobs = [_job("a", 0), _job("b", 1)]
    _, sched, _ = _run(_cluster(1, 1), jobs, NO_GROW)
    assert _action(sched, GandivaPack).log == []
    res, sched, _ = _run(_cluster(1, 1), jobs, {**NO_GROW, "gandiva_pack": {"max_util": 5.0}})
    log = _action(sched, GandivaPack).log
    assert [v for *_, v in log] == ["pack", "undone"]
    assert log[1][0] - log[0][0] == pytest.approx(120)
    assert res.summary["finished"] == 2


class _SlowWhenShared(SimBackend):
    """A backend whose measured rate of a job on a shared GPU is a third of the model's: what a
    profiler would see where packing interferes more than the packing model says."""

    def job_stats(self, job_id):
        st = super().job_stats(job_id)
        run = self.runs.get(job_id)
        if run is not None and any(self.state.gpu_load[tp.node, g] > 1
                                   for tp in run.placements.values() for g in tp.gpu_ids):
            st["rate"] = st["rate"] / 3.0
        return st


def test_packing_verdict_follows_the_measured_rates():
    # The same two VAEs (the packing model: kept). Measured at a third of their solo rate when
    # packed, the aggregate is 2/3 < time slicing's: the pack is undone, from the measurement.
    sched = Scheduler(build_profile("gandiva", {"params": NO_GROW}))
    sched.run(_SlowWhenShared(_cluster(1, 1), [_job("a", 0, "vae"), _job("b", 1, "vae")]))
    pack = _action(sched, GandivaPack)
    assert [v for *_, v in pack.log] == ["pack", "undone"]
    j = pack.judged[0]
    assert j["how"] == "measured" and j["packed"] == pytest.approx(2 / 3, rel=1e-6) and j["packed"] < j["sliced"]


def test_time_sliced_job_migrates_to_a_freed_gpu():
    # 1 node x 2 GPUs: a (long) and b (600 s) run; c joins a's ring at 100. When b ends at
    # 600 the parked one of a / c moves to the freed GPU (a Migrate, counted), and from then
    # on both run alone: no more suspensions.
    res, sched, be = _run(_cluster(1, 2), [_job("a", 0, work=5000), _job("b", 0, work=600), _job("c", 100, work=5000)],
                          NO_GROW)
    assert res.summary["migrations"] == 1
    sus = [e for e in sched.log if e[1] == "suspend"]
    assert all(t <= 600 for t, *_ in sus)
    mig = [e for e in sched.log if e[1] == "migrate"]
    assert mig[0][0] == 600.0 and mig[0][3] == "0@0"   # on node 0 (the only one), GPU freed by b


def test_defragmentation_gives_a_multi_gpu_job_one_server():
    # 2 nodes x 4 GPUs. x (3 GPUs) -> node 0; y (3 GPUs) -> node 1 (node 0 has 1 free);
    # s (1 GPU) -> node 0's last GPU. x ends at 1000: node 0 has 3 free + s, node 1 has 1 free.
    # z (4 GPUs) arrives at 1100: no node holds it whole; moving s to node 1 frees node 0.
    params = {**NO_GROW, "gandiva_migrate": {"min_run_s": 0.0}}
    jobs = [_job("x", 0, gpus=3, work=1000), _job("y", 1, gpus=3, work=9000), _job("s", 2, work=9000),
            _job("z", 1100, gpus=4, work=1000)]
    res, sched, _ = _run(_cluster(2, 4), jobs, params)
    launches = {e[2]: e[3] for e in sched.log if e[1] in ("launch", "migrate")}
    assert launches["z"] == "0@0;1@0;2@0;3@0"
    assert [e[2:4] for e in sched.log if e[1] == "migrate"] == [("s", "0@1")]
    # Without defragmentation z is spread over both servers.
    _, sched2, _ = _run(_cluster(2, 4), jobs, {**params, "gandiva_migrate": {"defrag": False}})
    z = [e[3] for e in sched2.log if e[1] == "launch" and e[2] == "z"][0]
    assert {p.split("@")[1] for p in z.split(";")} == {"0", "1"}


def test_grow_when_idle_and_shrink_when_a_job_arrives():
    # 1 node x 4 V100. a: resnet50, global batch 256, 1 worker: t(1) = 15 + 256 x 1.9 =
    # 501.4 ms; t(2) = 258.2 + 8.176 - 4.088 = 262.288 ms (1.91x >= 1.5); t(4) = 136.6 +
    # 12.264 - 6.132 = 142.732 ms (3.51x >= 1 + 0.5 x 3 = 2.5): a grows to 4 workers at the
    # first round after min_run_s (60 s here). b (1 GPU) arrives at 1000: a shrinks back to
    # its one worker in that round and b starts at once.
    cl = cluster_from_dict({"node_groups": [{"count": 1, "gpus": 4, "gpu_type": "V100", "gpu_mem_gb": 32,
                                             "cpus": 32, "mem_gb": 256}]})
    jobs = [job_from_row(dict(job_id="a", submit_time_s=0, model="resnet50", batch_size=256, iterations=20000,
                              cpus_per_worker=2, mem_gb_per_worker=8)),
            _job("b", 1000, work=100)]
    res, sched, be = _run(cl, jobs, {"gandiva_grow": {"min_run_s": 60.0}})
    resizes = [(e[0], e[3]) for e in sched.log if e[1] == "resize"]
    assert resizes[0] == (60.0, "0@0;1@0;2@0;3@0")
    assert resizes[1] == (1000.0, "0@0")
    assert res.jobs.set_index("job_id").loc["b", "first_start_s"] == 1000.0
    alone, _, _ = _run(cl, jobs[:1], {"gandiva_grow": {"enabled": False}})
    assert res.jobs.set_index("job_id").loc["a", "jct_s"] < 0.6 * alone.summary["mean_jct_s"]


def test_mechanisms_are_actions_any_profile_can_enable():
    # fifo-backfill's components plus time slicing: the late job gets a turn at once.
    from dlsched.scheduler.framework import ProfileSpec, REGISTRY, register_profile
    if "test-fifo-timeslice" not in REGISTRY.names("profile"):
        register_profile(ProfileSpec(name="test-fifo-timeslice", description="test",
                                     actions=("gandiva_timeslice",), gang=True, blocking=False, round_s=60.0))
    res, sched, _ = _run(_cluster(1, 1), [_job("a", 0), _job("b", 100)], policy="test-fifo-timeslice")
    assert res.jobs.set_index("job_id").loc["b", "ttfp_s"] < 1.0
    assert [e[1:3] for e in sched.log if e[1] == "suspend"][0] == ("suspend", "a")


def test_parameters_are_validated():
    from dlsched.scheduler.framework import build
    for kind, name, bad in [("action", "gandiva_timeslice", {"quantum_s": 0}),
                            ("action", "gandiva_timeslice", {"min_run_s": 100.0}),
                            ("action", "gandiva_pack", {"max_jobs": 1}),
                            ("action", "gandiva_grow", {"min_free_frac": 2.0}),
                            ("action", "gandiva_migrate", {"max_moves": -1})]:
        with pytest.raises(ConfigError):
            build(kind, name, bad, f"policies.x.{name}")


def test_same_seed_same_event_log_under_gandiva():
    from dlsched.workload.io import load_workload
    jobs = load_workload("sample", seed=3)
    a = dlsched.simulate("seed002", jobs, "gandiva", seed=3)
    b = dlsched.simulate("seed002", jobs, "gandiva", seed=3)
    assert a.events == b.events and a.decisions == b.decisions
    assert len(a.events) > 200


def test_gandiva_placement_keeps_a_job_in_one_affinity_group():
    # 1 node x 4 GPUs in groups {0, 1} and {2, 3}. a (1 GPU) takes GPU 0; b (two 1-GPU
    # workers) would get GPUs 1 and 2 by least load and lowest index (across the groups); in
    # one group it gets 2 and 3.
    class Recording(SimBackend):
        gpus: dict = {}

        def apply(self, plan):
            for d in plan.decisions:
                if isinstance(d, Launch):
                    self.gpus[d.job_id] = sorted(g for tp in d.placements for g in tp.gpu_ids)
            super().apply(plan)

    cl = cluster_from_dict({"node_groups": [{"count": 1, "gpus": 4, "gpus_per_group": 2, "gpu_type": "P40",
                                             "gpu_mem_gb": 24, "cpus": 32, "mem_gb": 256}]})
    be = Recording(cl, [_job("a", 0), _job("b", 1, gpus=2)])
    Scheduler(build_profile("gandiva", {"params": NO_GROW})).run(be)
    assert be.gpus == {"a": [0], "b": [2, 3]}
    flat = cluster_from_dict({"node_groups": [{"count": 1, "gpus": 4, "gpu_type": "P40",
                                               "gpu_mem_gb": 24, "cpus": 32, "mem_gb": 256}]})
    be = Recording(flat, [_job("a", 0), _job("b", 1, gpus=2)])
    be.gpus = {}
    Scheduler(build_profile("gandiva", {"params": NO_GROW})).run(be)
    assert be.gpus == {"a": [0], "b": [1, 2]}


def test_packed_jobs_count_their_gpu_once_and_run_at_the_packed_speed():
    # Two VAEs (duration 100 s each) packed on GPU 0: factor min(1, 1 / 0.39) = 1, so both run
    # at full speed and the GPU counts once in the effective GPUs (1/2 to each). A ResNet-50
    # packed beside a VAE runs at 1 / (0.19509 + 1.14444) = 0.74653.
    cl = _cluster(1, 1)
    jobs = [_job("a", 0, "vae", work=100), _job("b", 0, "vae", work=100), _job("c", 0, "resnet50", work=100)]
    b = SimBackend(cl, jobs)
    b.poll()
    b.apply(_one([Launch("a", (TaskPlacement(0, 0, (0,)),))]))
    b.apply(_one([Launch("b", (TaskPlacement(0, 0, (0,)),), packed=True)]))
    assert b.runs["a"].rate == 1.0 and b.runs["b"].rate == 1.0
    assert b.usage()[:2] == (1.0, 1.0)
    _drive(b, 50)
    assert b.effective_gpu_s() == pytest.approx(50.0)
    b.apply(_one([Suspend("b")]))
    b.apply(_one([Launch("c", (TaskPlacement(0, 0, (0,)),), packed=True)]))
    assert b.runs["c"].rate == pytest.approx(1 / (81.8 / 419.3 + 10.3 / 9.0))
    assert b.runs["a"].rate == pytest.approx(b.runs["c"].rate)
