"""Liquid (seed 003): the network cost, the immediate best-fit scorer, and the group genetic
algorithm batch strategy with its arrival-rate switch."""
import time

import numpy as np
import pytest

import dlsched
import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict, load_cluster
from dlsched.core.errors import ConfigError
from dlsched.core.types import Launch, TaskPlacement
from dlsched.policies.actions.liquid_batch import LiquidBatch
from dlsched.policies.place.liquid import LiquidScorer, network_cost
from dlsched.scheduler.core import JobRecord, RoundContext, Scheduler, build_profile
from dlsched.scheduler.events import JobArrival
from dlsched.scheduler.framework import build
from dlsched.scheduler.transaction import Transaction
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row


def _job(job_id, t=0.0, **kw):
    row = dict(job_id=job_id, submit_time_s=t, model="resnet50", batch_size=64, iterations=100)
    row.update(kw)
    if "duration_s" in kw:
        row.pop("model"), row.pop("iterations"), row.pop("batch_size")
    return job_from_row(row)


def _placements(result, job_id):
    for _, kind, jid, detail in result.events:
        if kind == "take" and jid == job_id:
            return [int(x.split("@")[1]) for x in detail.split(";")]
    return None


# -- network cost --------------------------------------------------------------------------------
def test_cost_on_liquid_10_by_hand():
    # liquid-10: nodes 0-4 in rack 0, nodes 5-9 in rack 1, one domain of 10 nodes.
    nc = network_cost(load_cluster("liquid-10"))
    a = np.array([0, 0, 3, 0, 9, 5])
    b = np.array([0, 4, 1, 5, 2, 9])
    #              same node, same rack (5 nodes), same rack, cross rack (10 in the domain) x2, same rack
    assert nc.pair(a, b).tolist() == [0, 5, 5, 10, 10, 5]
    assert (nc.pair(a, b) == nc.pair(b, a)).all()
    assert nc.max_pair == 10


def test_cost_with_two_domains():
    cl = cluster_from_dict({"node_groups": [
        {"count": 4, "gpus": 2, "gpu_type": "T4", "gpu_mem_gb": 16, "cpus": 8, "mem_gb": 32,
         "nodes_per_rack": 2, "domain": "d0"},       # nodes 0-1 rack 0, nodes 2-3 rack 1
        {"count": 6, "gpus": 2, "gpu_type": "T4", "gpu_mem_gb": 16, "cpus": 8, "mem_gb": 32,
         "nodes_per_rack": 3, "domain": "d1"}]})     # nodes 4-6 rack 2, nodes 7-9 rack 3
    nc = network_cost(cl)
    pairs = {(0, 0): 0, (0, 1): 2,      # rack of 2 nodes
             (0, 2): 4, (3, 1): 4,      # across racks of d0: 4 nodes in the domain
             (4, 6): 3, (4, 7): 6,      # rack of 3; across racks of d1: 6 nodes
             (0, 9): 10, (7, 2): 10}    # across domains: the whole cluster (our extension)
    a, b = np.array(list(pairs)).T
    assert nc.pair(a, b).tolist() == list(pairs.values())
    assert nc.max_pair == 10
    # sum_to (counts by node / rack / domain) equals the brute-force sum of pair costs.
    rng = np.random.default_rng(0)
    partners = rng.integers(0, 10, size=7)
    cands = np.arange(10)
    brute = nc.pair(cands[:, None], partners[None, :]).sum(axis=1)
    assert np.allclose(nc.sum_to(cands, partners), brute)
    assert network_cost(cl) is nc     # cached per cluster


def test_max_pair_on_one_rack_and_one_node():
    assert network_cost(load_cluster("seed002")).max_pair == 4       # one rack of 4 nodes
    one = cluster_from_dict({"node_groups": [{"count": 1, "gpus": 2, "gpu_mem_gb": 16, "cpus": 8,
                                              "mem_gb": 32}]})
    assert network_cost(one).max_pair == 0


