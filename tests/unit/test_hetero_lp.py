"""HiGHS through highspy (dlsched.policies.hetero.lp): the same answers as scipy's linprog, and a
basis carried from one LP to the next (`Warm`) that changes the vertex at most, never the optimum."""
from __future__ import annotations

import copy
import dataclasses
import pickle
import random

import numpy as np
import pytest
from scipy import sparse
from scipy.optimize import linprog

from dlsched.policies import hetero
from dlsched.policies.hetero.common import alone_matrix, proportional_throughputs
from dlsched.policies.hetero.finish_time import finish_time_ratios
from dlsched.policies.hetero.lp import InfeasibleError, Warm, rowwise, solve_lp
from dlsched.workload.throughputs import load_throughputs


def test_solve_lp_gives_linprogs_answer_in_either_matrix_form():
    rng = np.random.default_rng(7)
    for _ in range(20):
        m, n = 12, 30
        A = sparse.random(m, n, density=0.3, random_state=rng, format="coo")
        b = rng.uniform(1, 5, m)
        c = -rng.uniform(0, 1, n)
        bounds = [(0, 1)] * n
        ref = linprog(c, A_ub=A, b_ub=b, bounds=bounds, method="highs")
        for form in (A.tocsr(), rowwise(A.row, A.col, A.data, m, n)):
            x = solve_lp(c, form, b, bounds, "test")
            assert c @ x == pytest.approx(ref.fun, rel=1e-9, abs=1e-12)
            np.testing.assert_allclose(x, ref.x, atol=1e-9)


def test_solve_lp_says_infeasible():
    A = sparse.csr_matrix(np.array([[1.0], [-1.0]]))
    with pytest.raises(InfeasibleError, match="toy: no allocation"):
        solve_lp(np.array([1.0]), A, np.array([1.0, -2.0]), [(0, None)], "toy")


def _jobs(rng: random.Random, table, ids: list[int]):
    out = []
    for i in ids:
        r = random.Random(i)                       # a job is the same in every set it belongs to
        jt = r.choice(table.job_types())
        out.append(hetero.HeteroJob(f"j{i}", jt, 1, 1.0, r.uniform(1e3, 1e5), r.uniform(0, 3600)))
    return out


@pytest.mark.parametrize("policy", ["finish_time_fairness_perf", "max_min_fairness_perf", "max_min_fairness"])
def test_a_warm_start_through_arrivals_and_departures_keeps_the_optimum(policy):
    """A run of job sets, one job in or out at a time (Gavel's resets): the warm calls reach the
    cold calls' optimum each time."""
    table = load_throughputs("gavel")
    cluster = {"K80": 6, "P100": 6, "V100": 6}
    rng = random.Random(1)
    ids, nxt = list(range(25)), 25
    warm = Warm()
    fn = getattr(hetero, policy)
    for step in range(30):
        if rng.random() < 0.5 and len(ids) > 5:
            ids.remove(rng.choice(ids))
        else:
            ids.append(nxt)
            nxt += 1
        jobs = _jobs(rng, table, ids)
        if policy == "max_min_fairness":            # weights 1 and 2: alike jobs take no LP (below)
            jobs = [dataclasses.replace(j, priority_weight=1.0 + int(j.job_id[1:]) % 2) for j in jobs]
        hot, cold = fn(jobs, cluster, table, warm=warm), fn(jobs, cluster, table)
        if policy.startswith("finish"):
            worst = [max(finish_time_ratios(jobs, cluster, table, a).values()) for a in (hot, cold)]
            assert worst[0] == pytest.approx(worst[1], rel=1e-6), step
        elif policy == "max_min_fairness":          # agnostic: each job's time share over its weight
            low, low_c = (min(sum(a[j.job_id].values()) / j.priority_weight for j in jobs) for a in (hot, cold))
            assert low == pytest.approx(low_c, rel=1e-6), step
        else:                                       # Gavel-LAS: throughput over its 1/n share
            P = proportional_throughputs(alone_matrix(jobs, sorted(cluster), table), np.array([6, 6, 6.0]))
            low, low_c = (min(hetero.effective_throughputs(jobs, a, table)[j.job_id] / p for j, p in zip(jobs, P))
                          for a in (hot, cold))
            assert low == pytest.approx(low_c, rel=1e-6), step
        assert warm.basis is not None


def test_warm_survives_copy_and_pickle_with_its_basis():
    table = load_throughputs("gavel")
    jobs = _jobs(random.Random(0), table, list(range(10)))
    warm = Warm()
    hetero.finish_time_fairness_perf(jobs, {"K80": 3, "P100": 3, "V100": 3}, table, warm=warm)
    for other in (copy.deepcopy(warm), pickle.loads(pickle.dumps(warm))):
        assert other.cols == warm.cols and other.rows == warm.rows
        assert [int(s) for s in other.basis.col_status] == [int(s) for s in warm.basis.col_status]
        assert [int(s) for s in other.basis.row_status] == [int(s) for s in warm.basis.row_status]
        assert other.start(warm.cols, warm.rows) is other.basis


@pytest.mark.parametrize("n,scale,weights", [(200, 1, None), (60, 2, None), (300, 1, "mixed")])
def test_agnostic_las_on_alike_jobs_is_the_lps_answer(monkeypatch, n, scale, weights):
    """max_min_fairness answers alike, oversubscribed jobs without the LP (max_min's
    _alike_oversubscribed): the same X as the LP's, and the LP where the jobs are not alike."""
    from dlsched.policies.hetero import max_min
    table = load_throughputs("gavel")
    rng = random.Random(n)
    jobs = [hetero.HeteroJob(j.job_id, j.job_type, scale, (1.0 + (i % 3)) if weights else 1.0, j.remaining_steps)
            for i, j in enumerate(_jobs(rng, table, list(range(n))))]
    cluster = {"V100": 12, "P100": 12, "K80": 12}
    fast = hetero.max_min_fairness(jobs, cluster, table)
    took = max_min._alike_oversubscribed(jobs, np.array([12.0] * 3), np.ones((n, 3)))
    assert (took is None) == bool(weights)
    monkeypatch.setattr(max_min, "_alike_oversubscribed", lambda *a: None)
    lp = hetero.max_min_fairness(jobs, cluster, table)
    assert fast.keys() == lp.keys()
    assert max(abs(fast[j][t] - lp[j][t]) for j in lp for t in lp[j]) < 1e-9
