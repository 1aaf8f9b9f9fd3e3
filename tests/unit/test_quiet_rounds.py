"""Periodic rounds skipped while every component is quiet (Component.quiet_until) decide nothing
that a run with every round gives: the same event log, with far fewer rounds."""
import math

import pytest

import dlsched.policies  # noqa: F401
from dlsched.cluster.topology import load_cluster
from dlsched.metrics.result import build_result
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim.backend import SimBackend
from dlsched.workload.io import load_workload


def run(policy: str, workload: str, cluster: str, quiet: bool, params=None):
    cl = load_cluster(cluster)
    jobs = load_workload(workload, seed=3)
    sched = Scheduler(build_profile(policy, params), seed=3)
    if not quiet:
        sched._can_be_quiet = False
    backend = SimBackend(cl, jobs)
    sched.run(backend)
    return build_result(sched, backend, policy=policy, cluster_name=cl.name, workload_name=workload), sched


@pytest.mark.parametrize("policy,params", [("tiresias", None),
                                           ("tiresias", {"params": {"preempt": {"min_run_s": 600.0}}}),
                                           ("tiresias", {"params": {"tiresias": {"thresholds": [3600, 36000]}}})])
def test_skipped_rounds_change_no_decision(policy, params):
    every, s1 = run(policy, "poisson:jobs=120,rate=0.01", "seed000", False, params)
    quiet, s2 = run(policy, "poisson:jobs=120,rate=0.01", "seed000", True, params)
    assert quiet.events == every.events
    assert s1.rounds_skipped == 0 and s2.rounds_skipped > 0
    assert len(s2.rounds) < len(s1.rounds)


def test_on_an_overloaded_cluster_most_rounds_are_skipped():
    every, s1 = run("tiresias", "poisson:jobs=200,rate=0.02", "seed000", False)
    quiet, s2 = run("tiresias", "poisson:jobs=200,rate=0.02", "seed000", True)
    assert quiet.events == every.events
    # the rounds over a waiting queue (the costly ones): most of them decided nothing
    waiting = [sum(1 for r in s.rounds if r[2] > 0) for s in (s1, s2)]
    assert waiting[1] < waiting[0] / 5


def test_a_profile_with_a_component_that_cannot_tell_never_skips():
    _, s = run("tiresias", "poisson:jobs=60,rate=0.01", "seed000", True,
               {"params": {"tiresias": {"starve_factor": 2.0}}})
    assert s.rounds_skipped == 0
    # (gandiva's components all tell now: tests/unit/test_gandiva_incremental.py)


def test_quiet_times():
    from dlsched.policies.actions.preempt import Preempt
    assert Preempt().quiet_until(0.0, []) == math.inf
    assert Preempt(min_run_s=0.0).quiet_until(5.0, []) == math.inf


def test_optimus_with_rigid_jobs_skips_and_with_elastic_ones_never():
    # poisson jobs carry a trace-like run time (duration_s): rigid for Optimus, request or nothing
    every, s1 = run("optimus", "poisson:jobs=150,rate=0.02", "seed000", False)
    quiet, s2 = run("optimus", "poisson:jobs=150,rate=0.02", "seed000", True)
    assert quiet.events == every.events
    assert s2.rounds_skipped > 0 and len(s2.rounds) < len(s1.rounds)
    # pollux-6's jobs have a model and iterations: elastic, their gains move with progress
    _, s = run("optimus", "pollux-6", "pollux", True)
    assert s.rounds_skipped == 0
