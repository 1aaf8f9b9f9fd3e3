"""The exact Optimus program (policies/actions/optimus_exact.py): hand-solved cases, the
heuristic never beating it, and the heuristic's re-implementation against the policy itself."""
from dataclasses import replace

import numpy as np
import pytest

from dlsched.policies.actions.optimus_exact import (ExactJob, gap_study, greedy_allocate, objective,
                                                    random_case, small_cluster, solve_exact, tables_for)

ONE = np.array([1.0])


def _job(jid, times, cap=3):
    return ExactJob(jid, {(w, 0): t for w, t in enumerate(times, start=1)}, ONE, None, cap=cap)


def test_tiny_case_solved_by_hand():
    # 3 GPUs, each job needs >= 1: (A, B) = (1, 1): 10 + 8 = 18; (2, 1): 6 + 8 = 14; (1, 2): 10 + 5 = 15
    jobs = [_job("A", [10, 6, 5]), _job("B", [8, 5, 4.5])]
    alloc, best = solve_exact(jobs, [3.0])
    assert alloc == {"A": (2, 0), "B": (1, 0)} and best == pytest.approx(14.0)
    # the heuristic: both at 1 (1 GPU left), gains A 4 > B 3: A gets it - optimal here
    assert greedy_allocate(jobs, [3.0]) == {"A": (2, 0), "B": (1, 0)}


def test_heuristic_stops_at_a_local_optimum_the_program_does_not():
    # A gets slower at 2 workers (a second server) but fast at 3: the marginal gain at w=1 is
    # negative, so the heuristic never tries; 4 GPUs: heuristic A=1, B=3: 10 + 4.5 = 14.5,
    # optimum A=3, B=1: 2 + 8 = 10 (gap 45 %)
    jobs = [_job("A", [10, 10.5, 2]), _job("B", [8, 5, 4.5])]
    heur = greedy_allocate(jobs, [4.0])
    assert heur == {"A": (1, 0), "B": (3, 0)} and objective(jobs, heur) == pytest.approx(14.5)
    alloc, best = solve_exact(jobs, [4.0])
    assert alloc == {"A": (3, 0), "B": (1, 0)} and best == pytest.approx(10.0)


def test_ps_jobs_and_two_resources_by_hand():
    # worker = (1 GPU, 1 CPU), PS = (0 GPU, 2 CPU); capacity 2 GPUs, 5 CPUs; p <= w.
    T = {(1, 1): 10.0, (2, 1): 6.0, (2, 2): 5.0}
    j = ExactJob("A", dict(T), np.array([1.0, 1.0]), np.array([0.0, 2.0]), cap=2)
    # (2, 2) needs 2 + 4 = 6 CPUs > 5: the best that fits is (2, 1)
    assert solve_exact([j], [2.0, 5.0]) == ({"A": (2, 1)}, pytest.approx(6.0))
    assert greedy_allocate([j], [2.0, 5.0]) == {"A": (2, 1)}
    with pytest.raises(ValueError):
        solve_exact([j, replace(j, job_id="B"), replace(j, job_id="C")], [2.0, 5.0])   # minimums do not fit


def test_heuristic_is_never_better_than_the_program_on_random_cases():
    res = gap_study(cases=4, seed=3)
    assert res["cases"] == 4 and min(res["gaps"]) >= -1e-9 and res["max_gap"] >= res["mean_gap"] >= 0
    assert all(3 <= n <= 8 for n in res["jobs"])
    rng = np.random.default_rng(7)
    jobs, cap = random_case(rng)
    alloc, best = solve_exact(jobs, cap)
    used = sum(w * j.worker + p * j.ps for j in jobs for (w, p) in [alloc[j.job_id]])
    assert np.all(used <= cap + 1e-9)


def test_greedy_reimplementation_matches_the_policy_on_a_first_round():
    """All jobs arrive at 0 on an empty cluster: Optimus's first round allocates from T = the
    iterations x its oracle iteration times, early factor on every job."""
    from dlsched.policies.allocate.optimus import OptimusAllocate
    from dlsched.scheduler.core import Scheduler, build_profile
    from dlsched.sim.backend import SimBackend
    from dlsched.workload.generators import gen_seed001
    cl = small_cluster(2)
    specs = [replace(s, submit_time_s=0.0, iterations=50.0) for s in gen_seed001(5, jobs=6)]
    profile = build_profile("optimus")
    opt = profile.allocator
    assert isinstance(opt, OptimusAllocate)
    first = []
    orig = opt.allocate

    def spy(jobs, ctx):
        out = orig(jobs, ctx)
        if not first:
            first.append(dict(opt.last_alloc))
        return out
    opt.allocate = spy
    Scheduler(profile, seed=0).run(SimBackend(cl, specs))
    jobs = tables_for(specs, [s.iterations for s in specs], cl, opt=OptimusAllocate())
    for j in jobs:
        j.factor = 0.95
    assert greedy_allocate(jobs, cl.capacity.sum(axis=0)) == first[0]
