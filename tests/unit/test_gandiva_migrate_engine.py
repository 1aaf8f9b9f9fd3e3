"""Gandiva's migration and defragmentation find their target nodes through the profile's
placement engine (RoundContext.choose_node: the profile's filters, then its scorers) on a fork of
the round's transaction; only a whole successful trial becomes decisions. A filter that forbids
a node is therefore obeyed by migration, and a trial that fails changes nothing."""
import numpy as np

from dlsched.cluster import cluster_from_dict
from dlsched.core.types import Launch, Migrate, Plan, TaskPlacement
from dlsched.metrics import build_result
from dlsched.policies.actions.gandiva_common import trial_placement
from dlsched.policies.actions.gandiva_migrate import GandivaMigrate
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.scheduler.framework import Filter, NodeMask
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

NO_GROW = {"gandiva_grow": {"enabled": False}}


class ForbidNodes(Filter):
    """A test filter (not registered): job -> nodes it may not use; remembers who asked."""
    name = "test_forbid_nodes"

    def __init__(self, forbid: dict[str, set[int]]):
        self.forbid = forbid
        self.asked: list[str] = []

    def filter(self, ctx, job, task, free) -> NodeMask:
        self.asked.append(job.job_id)
        ok = np.ones(len(free), dtype=bool)
        ok[list(self.forbid.get(job.job_id, ()))] = False
        return NodeMask(ok, "forbidden by the test")


def _cluster(nodes, gpus):
    return cluster_from_dict({"node_groups": [{"count": nodes, "gpus": gpus, "gpu_type": "P40", "gpu_mem_gb": 24,
                                               "cpus": 32, "mem_gb": 256}]})


def _job(j, t, work=3000.0, gpus=1):
    return job_from_row(dict(job_id=j, submit_time_s=t, workers=gpus, model="resnet50", duration_s=work,
                             cpus_per_worker=2, mem_gb_per_worker=8))


def _scheduler(params, forbid=None):
    prof = build_profile("gandiva", {"params": params})
    filt = None
    if forbid is not None:
        filt = ForbidNodes(forbid)
        prof.filters.append(filt)
    return Scheduler(prof), filt


def _simulate(cl, jobs, params, forbid=None):
    sched, filt = _scheduler(params, forbid)
    be = SimBackend(cl, jobs)
    sched.run(be)
    res = build_result(sched, be, policy="gandiva", cluster_name="c", workload_name="w")
    return res, sched, filt


def _migrations(sched):
    return [(e[0], e[2], e[3]) for e in sched.log if e[1] == "migrate"]


def test_time_sliced_job_migrates_where_the_engine_allows():
    # 3 nodes x 1 GPU. a (long) -> node 0, b (600 s) -> node 1, x (700 s) -> node 2. c arrives at
    # 100: nothing is free, it time-slices with a on node 0. When b ends at 600 the parked one of
    # a / c moves to node 1 (the engine's first fit). With a filter that forbids node 1 to a and
    # c, nothing moves at 600; at 700 x frees node 2 and the parked one moves there.
    cl = _cluster(3, 1)
    jobs = [_job("a", 0, 5000), _job("b", 0, 600), _job("x", 0, 700), _job("c", 100, 5000)]
    res, sched, _ = _simulate(cl, jobs, NO_GROW)
    (t, _, where), = _migrations(sched)
    assert t == 600.0 and where == "0@1"
    res, sched, filt = _simulate(cl, jobs, NO_GROW, forbid={"a": {1}, "c": {1}})
    moved = _migrations(sched)
    assert [(t, w) for t, _, w in moved] == [(700.0, "0@2")]
    assert res.summary["finished"] == 4
    assert {"a", "c"} <= set(filt.asked)     # the migration asked the profile's filters


# -- one defragmentation round, by hand -------------------------------------------------------
def _defrag_round(forbid, act=True):
    # 2 nodes x 4 GPUs: y (3 GPUs) on node 1, s (1 GPU) on node 0's last GPU; z (4 GPUs) waits.
    # No node holds z now (3 and 1 GPUs free); moving s to node 1 frees node 0 (1 GPU moved),
    # moving y to node 0 frees node 1 (3 GPUs moved).
    cl = _cluster(2, 4)
    jobs = [_job("y", 0, 9000, gpus=3), _job("s", 0, 9000), _job("z", 0, 1000, gpus=4)]
    sched, filt = _scheduler({**NO_GROW, "gandiva_migrate": {"min_run_s": 0.0}}, forbid)
    be = SimBackend(cl, jobs)
    for e in be.poll():                     # the three arrivals at t=0
        sched.handle(e, be)
    plan = Plan()
    plan.add(Launch("y", tuple(TaskPlacement(i, 1, (i,)) for i in range(3))))
    plan.add(Launch("s", (TaskPlacement(0, 0, (3,)),)))
    sched.execute(plan, be)
    snap = be.snapshot()
    ctx = sched.context(snap)
    ctx.queue = list(sched.queue)
    assert [r.job_id for r in ctx.queue] == ["z"]
    mig = next(a for a in sched.profile.actions if isinstance(a, GandivaMigrate))
    before = (ctx.txn.free.copy(), ctx.txn.gpu_load.copy())
    if filt is not None:
        filt.asked.clear()
    if act:
        mig.before_place(ctx)
    return ctx, before, filt


