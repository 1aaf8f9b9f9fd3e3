"""Optimus (policies/allocate/optimus.py, policies/actions/optimus.py): the marginal-gain
allocation worked out by hand with a table speed model, PS placement on the fewest servers with
equal numbers per server, suspension and resize decisions, and parameter validation."""
import types

import pytest

import dlsched
import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.core.types import Resize, Role
from dlsched.policies.actions.optimus import OptimusPlace, _GpuPool
from dlsched.policies.allocate.optimus import OptimusAllocate, job_tasks, shape
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.scheduler.framework import build
from dlsched.scheduler.transaction import Transaction
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

ONE = {"node_groups": [{"count": 1, "gpus": 4, "gpu_mem_gb": 32, "cpus": 32, "mem_gb": 128}]}
TWO = {"node_groups": [{"count": 2, "gpus": 4, "gpu_mem_gb": 32, "cpus": 32, "mem_gb": 128}]}


class TableOptimus(OptimusAllocate):
    """Optimus with a hand-written iteration-time table (the algorithm under test is the
    allocation, not the speed model)."""
    TABLE = {"A": {1: 1.0, 2: 0.5, 3: 1 / 3, 4: 0.25},     # perfect scaling
             "B": {1: 1.0, 2: 0.6, 3: 0.5, 4: 0.45}}

    def iter_time(self, rec, w, p, cluster):
        return self.TABLE[rec.job_id].get(w, float("inf")) if w > 0 else float("inf")


def job(job_id, t, iterations, workers=1, **kw):
    return job_from_row(dict(job_id=job_id, submit_time_s=t, workers=workers, iterations=iterations,
                             model="resnet50", batch_size=64, **kw))


def ready(opt, jobs):
    """(profile, scheduler, backend) on ONE with `opt` as the allocator, the jobs of time 0
    arrived, before the first round."""
    profile = build_profile("optimus")
    profile.allocator = opt
    sched = Scheduler(profile)
    backend = SimBackend(cluster_from_dict(ONE), jobs)
    for e in backend.poll():
        sched.handle(e, backend)
    sched._stats = backend.job_stats
    return profile, sched, backend


def first_round(jobs):
    """(the TableOptimus allocator, the plan) of the first round over `jobs` on ONE."""
    opt = TableOptimus()
    _, sched, backend = ready(opt, jobs)
    return opt, sched.round(backend.snapshot())


def applied_first_round(opt, jobs):
    """ready(), then the first round's plan applied."""
    profile, sched, backend = ready(opt, jobs)
    plan = sched.round(backend.snapshot())
    sched.commit_round()
    backend.apply(plan)
    sched._after_apply(plan, backend.now())
    return profile, sched, backend


def test_marginal_gain_allocation_worked_by_hand():
    # One node of 4 GPUs; A has 100 iterations left, B 1000. Both get 1 worker first (2 GPUs
    # left). Gains (T = Q x t; the dominant share of a 1-GPU worker, 1/4, and the early factor
    # are the same for both, so compare Q x (t(w) - t(w+1))):
    #   A: 100 x (1 - 0.5) = 50      B: 1000 x (1 - 0.6) = 400   -> B gets its 2nd worker
    #   A: 50                        B: 1000 x (0.6 - 0.5) = 100 -> B gets its 3rd
    # No GPU left: A = 1 worker, B = 3.
    opt, plan = first_round([job("A", 0, 100), job("B", 0, 1000)])
    assert opt.last_alloc == {"A": (1, 0), "B": (3, 0)}
    # both start on a task list of the chosen size: A as submitted (Launch), B resized to 3
    kinds = {d.job_id: d for d in plan.ordered()}
    assert isinstance(kinds["B"], Resize) and shape(kinds["B"].tasks) == (3, 0)
    assert len(kinds["A"].placements) == 1


