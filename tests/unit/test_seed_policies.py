"""Tetris, the kube-scheduler resource-allocation scorer, Volcano gang and co-location: table tests
with scores worked out by hand, and scenarios (nodes, jobs, expected placements)."""
import numpy as np
import pytest

import dlsched
from dlsched.cluster import ClusterState, cluster_from_dict
from dlsched.core.errors import ConfigError
from dlsched.scheduler.core import RoundContext, Scheduler, build_profile
from dlsched.scheduler.framework import build
from dlsched.scheduler.transaction import Transaction
from dlsched.workload.schema import job_from_row

# Two nodes of 4 GPUs, 32 cores, 128 GB, 1000 MB/s, 10 Gbps.
NODE = {"gpus": 4, "gpu_type": "V100", "gpu_mem_gb": 16, "cpus": 32, "mem_gb": 128, "disk_mbps": 1000,
        "nic_gbps": 10}
CL = cluster_from_dict({"node_groups": [{"count": 2, **NODE}]})


def _ctx(free_rows):
    st = ClusterState(CL)
    st.free[:] = np.array(free_rows, dtype=float)
    snap = st.snapshot(0.0)
    return RoundContext(snap, Transaction(snap), 0.0, {}, [], np.random.default_rng(0),
                        Scheduler(build_profile("fifo")))


def _task(**kw):
    row = dict(job_id="t", submit_time_s=0, kind="tasks", duration_s=1, gpus_per_worker=0)
    row.update(kw)
    return job_from_row(row)


def test_tetris_cosine_table():
    # Node 0 free [4, 16, 32, 1000, 10] -> f = [1, .5, .25, 1, 1]; node 1 free [0, 30, 20, 100, 1]
    # -> f = [0, .9375, .15625, .1, .1]. Task <0 GPU, 8 cores, 8 GB> -> d = [0, .25, .0625, 0, 0].
    # node 0: d.f = .140625, |d| = .25769, |f| = 1.82003 -> cos = .29983
    # node 1: d.f = .24414, |f| = .96090 -> cos = .98596: the CPU-rich node is better aligned.
    ctx = _ctx([[4, 16, 32, 1000, 10], [0, 30, 20, 100, 1]])
    job = _task(cpus_per_worker=8, mem_gb_per_worker=8)
    s = build("score", "tetris").score(ctx, job, job.tasks[0], ctx.txn.free, np.array([0, 1]))
    assert s == pytest.approx([0.29983, 0.98596], abs=1e-4)


def test_resource_allocation_table():
    # Node free [2 GPU, 16 cores, 64 GB] of [4, 32, 128]; task <1 GPU, 4 cores, 16 GB>.
    # After placing, free fractions: GPU 1/4 = .25, CPU 12/32 = .375, mem 48/128 = .375.
    # least_allocated = (.25 + .375 + .375) / 3 = .3333; most_allocated = (.75 + .625 + .625) / 3 = .6667
    # {gpu: most, cpu: least} (mem default least) = (.75 + .375 + .375) / 3 = .5
    ctx = _ctx([[2, 16, 64, 1000, 10], [4, 32, 128, 1000, 10]])
    job = _task(gpus_per_worker=1, cpus_per_worker=4, mem_gb_per_worker=16)
    t, nodes = job.tasks[0], np.array([0])
    for strategy, want in (("least_allocated", 1 / 3), ("most_allocated", 2 / 3),
                           ({"gpu": "most_allocated", "cpu": "least_allocated"}, 0.5)):
        s = build("score", "resource_allocation", {"strategy": strategy}).score(ctx, job, t, ctx.txn.free, nodes)
        assert s[0] == pytest.approx(want)
    with pytest.raises(ConfigError, match="strategy"):
        build("score", "resource_allocation", {"strategy": "random"})
    with pytest.raises(ConfigError, match="weights.gpu"):
        build("score", "resource_allocation", {"weights": {"gpu": -1}})


def _placements(result, job_id):
    out = []
    for _, kind, jid, detail in result.events:
        if kind == "take" and jid == job_id:
            out += [int(x.split("@")[1]) for x in detail.split(";")]
    return out