def _decisions(ctx):
    return [(type(d).__name__, d.job_id, tuple((tp.node, tp.gpu_ids) for tp in d.placements))
            for d in ctx.txn.plan.decisions]


def test_defragmentation_moves_the_cheapest_victim():
    ctx, _, _ = _defrag_round(None)
    assert _decisions(ctx) == [("Migrate", "s", ((1, (3,)),)),
                               ("Launch", "z", ((0, (0,)), (0, (1,)), (0, (2,)), (0, (3,))))]


def test_defragmentation_obeys_the_profiles_filters():
    # s may not go to node 1: freeing node 0 is impossible, so y moves to node 0 and z gets node 1.
    ctx, _, filt = _defrag_round({"s": {1}})
    assert _decisions(ctx) == [("Migrate", "y", ((0, (0,)), (0, (1,)), (0, (2,)))),
                               ("Launch", "z", ((1, (0,)), (1, (1,)), (1, (2,)), (1, (3,))))]
    assert "s" in filt.asked
    assert all(isinstance(d, (Migrate, Launch)) for d in ctx.txn.plan.decisions)


def test_a_failed_trial_leaves_the_round_unchanged():
    # Neither victim may move (s not to node 1, y not to node 0): both trials ran on forks of the
    # round's transaction and failed, so the round's transaction is exactly as it was.
    ctx, (free, load), filt = _defrag_round({"s": {1}, "y": {0}})
    assert {"s", "y"} <= set(filt.asked)           # the trials did ask the engine
    assert len(ctx.txn.plan) == 0
    assert ctx.txn.decided == set() and ctx.txn.released == set()
    assert np.array_equal(ctx.txn.free, free) and np.array_equal(ctx.txn.gpu_load, load)
    assert ctx.txn.reserved("s") == [] and ctx.txn.reserved("y") == [] and ctx.txn.reserved("z") == []


def test_trial_placement_reserves_on_the_fork_only():
    ctx, (free, load), _ = _defrag_round({"s": {1}}, act=False)
    z = ctx.jobs["z"]
    trial = ctx.txn.fork()
    p = trial_placement(ctx, trial, z)        # no node holds 4 GPUs: 3 on node 0, 1 on node 1
    assert [(tp.node, tp.gpu_ids) for tp in p] == [(0, (0,)), (0, (1,)), (0, (2,)), (1, (3,))]
    assert trial.reserved("z") == list(p) and ctx.txn.reserved("z") == []
    s = ctx.jobs["s"]
    trial = ctx.txn.fork()
    assert trial_placement(ctx, trial, s, list(s.tasks), allowed=np.array([False, True])) is None
    assert trial.reserved("s") == [] and np.array_equal(trial.free, free)   # forbidden: nothing stays
    assert np.array_equal(ctx.txn.free, free) and np.array_equal(ctx.txn.gpu_load, load)
    assert len(ctx.txn.plan) == 0


def test_choose_node_on_a_fork_reads_the_forks_free_and_reserves_nothing():
    ctx, (free, load), _ = _defrag_round(None, act=False)
    z = ctx.jobs["z"]
    task = z.tasks[0]
    assert ctx.choose_node(z.spec, task) == (0, "")               # first fit: node 0 has 3 free
    trial = ctx.txn.fork()
    for g in range(3):
        trial.reserve("other", task, 0, gpu_ids=(g,))
    assert ctx.choose_node(z.spec, task, txn=trial) == (1, "")     # node 0 full on the fork
    node, why = ctx.choose_node(z.spec, task, txn=trial, allowed=np.array([True, False]))
    assert node is None and why
    assert np.array_equal(ctx.txn.free, free) and np.array_equal(ctx.txn.gpu_load, load)
    assert trial.reserved("z") == [] and ctx.txn.reserved("z") == [] and len(ctx.txn.plan) == 0