def test_gain_in_later_rounds_uses_the_remaining_work_and_suspends_nobody_needlessly():
    # With B nearly done (Q_B = 10) and A long (Q_A = 1000), the next allocation favours A:
    # A: 1000 x (1 - 0.5) = 500 > B: 10 x 0.4 = 4 -> A 2nd; A: 1000 x (0.5 - 1/3) = 167 -> A 3rd.
    opt, _ = first_round([job("A", 0, 1000), job("B", 0, 10)])
    assert opt.last_alloc == {"A": (3, 0), "B": (1, 0)}


def test_ps_job_goes_to_the_fewest_servers_with_equal_workers_and_ps():
    # Nodes of 4 GPUs and 32 CPUs. 4 workers (1 GPU, 4 CPUs each) + 2 PS (4 CPUs each) need 4
    # GPUs and 24 CPUs: one server. 6 workers + 2 PS need 6 GPUs: two servers, 3 W + 1 PS each.
    cl = cluster_from_dict(TWO)
    spec = job_from_row(dict(job_id="P", submit_time_s=0, workers=1, ps=1, iterations=10,
                             model="resnet50", batch_size=64, cpus_per_worker=4, ps_cpus=4))
    for w, p, per_node in [(4, 2, {0: (4, 2)}), (6, 2, {0: (3, 1), 1: (3, 1)})]:
        backend = SimBackend(cl, [spec])
        snap = backend.snapshot()
        ctx = types.SimpleNamespace(txn=Transaction(snap), snap=snap)
        tasks = job_tasks(spec, w, p)
        assert OptimusPlace()._place(ctx, "P", tasks, _GpuPool(ctx.txn.free, snap.up))
        got = {}
        for tp in ctx.txn.reserved("P"):
            role = tasks[tp.task].role
            a, b = got.get(tp.node, (0, 0))
            got[tp.node] = (a + (role is Role.WORKER), b + (role is Role.PS))
        assert got == per_node


def test_allreduce_job_fills_the_most_free_node_first():
    # Node 0 has 1 GPU taken; a 5-worker job: 4 on node 1 (most free), 1 on node 0.
    cl = cluster_from_dict(TWO)
    backend = SimBackend(cl, [])
    snap = backend.snapshot()
    ctx = types.SimpleNamespace(txn=Transaction(snap), snap=snap)
    ctx.txn.free[0, 0] -= 1
    spec = job("R", 0, 10)
    tasks = job_tasks(spec, 5, 0)
    assert OptimusPlace()._place(ctx, "R", tasks, _GpuPool(ctx.txn.free, snap.up))
    nodes = sorted(tp.node for tp in ctx.txn.reserved("R"))
    assert nodes == [0, 1, 1, 1, 1]


def test_a_job_whose_minimum_does_not_fit_waits():
    # Every job's minimum (one worker) is given in arrival order: on a 1-GPU node the later job
    # B gets 0 and waits until A is done.
    one_gpu = {"node_groups": [{"count": 1, "gpus": 1, "gpu_mem_gb": 32, "cpus": 32, "mem_gb": 128}]}
    res = dlsched.simulate(cluster_from_dict(one_gpu), [job("A", 0, 50), job("B", 10, 50)], "optimus")
    t = res.jobs.set_index("job_id")
    assert t.loc["B", "first_start_s"] >= t.loc["A", "finish_s"]
    assert res.summary["unfinished"] == 0


@pytest.mark.parametrize("params", [{"speed": "guess"}, {"remaining": "x"}, {"early_factor": 0.0},
                                    {"early_factor": 1.5}, {"min_samples": 0}, {"max_workers": -1},
                                    {"settle": "yes"}])
def test_bad_parameters(params):
    with pytest.raises(Exception):
        build("allocate", "optimus", params)


def test_a_resizing_allocator_needs_a_placer_that_carries_its_allocation():
    from dataclasses import replace

    from dlsched.core.errors import ConfigError
    from dlsched.scheduler.framework import REGISTRY
    from dlsched.scheduler.profile import Profile
    spec = REGISTRY.get("profile", "optimus")
    with pytest.raises(ConfigError, match="allocate.*no placer of this profile carries"):
        Profile(replace(spec, placers=()))