# -- immediate strategy: the scorer -------------------------------------------------------------
# Toy cluster: 2 nodes of 2 GPUs, each its own rack in one domain -> Cost(0, 1) = 2, Cmax = 2.
TOY = {"node_groups": [{"count": 2, "gpus": 2, "gpu_type": "T4", "gpu_mem_gb": 16, "cpus": 24,
                        "mem_gb": 96, "nodes_per_rack": 1}]}
PS_JOB = dict(workers=2, ps=1, comm="ps")         # tasks 0, 1 = workers (1 GPU), task 2 = PS (0 GPU)
AR_JOB = dict(workers=2, comm="allreduce")

# Each row: job, lam, reserved this round [(task, node)], held [(task, node)], task scored,
#           Liquid's S per node (smaller is better), the scorer's output per node.
# S = lam * Cost + (1 - lam) * Fitness, Fitness = -(ReqGPU + UsedGPU) / 2;
# score = (hi - S) / (hi - lo), lo = -(1 - lam), hi = lam * k * Cmax (k partners).
SCORE_TABLE = [
    # Nothing placed: Cost 0; Fitness -(1 + 0)/2 = -0.5 on both; S = 0.5 * -0.5 = -0.25.
    # lo = -0.5, hi = 0 -> score = 0.25 / 0.5 = 0.5 on both (tie: node 0).
    ("empty", PS_JOB, 0.5, [], [], 0, [-0.25, -0.25], [0.5, 0.5]),
    # PS reserved on node 1 (no GPU). Worker 0: node 0 Cost 2, Fit -0.5 -> S = 1 - 0.25 = 0.75;
    # node 1 Cost 0, Fit -0.5 -> S = -0.25. hi = 0.5 * 1 * 2 = 1 -> scores 0.25/1.5, 1.25/1.5.
    ("worker follows PS", PS_JOB, 0.5, [(2, 1)], [], 0, [0.75, -0.25], [1 / 6, 5 / 6]),
    # The same PS, held by the job from an earlier round instead of reserved now: same scores.
    ("held PS", PS_JOB, 0.5, [], [(2, 1)], 0, [0.75, -0.25], [1 / 6, 5 / 6]),
    # PS on node 1, worker 0 on node 0. Worker 1's partners are the PS only (workers do not talk
    # to workers in a PS job). Node 0: Cost 2, Fit -(1 + 1)/2 = -1 -> S = 1 - 0.5 = 0.5;
    # node 1: Cost 0, Fit -0.5 -> S = -0.25. Scores 0.5/1.5 = 1/3 and 5/6: the second worker
    # goes to the PS's node although node 0 is fuller.
    ("second worker prefers PS node", PS_JOB, 0.5, [(2, 1), (0, 0)], [], 1, [0.5, -0.25], [1 / 3, 5 / 6]),
    # Same state, lam = 0 (pure best fit): S = Fitness = -1 on node 0, -0.5 on node 1;
    # lo = -1, hi = 0 -> scores 1 and 0.5: node 0, the fuller one.
    ("lam 0 is best fit", PS_JOB, 0.0, [(2, 1), (0, 0)], [], 1, [-1.0, -0.5], [1.0, 0.5]),
    # Both workers on node 0; the PS (0 GPU) has 2 partners. Node 0: Cost 0, Fit -(0 + 2)/2 = -1
    # -> S = -0.5; node 1: Cost 2 + 2 = 4, Fit 0 -> S = 2. lo = -0.5, hi = 0.5 * 2 * 2 = 2
    # -> scores 2.5/2.5 = 1 and 0.
    ("PS joins its workers", PS_JOB, 0.5, [(0, 0), (1, 0)], [], 2, [-0.5, 2.0], [1.0, 0.0]),
    # All-reduce: worker 0 on node 1; worker 1's partner is worker 0. Node 0: Cost 2, Fit -0.5
    # -> S = 0.75; node 1: Cost 0, Fit -(1 + 1)/2 = -1 -> S = -0.5. hi = 1 -> 0.25/1.5, 1.5/1.5.
    ("all-reduce pair", AR_JOB, 0.5, [(0, 1)], [], 1, [0.75, -0.5], [1 / 6, 1.0]),
    # lam = 1 with no partner: S = 0 everywhere, hi = lo = 0 -> all ones.
    ("lam 1, nothing to compare", AR_JOB, 1.0, [], [], 0, [0.0, 0.0], [1.0, 1.0]),
]


