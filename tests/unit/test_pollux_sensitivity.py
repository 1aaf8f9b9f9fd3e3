"""Pollux's sensitivity knobs (its interference study): repair rule (1) switched off, and the
simulator's slowdown of distributed jobs that share a node (dlsched.sim.adaptive.interfered)."""
import numpy as np
import pytest

from dlsched.policies.allocate.pollux_ga import Problem


def _cfg(interference: float, avoid: bool) -> dict:
    return {"policies": {"pollux": {"params": {"pollux": {
        "pop_size": 16, "generations": 6, "interference": interference, "avoid_interference": avoid}}}}}


def test_without_avoidance_two_distributed_jobs_may_share_a_node():
    speed = np.ones((2, 17, 9))
    s = np.zeros((1, 2, 3), dtype=int)
    s[0, 0, :2] = 2          # job 0 on nodes 0, 1
    s[0, 1, 1:] = 2          # job 1 on nodes 1, 2: both distributed, both on node 1
    rng = np.random.default_rng(0)
    on = Problem(speed, [4] * 3, np.zeros((2, 3), dtype=int), [8, 8], [1, 1], scale=0.25).repair(s, rng)[0]
    off = Problem(speed, [4] * 3, np.zeros((2, 3), dtype=int), [8, 8], [1, 1], scale=0.25,
                  avoid=False).repair(s, rng)[0]
    assert on[1, 1] == 0 and on[0, 1] == 2                        # the later job loses node 1
    assert off.tolist() == s[0].tolist()                          # kept as it is


@pytest.fixture(scope="module")
def subset():
    from dlsched.workload.io import load_workload
    return load_workload("pollux-2")[:30]


def _run(jobs, interference: float, avoid: bool):
    from dlsched.api import simulate
    return simulate("pollux", jobs, "pollux", seed=0, start_delay_s=30, restart_delay_s=30,
                    policy_config=_cfg(interference, avoid))


def test_interference_slows_shared_distributed_jobs_only_without_avoidance(subset):
    """With avoidance on, no two distributed jobs share a node, so the slowdown never applies
    (the event log is the same as without it: Pollux's README says so of its own runs). With
    it off, 50 % interference makes the same search's jobs slower."""
    base = _run(subset, 0.0, True)
    assert list(_run(subset, 0.5, True).events) == list(base.events)
    free = _run(subset, 0.0, False)
    slow = _run(subset, 0.5, False)
    assert slow.summary["mean_jct_s"] > free.summary["mean_jct_s"]


def test_interference_out_of_range_is_refused():
    from dlsched.policies.allocate.pollux import PolluxAllocate
    with pytest.raises(ValueError, match="interference"):
        PolluxAllocate(interference=1.0)