def test_the_allocation_is_published_read_only_and_names_running_jobs():
    # After the first round's plan is applied, A and B run; the next round's allocation names
    # both (running jobs included), as their current task tuples when (w, p) stays.
    import types as _t
    profile, sched, backend = applied_first_round(TableOptimus(), [job("A", 0, 100), job("B", 0, 1000)])
    seen = {}
    orig = profile.placers[0].place

    def spy(ctx):
        seen["alloc"] = ctx.allocation
        orig(ctx)
    profile.placers[0].place = spy
    assert len(sched.round(backend.snapshot())) == 0          # nothing changes
    alloc = seen["alloc"]
    assert isinstance(alloc, _t.MappingProxyType)
    assert set(alloc) == {"A", "B"}
    assert all(sched.jobs[j].state.value == "running" for j in alloc)
    assert alloc["B"] is sched.jobs["B"].tasks and shape(alloc["B"]) == (3, 0)


@pytest.mark.parametrize("settle", [True, False])
def test_a_running_job_keeps_its_tasks_until_it_has_shown_its_speed_with_them(settle):
    # Round 1 on 4 GPUs: A 1 worker, B 3 (as worked by hand above). C arrives; no speed has been
    # measured yet (this allocator never records one). Without settle C gets its minimum by
    # shrinking B, a restart of B on a guess; with settle A and B keep what they hold, C waits.
    class Blind(TableOptimus):
        TABLE = {**TableOptimus.TABLE, "C": TableOptimus.TABLE["A"]}

        def _observe(self, ctx):
            pass
    opt = Blind(settle=settle)
    _, sched, backend = applied_first_round(opt, [job("A", 0, 100), job("B", 0, 1000), job("C", 1.0, 100)])
    while "C" not in sched.jobs:
        for e in backend.poll():
            sched.handle(e, backend)
    assert sched.jobs["B"].state.value == "running" and backend.now() < 2.0
    plan = sched.round(backend.snapshot())
    if settle:
        assert opt.last_alloc == {"A": (1, 0), "B": (3, 0), "C": (0, 0)}
        assert len(plan) == 0
    else:
        assert opt.last_alloc == {"A": (1, 0), "B": (2, 0), "C": (1, 0)}
        assert any(isinstance(d, Resize) and d.job_id == "B" for d in plan.ordered())



def test_a_job_back_at_a_shape_it_once_ran_keeps_it_until_this_run_shows_its_speed():
    # The runtime's flake (backend conformance, optimus): a job resized back to a (w, p) it had
    # run at has a sample there, yet its new run has made no step (rate 0). Settle holds it then
    # as it holds a shape never seen; once the run shows a rate it may be resized again.
    class Replay(TableOptimus):
        rate = 0.0

        def _observe(self, ctx):
            for rec in ctx.running:
                self._samples.setdefault(rec.job_id, {})[shape(rec.tasks)] = 1.0   # seen before
                self._rate_now[rec.job_id] = self.rate
    TABLE = {**TableOptimus.TABLE, "C": TableOptimus.TABLE["A"]}
    opt = type("R", (Replay,), {"TABLE": TABLE})()
    _, sched, backend = applied_first_round(opt, [job("A", 0, 100), job("B", 0, 1000), job("C", 1.0, 100)])
    while "C" not in sched.jobs:
        for e in backend.poll():
            sched.handle(e, backend)
    assert len(sched.round(backend.snapshot())) == 0           # this run has no rate: B keeps 3
    assert opt.last_alloc == {"A": (1, 0), "B": (3, 0), "C": (0, 0)}
    opt.rate = 2.0                                              # now it has shown one
    plan = sched.round(backend.snapshot())
    assert opt.last_alloc == {"A": (1, 0), "B": (2, 0), "C": (1, 0)}
    assert any(isinstance(d, Resize) and d.job_id == "B" for d in plan.ordered())