def _toy_ctx(job, reserved, held):
    cl = cluster_from_dict(TOY)
    snap = SimBackend(cl, []).snapshot()
    txn = Transaction(snap)
    rec = JobRecord(job, job.tasks)
    for task, node in held:
        rec.placed[task] = TaskPlacement(task, node)
        txn.free[node] -= job.tasks[task].vector      # what the held task uses
    for task, node in reserved:
        txn.reserve(job.job_id, job.tasks[task], node)
    sched = Scheduler(build_profile("liquid-immediate"))
    return RoundContext(snap, txn, 0.0, {job.job_id: rec}, [rec], np.random.default_rng(0), sched)


@pytest.mark.parametrize("case, kind, lam, reserved, held, task, want_s, want_score",
                         SCORE_TABLE, ids=[r[0] for r in SCORE_TABLE])
def test_immediate_score_table(case, kind, lam, reserved, held, task, want_s, want_score):
    job = _job("j", **kind)
    ctx = _toy_ctx(job, reserved, held)
    scorer = LiquidScorer(lam=lam)
    nodes = np.arange(2)
    s, _ = scorer.raw(ctx, job, job.tasks[task], ctx.txn.free, nodes)
    score = scorer.score(ctx, job, job.tasks[task], ctx.txn.free, nodes)
    assert np.allclose(s, want_s) and np.allclose(score, want_score)
    # Liquid's argmin is the framework's argmax (both break ties to the lowest node id).
    assert int(np.argmax(score)) == int(np.argmin(s))


def test_lam_is_validated():
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(ConfigError, match="lam must be in"):
            build("score", "liquid", {"lam": bad})
        with pytest.raises(ConfigError, match="lam must be in"):
            build("place", "liquid_batch", {"lam": bad})
    with pytest.raises(ConfigError, match="expected float"):
        build("score", "liquid", {"lam": "high"})
    for key, bad in (("population", 1), ("mutation_rate", 2.0), ("window_s", 0.0), ("max_batch", 0)):
        with pytest.raises(ConfigError):
            build("place", "liquid_batch", {key: bad})


# -- immediate strategy: a scenario --------------------------------------------------------------
@pytest.mark.parametrize("policy", ["liquid-immediate", "liquid"])
def test_immediate_keeps_a_ps_job_together_where_first_fit_splits_it(policy):
    # liquid-10 (racks {0-4}, {5-9}, 2 GPUs and 24 CPUs a node). A 10-worker job takes every GPU
    # of rack 0 (both policies put it on nodes 0-4, two workers a node) but leaves CPU free.
    # Then a PS job (2 workers, 1 PS with no GPU) arrives. First fit puts the workers on node 5
    # and the PS on node 0, the first node with CPU - across racks. Liquid's best fit puts both
    # workers on node 5 (fullest node), then the PS where its Cost to them is 0: node 5 too.
    jobs = [_job("big", 0, workers=10, duration_s=1000),
            _job("p", 1, workers=2, ps=1, comm="ps")]
    ff = dlsched.simulate("liquid-10", jobs, "fifo-gang")
    assert _placements(ff, "big") == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert _placements(ff, "p") == [5, 5, 0]
    liq = dlsched.simulate("liquid-10", jobs, policy)
    assert _placements(liq, "big") == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert _placements(liq, "p") == [5, 5, 5]
    assert liq.summary["finished"] == 2
    # The split PS job sends its traffic across the rack uplink; the packed one sends none.
    assert ff.jobs.set_index("job_id").cross_rack_bytes["p"] > 0
    assert liq.jobs.set_index("job_id").cross_rack_bytes["p"] == 0


