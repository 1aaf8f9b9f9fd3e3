"""Gandiva's reactive placement (Xiao et al., OSDI 2018; seed 001 Algorithm 1 getNodes): one
scenario per branch (nodes, jobs, expected placements), over-subscription and its cost, and
max_load on random workloads."""
import numpy as np
import pytest

import dlsched
import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.core.errors import ConfigError
from dlsched.core.types import Launch, Resume
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.scheduler.framework import build
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row


def cluster(nodes, gpus):
    return cluster_from_dict({"node_groups": [{"count": nodes, "gpus": gpus, "gpu_mem_gb": 32,
                                               "cpus": 32, "mem_gb": 128}]})


def job(job_id, t, workers, gpw=1, duration=1000.0, **kw):
    return job_from_row(dict(job_id=job_id, submit_time_s=t, workers=workers, gpus_per_worker=gpw,
                             duration_s=duration, **kw))


def no_oversubscription():
    return {"params": {"gandiva_place": {"oversubscribe": False}}}


class RecordingBackend(SimBackend):
    """SimBackend that checks the cluster's invariants after every plan and records the GPU
    slots each launch used and the highest GPU load seen."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.gpus_of: dict[str, list[tuple[int, int]]] = {}
        self.max_load = 0
        self.violations: list[str] = []

    def apply(self, plan):
        for d in plan.decisions:
            if isinstance(d, (Launch, Resume)):
                r = self.runs[d.job_id]
                if r.spec.kind == "dl" and len(d.placements) + len(r.placements) != len(r.tasks):
                    self.violations.append(f"gang broken for {d.job_id}")
                self.gpus_of[d.job_id] = [(tp.node, g) for tp in d.placements for g in tp.gpu_ids]
        super().apply(plan)
        self.max_load = max(self.max_load, int(self.state.gpu_load.max()))
        try:
            self.state.check()   # nothing over-allocated except GPUs
        except AssertionError as e:
            self.violations.append(str(e))


def run(cl, jobs, params=None):
    profile = build_profile("gandiva-reactive", params)
    backend = RecordingBackend(cl, jobs, restart_delay_s=0)
    sched = Scheduler(profile)
    sched.run(backend)
    return sched, backend


def nodes_of(backend, job_id):
    return [n for n, _ in backend.gpus_of[job_id]]


# -- one scenario per branch of Algorithm 1 -----------------------------------------------------
def test_unallocated_server_then_same_affinity():
    # 4 nodes x 4 GPUs. a (2 GPUs) opens node 0 (affinity 2). b (1 GPU): no node of affinity 1,
    # so an unallocated server, node 1 (first fit would put it next to a on node 0).
    # c (1 GPU): node 1 has affinity 1 and free GPUs -> node 1. d (2 GPUs): node 0, affinity 2.
    jobs = [job("a", 0, 2), job("b", 1, 1), job("c", 2, 1), job("d", 3, 2)]
    _, be = run(cluster(4, 4), jobs)
    assert nodes_of(be, "a") == [0, 0]
    assert nodes_of(be, "b") == [1]
    assert nodes_of(be, "c") == [1]
    assert nodes_of(be, "d") == [0, 0]
    assert be.max_load == 1 and be.violations == []


def test_same_affinity_prefers_the_least_loaded_node():
    # 3 nodes x 4 GPUs. a (1 GPU) -> node 0, b (2 GPUs) -> node 1, c (1 GPU) -> node 0
    # (affinity 1), d (2 GPUs) -> node 1 (affinity 2, now full), e (1 GPU) -> node 0 again.
    # f (1 GPU): node 0's load is 3/4 < 1, so it still has a free GPU: f goes there rather
    # than opening the unallocated node 2.
    jobs = [job("a", 0, 1), job("b", 1, 2), job("c", 2, 1), job("d", 3, 2), job("e", 4, 1), job("f", 5, 1)]
    _, be = run(cluster(3, 4), jobs)
    assert [nodes_of(be, j) for j in "abcdef"] == [[0], [1, 1], [0], [1, 1], [0], [0]]
    assert be.max_load == 1


def test_multi_node_job_on_unallocated_servers_uses_fewest_nodes():
    # 3 nodes x 4 GPUs; a (1 GPU) opens node 0. b (8 GPUs): nodes 1 and 2 are unallocated and
    # hold 8 GPUs -> b takes both whole, node 0 untouched.
    jobs = [job("a", 0, 1), job("b", 1, 8)]
    _, be = run(cluster(3, 4), jobs)
    assert sorted(nodes_of(be, "b")) == [1] * 4 + [2] * 4


def test_unallocated_servers_best_fit():
    # seed002: nodes 0, 1 have 4 GPUs, nodes 2, 3 have 2. A 2-GPU job takes the tightest
    # unallocated server that holds it (node 2), leaving the 4-GPU servers whole for b (4 GPUs).
    jobs = [job("a", 0, 2), job("b", 1, 4)]
    _, be = run(dlsched.cluster.load_cluster("seed002"), jobs)
    assert nodes_of(be, "a") == [2, 2]
    assert nodes_of(be, "b") == [0, 0, 0, 0]


def test_relaxed_affinity_when_no_unallocated_server_is_left():
    # 2 nodes x 4 GPUs. a (2 GPUs) -> node 0 (affinity 2); b (1 GPU) -> node 1 (affinity 1).
    # c (4 x 1 GPU, size 4): no node of affinity 4, no unallocated server; nodes with free GPUs:
    # node 0 (2 free) and node 1 (3 free): no single node holds c, so most free GPUs first:
    # 3 workers on node 1, 1 on node 0.
    jobs = [job("a", 0, 2), job("b", 1, 1), job("c", 2, 4)]
    _, be = run(cluster(2, 4), jobs)
    assert nodes_of(be, "c") == [1, 1, 1, 0]
    assert be.max_load == 1


def test_relaxed_affinity_prefers_unallocated_servers_first():
    # Same as above with a third node: c (size 4) takes the unallocated node 2 instead.
    jobs = [job("a", 0, 2), job("b", 1, 1), job("c", 2, 4)]
    _, be = run(cluster(3, 4), jobs)
    assert nodes_of(be, "c") == [2, 2, 2, 2]


def full_cluster_jobs(model=None):
    # 2 nodes x 2 GPUs: a (2 GPUs) -> node 0; b, c (1 GPU each) -> node 1: the cluster is full.
    # d (2 GPUs): affinity-2 node 0 has load 1 -> over-subscribed onto node 0's 2 GPUs.
    # e, f (1 GPU): affinity-1 node 1, one on each of its GPUs (least loaded first).
    # g (1 GPU): every GPU of node 1 is at max_load = 2 -> g waits.
    kw = dict(model=model, iterations=2000) if model else dict(duration_s=1000)
    ids = ["a", "b", "c", "d", "e", "f", "g"]
    sizes = [2, 1, 1, 2, 1, 1, 1]
    return [job_from_row(dict(job_id=j, submit_time_s=i, workers=1, gpus_per_worker=s, **kw))
            for i, (j, s) in enumerate(zip(ids, sizes))]


def test_oversubscription_when_the_cluster_is_full():
    sched, be = run(cluster(2, 2), full_cluster_jobs())
    assert be.gpus_of["a"] == [(0, 0), (0, 1)]
    assert be.gpus_of["d"] == [(0, 0), (0, 1)]          # the same GPUs as a: time-shared
    assert sorted(be.gpus_of["b"] + be.gpus_of["c"]) == [(1, 0), (1, 1)]
    assert sorted(be.gpus_of["e"] + be.gpus_of["f"]) == [(1, 0), (1, 1)]
    assert be.max_load == 2 and be.violations == []
    start = {j: r.first_start_s for j, r in sched.jobs.items()}
    assert start["d"] == 3 and start["e"] == 4 and start["f"] == 5   # no waiting
    assert start["g"] > 6                                             # max_load reached: queued


def test_oversubscribed_jobs_run_slower_than_alone():
    # d shares a's GPUs: both progress at the simulator's interference factor while they overlap.
    cl = cluster(2, 2)
    shared = dlsched.simulate(cl, full_cluster_jobs("resnet50"), "gandiva-reactive",
                              restart_delay_s=0).jobs.set_index("job_id")
    alone = dlsched.simulate(cl, full_cluster_jobs("resnet50")[3:4], "gandiva-reactive",
                             restart_delay_s=0).jobs.set_index("job_id")
    assert shared.loc["d", "first_start_s"] == 3
    assert shared.loc["d", "run_s"] > 1.2 * alone.loc["d", "run_s"]
    assert shared.loc["a", "run_s"] > alone.loc["d", "run_s"]           # a was slowed by d too


def test_without_oversubscription_the_job_queues():
    sched, be = run(cluster(2, 2), full_cluster_jobs(), no_oversubscription())
    assert be.max_load == 1
    start = {j: r.first_start_s for j, r in sched.jobs.items()}
    finish = {j: r.finish_s for j, r in sched.jobs.items()}
    # d waits for a's 2 GPUs (a ends at 1000); e and f wait for b and c (1001, 1002).
    assert start["d"] == finish["a"] == 1000
    assert sorted([start["e"], start["f"]]) == [finish["b"], finish["c"]]
    assert all(r.finish_s is not None for r in sched.jobs.values())


def test_oversubscription_keeps_cpu_and_memory_within_capacity():
    # Node: 2 GPUs, 4 CPUs. a takes 2 GPUs and 3 CPUs; b (2 GPUs, 2 CPUs) could share a's GPUs
    # but there is 1 CPU left, so b waits instead of over-allocating CPUs.
    cl = cluster_from_dict({"node_groups": [{"count": 1, "gpus": 2, "gpu_mem_gb": 32, "cpus": 4, "mem_gb": 64}]})
    jobs = [job("a", 0, 1, gpw=2, cpus_per_worker=3), job("b", 1, 1, gpw=2, cpus_per_worker=2)]
    sched, be = run(cl, jobs)
    assert be.max_load == 1 and be.violations == []
    assert sched.jobs["b"].first_start_s == sched.jobs["a"].finish_s


def test_parameter_servers_go_with_the_workers():
    jobs = [job_from_row(dict(job_id="p", submit_time_s=0, workers=2, ps=1, comm="ps", duration_s=10))]
    _, be = run(cluster(2, 4), jobs)
    take = [e for e in be.log if e[1] == "take" and e[2] == "p"][0]
    assert take[3] == "0@0;1@0;2@0"


def test_max_load_is_validated():
    with pytest.raises(ConfigError):
        build("place", "gandiva_place", {"max_load": 0}, "policies.x")
    with pytest.raises(ConfigError):
        build("place", "gandiva_place", {"oversubscribe": "yes"}, "policies.x")


# -- random workloads ----------------------------------------------------------------------------
def random_jobs(seed, n=30):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        kind = "tasks" if rng.random() < 0.2 else "dl"
        row = dict(job_id=f"j{i}", submit_time_s=float(rng.uniform(0, 300)), kind=kind,
                   workers=int(rng.integers(1, 5)), gpus_per_worker=int(rng.choice([0, 1, 1, 2])),
                   cpus_per_worker=int(rng.choice([1, 4, 8])), duration_s=float(rng.uniform(10, 400)))
        if kind == "dl" and rng.random() < 0.5:
            row.pop("duration_s")
            row.update(model=str(rng.choice(["resnet50", "bert", "vgg16"])), iterations=float(rng.uniform(100, 3000)))
        out.append(job_from_row(row))
    return out


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("max_load", [1, 2, 3])
def test_no_gpu_ever_exceeds_max_load(seed, max_load):
    params = {"params": {"gandiva_place": {"max_load": max_load}}}
    sched, be = run(dlsched.cluster.load_cluster("seed002"), random_jobs(seed), params)
    assert be.violations == []
    assert be.max_load <= max_load
    assert all(r.finish_s is not None or r.reject_reason for r in sched.jobs.values())
    # Nothing is held at the end.
    assert (be.state.free == be.cluster.capacity).all() and (be.state.gpu_load <= 0).all()


def test_random_workloads_do_oversubscribe():
    # The max_load test above is not vacuous: some of its workloads share GPUs.
    loads = [run(dlsched.cluster.load_cluster("seed002"), random_jobs(s))[1].max_load for s in range(8)]
    assert max(loads) == 2