def test_spread_vs_binpack_scenario():
    """seed002: nodes 0, 1 have 4 GPUs, nodes 2, 3 have 2 (each 40 cores, 256 GB); tasks ask
    1 GPU, 4 cores, 16 GB. Scores average GPU, CPU and memory after placing.
    spread, job a: a 4-GPU node keeps (.75 + .9 + .9375) / 3 = .8625 free, a 2-GPU node
      (.5 + .9 + .9375) / 3 = .779 -> node 0 (tie with node 1: lowest id).
    spread, job b: worker 0 -> node 1 (.8625, untouched); worker 1: nodes 0 and 1 now keep
      (.5 + .8 + .875) / 3 = .725, node 2 keeps .779 -> node 2.
    bin pack, job a: a 2-GPU node ends 1 - .779 = .221 allocated vs .1375 -> node 2.
    bin pack, job b: worker 0 -> node 2 (now full on GPUs: (1 + .2 + .125) / 3 = .4417);
      worker 1 -> node 3 (.221 beats the 4-GPU nodes' .1375)."""
    jobs = [job_from_row(dict(job_id="a", submit_time_s=0, workers=1, duration_s=100)),
            job_from_row(dict(job_id="b", submit_time_s=1, workers=2, duration_s=100))]
    spread = dlsched.simulate("seed002", jobs, "k8s-spread")
    pack = dlsched.simulate("seed002", jobs, "k8s-binpack")
    assert _placements(spread, "a") == [0] and _placements(spread, "b") == [1, 2]
    assert _placements(pack, "a") == [2] and _placements(pack, "b") == [2, 3]


def test_binpack_prefers_the_most_allocated_node():
    jobs = [job_from_row(dict(job_id="a", submit_time_s=0, workers=1, duration_s=100)),
            job_from_row(dict(job_id="b", submit_time_s=1, workers=1, duration_s=100))]
    pack = dlsched.simulate("seed002", jobs, "k8s-binpack")
    assert _placements(pack, "b") == _placements(pack, "a")          # onto the node already in use
    spread = dlsched.simulate("seed002", jobs, "k8s-spread")
    assert _placements(spread, "b") != _placements(spread, "a")      # onto an empty node


def test_volcano_gang_lets_later_jobs_pass_and_k8s_holds_partial_placements():
    jobs = [job_from_row(dict(job_id="a", submit_time_s=0, workers=10, duration_s=100)),
            job_from_row(dict(job_id="b", submit_time_s=1, workers=4, duration_s=100)),
            job_from_row(dict(job_id="c", submit_time_s=2, workers=2, duration_s=100))]
    gang = dlsched.simulate("seed002", jobs, "volcano-gang").jobs.set_index("job_id")
    assert gang.loc["b", "first_start_s"] == 100 and gang.loc["c", "first_start_s"] == 2
    k8s = dlsched.simulate("seed002", jobs, "k8s-binpack")
    # b grabs the 2 free GPUs at t=1 and waits for the rest: partial hold; c cannot start.
    assert k8s.summary["partial_hold_gpu_s"] > 0
    assert dlsched.simulate("seed002", jobs, "volcano-gang").summary["partial_hold_gpu_s"] == 0


def test_colocation_waits_for_one_server():
    jobs = [job_from_row(dict(job_id="a", submit_time_s=0, workers=2, duration_s=100)),
            job_from_row(dict(job_id="b", submit_time_s=1, workers=2, duration_s=100)),
            job_from_row(dict(job_id="c", submit_time_s=2, workers=4, duration_s=100))]
    r = dlsched.simulate("seed002", jobs, "co-location")
    j = r.jobs.set_index("job_id")
    # a, b bin-packed onto the 2-GPU servers (most allocated after placing), c gets a 4-GPU one.
    assert len(set(_placements(r, "c"))) == 1 and j.loc["c", "first_start_s"] == 2
    assert r.summary["nic_bytes"] == 0


def test_tetris_remaining_work_term_is_off_by_default_and_prefers_short_jobs_when_on():
    """One node, its 4 GPUs busy until t=100; then `long` (submitted first, 2 tasks x 400 s) and
    `short` (1 task x 50 s), all 4-GPU tasks, compete. With weight 0 (FIFO) long runs first
    (100..500, 500..900), short at 900; with weight 1 the job with less remaining work
    (4 x 50 GPU-s vs 4 x 800) goes first: short 100..150, then long from 150."""
    cl = cluster_from_dict({"node_groups": [{"count": 1, **NODE}]})
    row = dict(kind="tasks", gpus_per_worker=4, cpus_per_worker=1, mem_gb_per_worker=1)
    jobs = [job_from_row(dict(job_id="busy", submit_time_s=0, workers=1, duration_s=100, **row)),
            job_from_row(dict(job_id="long", submit_time_s=1, workers=2, duration_s=400, **row)),
            job_from_row(dict(job_id="short", submit_time_s=2, workers=1, duration_s=50, **row))]
    plain = dlsched.simulate(cl, jobs, "tetris").jobs.set_index("job_id")
    assert plain.loc["long", "first_start_s"] == 100 and plain.loc["short", "first_start_s"] == 900
    srpt = dlsched.simulate(cl, jobs, "tetris", policy_config={"policies": {"tetris": {
        "params": {"remaining_work": {"weight": 1.0}}}}}).jobs.set_index("job_id")
    assert srpt.loc["short", "first_start_s"] == 100 and srpt.loc["long", "first_start_s"] == 150
    with pytest.raises(ConfigError, match="weight must be"):
        build("order", "remaining_work", {"weight": 2.0})