# -- batch strategy: the group genetic algorithm ------------------------------------------------
def _batch_ctx(cluster, jobs, *, seed=0, now=None, **params):
    """A round's context with `jobs` waiting, and a LiquidBatch built with `params`."""
    sched = Scheduler(build_profile("liquid"), seed=seed)
    backend = SimBackend(cluster, [])
    for j in jobs:
        sched.handle(JobArrival(j.submit_time_s, j), backend)
    snap = backend.snapshot()
    now = snap.now if now is None else now
    ctx = RoundContext(snap, Transaction(snap), now, sched.jobs, list(sched.queue), sched.rng, sched)
    return ctx, LiquidBatch(**params)


def _random_jobs(n, seed):
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(n):
        ps = int(rng.integers(0, 2))
        jobs.append(_job(f"j{i}", 0.0, workers=int(rng.choice([1, 1, 1, 2, 2, 3, 4])), ps=ps,
                         comm="ps" if ps else "allreduce", cpus_per_worker=float(rng.choice([1, 4, 8]))))
    return jobs


def _launched(plan):
    return {d.job_id: sorted((tp.task, tp.node) for tp in d.placements)
            for d in plan.decisions if isinstance(d, Launch)}


def test_ga_is_deterministic_for_a_seed():
    cl = load_cluster("liquid-10")
    jobs = _random_jobs(30, seed=1)
    plans = []
    for _ in range(2):
        ctx, ga = _batch_ctx(cl, jobs, seed=7)
        ga.place(ctx)
        assert ga.last is not None and ga.last["batch"] == 30
        plans.append(ctx.txn.plan.decisions)
    assert plans[0] == plans[1] and len(plans[0]) > 0


def test_ga_never_over_allocates_and_launches_whole_jobs():
    cl = load_cluster("liquid-10")
    jobs = _random_jobs(40, seed=2)                # about 80 GPUs asked of 20
    ctx, ga = _batch_ctx(cl, jobs, seed=3)
    ga.place(ctx)
    free = ctx.snap.free.copy()
    by_id = {j.job_id: j for j in jobs}
    launched = _launched(ctx.txn.plan)
    assert launched and ga.last["placed"] == len(launched)
    for job_id, tps in launched.items():
        job = by_id[job_id]
        assert sorted(t for t, _ in tps) == [t.index for t in job.tasks]     # gang: all tasks
        for t, node in tps:
            free[node] -= job.tasks[t].vector
    assert (free >= -1e-9).all()                                            # every resource
    assert np.allclose(free, ctx.txn.free)                                  # and the txn agrees


def test_ga_places_at_least_as_many_jobs_as_first_fit():
    # Two nodes of 4 GPUs; single-worker jobs of 2, 1, 3, 2 GPUs in queue order. First fit puts
    # 2 + 1 on node 0 and 3 on node 1, leaving 1 GPU on each: the last 2-GPU job is stranded.
    # {2, 2} + {3, 1} fits all four. The batch strategy (switch forced on) places all four.
    cl = cluster_from_dict({"node_groups": [{"count": 2, "gpus": 4, "gpu_type": "T4", "gpu_mem_gb": 16,
                                             "cpus": 24, "mem_gb": 96}]})
    jobs = [_job(n, 0, workers=1, gpus_per_worker=g) for n, g in (("a", 2), ("b", 1), ("c", 3), ("d", 2))]
    ff = Scheduler(build_profile("fifo-backfill"))
    backend = SimBackend(cl, [])
    for j in jobs:
        ff.handle(JobArrival(0.0, j), backend)
    assert len(ff.round(backend.snapshot())) == 3                     # first fit strands d
    ctx, ga = _batch_ctx(cl, jobs, rate_threshold_per_s=0.0)
    ga.place(ctx)
    assert ga.last["placed"] == 4 and len(_launched(ctx.txn.plan)) == 4
    # End to end: every job starts at once under `liquid` with the switch on.
    config = {"policies": {"liquid": {"params": {"liquid_batch": {"rate_threshold_per_s": 0.0}}}}}
    r = dlsched.simulate(cl, jobs, "liquid", policy_config=config)
    assert (r.jobs.first_start_s == 0).all()
    assert r.jobs.set_index("job_id").first_start_s["d"] == 0
    slow = dlsched.simulate(cl, jobs, "liquid")                       # 4 jobs / 300 s: immediate
    assert slow.jobs.set_index("job_id").first_start_s["d"] > 0


def test_switch_on_arrival_rate():
    cl = load_cluster("liquid-10")
    # Default threshold 1/30 jobs/s over 300 s: 10 waiting jobs is exactly the threshold (no
    # batch, "at or below"), 11 is above.
    for n, batched in ((9, False), (10, False), (11, True)):
        ctx, ga = _batch_ctx(cl, [_job(f"j{i}", 0, workers=1) for i in range(n)])
        ga.place(ctx)
        assert (ga.last is not None) is batched
        assert (len(ctx.txn.plan) == n) if batched else (len(ctx.txn.plan) == 0)
    # Jobs submitted before the window do not count.
    ctx, ga = _batch_ctx(cl, [_job(f"j{i}", 0, workers=1) for i in range(20)], now=301.0)
    ga.place(ctx)
    assert ga.last is None and len(ctx.txn.plan) == 0


def test_batch_then_immediate_in_one_simulation():
    # A burst of 24 jobs at t=0 (24 / 300 s is above the threshold: the GA places what fits) and
    # later single arrivals (below it: best fit). Everything finishes; only the burst used the GA.
    cl = load_cluster("liquid-10")
    jobs = _random_jobs(24, seed=4) + [_job(f"late{i}", 2000.0 + 500 * i, workers=2) for i in range(3)]
    sched = Scheduler(build_profile("liquid"), seed=5)
    ga = sched.profile.placers[0]
    batches = []
    place = ga.place

    def spy(ctx):
        place(ctx)
        batches.append((ctx.now, ga.last))
    ga.place = spy
    backend = SimBackend(cl, jobs)
    sched.run(backend)
    assert sched.n_done == len(jobs)
    assert batches[0][0] == 0 and batches[0][1]["batch"] == 24 and batches[0][1]["placed"] > 0
    assert all(last is None for now, last in batches if now >= 2000)
    # The burst round placed at least as many jobs as first fit does.
    ff = dlsched.simulate(cl, jobs, "fifo-backfill", seed=5)
    assert batches[0][1]["placed"] >= int((ff.jobs.first_start_s == 0).sum())


class _CheckedBackend(SimBackend):
    def apply(self, plan):
        super().apply(plan)
        self.state.check()      # raises on any over-allocated node


def test_whole_simulation_never_over_allocates():
    cl = load_cluster("liquid-10")
    jobs = _random_jobs(60, seed=6)
    jobs = [_job(j.job_id, float(i // 20) * 100.0, workers=j.num_workers, ps=j.num_ps,
                 comm=j.comm, cpus_per_worker=j.tasks[0].demand[1]) for i, j in enumerate(jobs)]
    backend = _CheckedBackend(cl, jobs)
    sched = Scheduler(build_profile("liquid"), seed=1)
    sched.run(backend)
    assert sched.n_done == len(jobs)


def test_ga_runtime_for_a_50_job_batch():
    # 50 jobs (1-4 workers, some with a PS) on 20 nodes, population 20 x 30 generations.
    # Target: well under 1 s (about 0.1-0.3 s of CPU on a developer machine); the bound leaves
    # room for a loaded test machine.
    cl = load_cluster("liquid-20")
    ctx, ga = _batch_ctx(cl, _random_jobs(50, seed=8))
    t0 = time.process_time()
    ga.place(ctx)
    cpu = time.process_time() - t0
    assert ga.last["batch"] == 50 and ga.last["placed"] > 0
    assert cpu < 2.0, f"GA took {cpu:.2f} s of CPU for 50 jobs"
