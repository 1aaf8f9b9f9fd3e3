"""Gavel's heterogeneity-aware policies (dlsched.policies.hetero) against Gavel's own tests and
hand-derived optima.

Gavel's `scheduler/tests/policies_tests.py` (stanford-futuredata/gavel c4fa400) asserts numbers
in one case only (`test_isolated`: min_m s_m sum_j X[m, j] of isolated == of max-min fairness)
and properties in `test_allox`; its other cases only call the policies. For those, the optimum
on the same fixture is derived by hand here (the derivation sits in each test's comment).
Gavel's fixture: job 0 steps/s (V100, P100, K80) = (2, 1, 0.5), job 1 = (3, 2, 1); the pair
(0, 1) runs each at its alone speed on every type.
"""
from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from dlsched.core.errors import ConfigError
from dlsched.policies import hetero
from dlsched.policies.hetero import HeteroJob
from dlsched.policies.hetero.common import (
    InfeasibleError,
    alone_matrix,
    gpu_types,
    max_min_solve,
    proportional_throughputs,
    singles_problem,
)
from dlsched.policies.hetero.finish_time import finish_time_ratios
from dlsched.workload.throughputs import ThroughputTable, load_throughputs

TYPES = ("V100", "P100", "K80")
C126 = {"V100": 1, "P100": 2, "K80": 3}        # Gavel: test_max_min_fairness_with_perf, test_finish_time_*
C111 = {"V100": 1, "P100": 1, "K80": 1}        # Gavel: test_throughput_sum*, test_*_with_packing
COSTS = {"V100": 3.1, "P100": 2.0, "K80": 0.8}  # Gavel: test_throughput_sum_normalized_by_cost*


def toy_table(speeds: dict[str, tuple[float, ...]], gpus=(1, 2, 4), pair_free=True) -> ThroughputTable:
    """Alone speeds per job type (V100, P100, K80), the same at every GPU count (as Gavel's test
    feeds one throughput per job whatever its scale factor); pairs at alone speed."""
    alone, pairs = {}, {}
    for jt, v in speeds.items():
        for g in gpus:
            for t, x in zip(TYPES, v):
                alone[(jt, g, t)] = x
    if pair_free:
        for a, va in speeds.items():
            for b, vb in speeds.items():
                for g in gpus:
                    for t, xa, xb in zip(TYPES, va, vb):
                        pairs[(a, g, b, t)] = (xa, xb)
    return ThroughputTable("toy", "V100", alone, pairs)


GAVEL = toy_table({"A": (2.0, 1.0, 0.5), "B": (3.0, 2.0, 1.0)})


def gavel_jobs(r0=300.0, r1=500.0, s0=1, s1=1):
    return [HeteroJob("0", "A", s0, remaining_steps=r0), HeteroJob("1", "B", s1, remaining_steps=r1)]


def matrix(jobs, alloc, types):
    return np.array([[alloc[j.job_id][t] for t in types] for j in jobs])


def check_base_constraints(jobs, alloc, cluster):
    """Gavel's base constraints: X >= 0, sum_j X <= 1, sum_m s_m X[m, j] <= N_j."""
    types = sorted(cluster)
    X = matrix(jobs, alloc, types)
    s = np.array([j.scale_factor for j in jobs])
    assert (X >= 0).all() and (X <= 1 + 1e-9).all()
    assert (X.sum(axis=1) <= 1 + 1e-7).all()
    assert ((s[:, None] * X).sum(axis=0) <= np.array([cluster[t] for t in types]) + 1e-6).all()


def random_case(n=40, seed=3, per_type=8, single_gpu=False):
    table = load_throughputs("gavel")
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        while True:
            jt = rng.choice(table.job_types())
            sf = 1 if single_gpu else rng.choice([1, 1, 1, 2, 4])
            if sf in table.gpu_counts(jt):
                break
        jobs.append(HeteroJob(f"j{i}", jt, sf, rng.choice([1.0, 2.0]), rng.uniform(1e3, 1e5),
                              rng.uniform(0, 3600)))
    return jobs, {"K80": per_type, "P100": per_type, "V100": per_type}, table


# -- G0: Gavel's test cases --------------------------------------------------------------------------
@pytest.mark.parametrize("cluster", [{"V100": 4, "P100": 4, "K80": 4}, {"V100": 4, "P100": 8, "K80": 6}])
@pytest.mark.parametrize("scale", [(1, 1), (2, 1), (2, 2), (4, 1)])
def test_isolated_min_equals_max_min_fairness_as_gavel_test_isolated(cluster, scale):
    # Gavel policies_tests.py::test_isolated, all 8 cases: min_m s_m sum_j X[m, j] agrees.
    # By hand: isolated gives s_m min(sum N / (2 s_m), 1) = min(sum N / 2, s_m); max-min's t is
    # capped by s_m (row <= 1); sum N / 2 >= 6 > 4, so both equal min(s).
    jobs = gavel_jobs(s0=scale[0], s1=scale[1])
    iso, mmf = hetero.isolated(jobs, cluster, GAVEL), hetero.max_min_fairness(jobs, cluster, GAVEL)
    got_iso = min(j.scale_factor * sum(iso[j.job_id].values()) for j in jobs)
    got_mmf = min(j.scale_factor * sum(mmf[j.job_id].values()) for j in jobs)
    assert got_iso == pytest.approx(got_mmf) == pytest.approx(min(scale))


def test_max_min_fairness_perf_on_gavel_fixture():
    # Gavel test_max_min_fairness_with_perf (no numbers there). By hand: P_0 = 5.5/6, P_1 = 10/6;
    # only the one V100 is contended; job 0 takes a of it (rest P100), job 1 takes 1 - a (rest
    # P100): (1 + a) / P_0 = (3 - a) / P_1  =>  a = 13/31, both normalised = 48/31.
    jobs = gavel_jobs()
    alloc = hetero.max_min_fairness_perf(jobs, C126, GAVEL)
    tput = hetero.effective_throughputs(jobs, alloc, GAVEL)
    assert tput["0"] / (5.5 / 6) == pytest.approx(48 / 31, rel=1e-7)
    assert tput["1"] / (10 / 6) == pytest.approx(48 / 31, rel=1e-7)
    assert alloc["0"] == pytest.approx({"V100": 13 / 31, "P100": 18 / 31, "K80": 0.0}, abs=1e-7)
    assert alloc["1"] == pytest.approx({"V100": 18 / 31, "P100": 13 / 31, "K80": 0.0}, abs=1e-7)


def test_max_min_fairness_agnostic_on_gavel_fixture_is_type_blind():
    # Agnostic: T := 1, both jobs fit whole (6 GPUs), so each gets total time 1, spread N_j / 6.
    alloc = hetero.max_min_fairness(gavel_jobs(), C126, GAVEL)
    for row in alloc.values():
        assert row == pytest.approx({"V100": 1 / 6, "P100": 2 / 6, "K80": 3 / 6})


def test_finish_time_fairness_perf_on_gavel_fixture_two_calls():
    # Gavel test_finish_time_fairness_with_perf: R = (300, 500), then (200, 300), t = 0.
    # Call 1: C = 0, so rho_m = tput_iso_m / tput_m with tput_iso = P (isolated = proportional
    # here): the max-min LP, rho* = 31/48.  Call 2: C_0 = 100 / (11/12), C_1 = 200 / (5/3) = 120,
    # D_0 = 3600/11, D_1 = 300: rho_0 = (11/18) / (1 + a), rho_1 = 1 / (3 - a) => a = 15/29,
    # rho* = 29/72.
    jobs = gavel_jobs()
    alloc = hetero.finish_time_fairness_perf(jobs, C126, GAVEL)
    assert max(finish_time_ratios(jobs, C126, GAVEL, alloc).values()) == pytest.approx(31 / 48, rel=1e-5)
    iso = hetero.isolated_throughputs(jobs, C126, GAVEL)
    assert iso == pytest.approx({"0": 11 / 12, "1": 5 / 3})
    jobs = [hetero.advance_isolated_time(j, r, iso[j.job_id]) for j, r in zip(jobs, (200, 300))]
    assert [j.isolated_time_s for j in jobs] == pytest.approx([1200 / 11, 120])
    alloc = hetero.finish_time_fairness_perf(jobs, C126, GAVEL)
    rho = finish_time_ratios(jobs, C126, GAVEL, alloc)
    assert max(rho.values()) == pytest.approx(29 / 72, rel=1e-5)
    assert alloc["0"]["V100"] == pytest.approx(15 / 29, abs=1e-4)


def test_finish_time_fairness_agnostic_on_gavel_fixture():
    # Gavel test_finish_time_fairness: T := T_V100 = (2, 3) everywhere, iso = (2, 3) (rows sum 1).
    # Call 1: rho = 1 / y_m, y = 1: rho* = 1.  Call 2: C = (100/2, 200/3); rho_0 = (100 / y_0) /
    # 150, rho_1 = (100 / y_1) / (500/3): rho* = 2/3 at y_0 = 1 (job 1 needs only y_1 >= 0.9).
    jobs = gavel_jobs()
    alloc = hetero.finish_time_fairness(jobs, C126, GAVEL)
    assert max(finish_time_ratios(jobs, C126, GAVEL, alloc, reference="V100").values()) == pytest.approx(1.0, rel=1e-5)
    iso = hetero.isolated_throughputs(jobs, C126, GAVEL, reference="V100")
    assert iso == pytest.approx({"0": 2.0, "1": 3.0})
    jobs = [hetero.advance_isolated_time(j, r, iso[j.job_id]) for j, r in zip(jobs, (200, 300))]
    alloc = hetero.finish_time_fairness(jobs, C126, GAVEL)
    rho = finish_time_ratios(jobs, C126, GAVEL, alloc, reference="V100")
    assert rho["0"] == pytest.approx(2 / 3, rel=1e-5) and max(rho.values()) == pytest.approx(2 / 3, rel=1e-5)


def test_finish_time_fairness_perf_is_optimal_by_certificate():
    # rho* is optimal: 0.9999 rho* is infeasible (max lambda < 1 in the feasibility LP).
    jobs, cluster, table = random_case(n=30, seed=5)
    alloc = hetero.finish_time_fairness_perf(jobs, cluster, table)
    check_base_constraints(jobs, alloc, cluster)
    rho_star = max(finish_time_ratios(jobs, cluster, table, alloc).values())
    iso = hetero.isolated(jobs, cluster, table)
    assert rho_star <= max(finish_time_ratios(jobs, cluster, table, iso).values()) + 1e-9
    types, N = gpu_types(cluster)
    T = alone_matrix(jobs, types, table)
    prob = singles_problem(jobs, types, N, T)
    iso_t = hetero.isolated_throughputs(jobs, cluster, table)
    rho = 0.9999 * rho_star
    t = np.array([j.time_since_arrival_s for j in jobs])
    R = np.array([j.remaining_steps for j in jobs])
    D = np.array([j.isolated_time_s + j.remaining_steps / iso_t[j.job_id] for j in jobs])
    from scipy import sparse
    B = sparse.diags((rho * D - t) / R) @ prob.E
    _, lam = max_min_solve(prob, B, np.zeros(len(jobs)), np.ones(len(jobs), bool), "certificate")
    assert lam < 1.0


def test_min_total_duration_on_gavel_fixture():
    # Not in Gavel's tests. By hand (R = 300, 500): V100 split a / 1 - a, rest P100:
    # (1 + a) / 300 = (3 - a) / 500 => a = 1/2, T* = 200 s (Gavel's bisection: within [200, 210]).
    jobs = gavel_jobs()
    alloc = hetero.min_total_duration_perf(jobs, C126, GAVEL)
    tput = hetero.effective_throughputs(jobs, alloc, GAVEL)
    assert max(j.remaining_steps / tput[j.job_id] for j in jobs) == pytest.approx(200.0, rel=1e-7)
    assert alloc["0"]["V100"] == pytest.approx(0.5, abs=1e-7)
    # Agnostic: T := T_V100 = (2, 3), y = 1 each: T* = max(300/2, 500/3) = 500/3 in its own view.
    agn = hetero.min_total_duration(jobs, C126, GAVEL)
    y = {m: sum(r.values()) for m, r in agn.items()}
    assert max(300 / (2 * y["0"]), 500 / (3 * y["1"])) == pytest.approx(500 / 3, rel=1e-7)
    check_base_constraints(jobs, agn, C126)


def _value(jobs, alloc, costs=None):
    return sum(GAVEL.steps_per_s(j.job_type, 1, t) * v / (costs[t] if costs else 1.0)
               for j in jobs for t, v in alloc[j.job_id].items())


def test_max_sum_throughput_as_gavel_tests():
    jobs = gavel_jobs()
    # Gavel test_throughput_sum: each job <= 1 time, one GPU per type. By hand: 4 (1 on V100 + 0
    # on P100, or the reverse; any split of the two is optimal).
    assert _value(jobs, hetero.max_sum_throughput_perf(jobs, C111, GAVEL)) == pytest.approx(4.0)
    # Gavel test_throughput_sum_normalized_by_cost: steps per $ job 0 (0.645, 0.5, 0.625), job 1
    # (0.968, 1.0, 1.25): job 0 on V100, job 1 on K80 = 2/3.1 + 1.25, unique.
    alloc = hetero.max_sum_throughput_perf(jobs, C111, GAVEL, costs=COSTS)
    assert alloc["0"] == pytest.approx({"V100": 1.0, "P100": 0.0, "K80": 0.0}, abs=1e-9)
    assert alloc["1"] == pytest.approx({"V100": 0.0, "P100": 0.0, "K80": 1.0}, abs=1e-9)
    # Gavel test_throughput_sum_normalized_by_cost_with_SLOs: SLO 1000 s, R_0 = 100: needs 0.1
    # steps/s, not binding: the same allocation.
    slo = [dataclasses.replace(jobs[0], remaining_steps=100, deadline_in_s=1000), jobs[1]]
    assert hetero.max_sum_throughput_perf(slo, C111, GAVEL, costs=COSTS) == alloc


def test_max_sum_throughput_binding_and_infeasible_slo():
    # Hand-derived: job 1 must reach 2.5 steps/s (R = 2500 in 1000 s). With 3v + 2p + k = 2.5 at
    # full time, the total is 1.520 + 0.198 v over v in [1/2, 3/4]: v = 3/4, k = 1/4; job 0 takes
    # the V100 quarter and K80's three quarters: 2.75/3.1 + 0.78125.
    jobs = [gavel_jobs()[0], HeteroJob("1", "B", remaining_steps=2500, deadline_in_s=1000)]
    alloc = hetero.max_sum_throughput_perf(jobs, C111, GAVEL, costs=COSTS)
    assert _value(jobs, alloc, COSTS) == pytest.approx(2.75 / 3.1 + 0.78125, rel=1e-7)
    assert alloc["1"] == pytest.approx({"V100": 0.75, "P100": 0.0, "K80": 0.25}, abs=1e-7)
    # Infeasible SLO (10 steps/s > 3): Gavel drops the SLOs; strict raises.
    bad = [jobs[0], dataclasses.replace(jobs[1], remaining_steps=10_000)]
    assert hetero.max_sum_throughput_perf(bad, C111, GAVEL, costs=COSTS) == \
        hetero.max_sum_throughput_perf(gavel_jobs(), C111, GAVEL, costs=COSTS)
    with pytest.raises(InfeasibleError):
        hetero.max_sum_throughput_perf(bad, C111, GAVEL, costs=COSTS, strict=True)


def test_max_min_fairness_packed_on_gavel_fixture():
    # Gavel test_max_min_fairness_with_packing (no numbers). By hand: P_0 = 7/6, P_1 = 2; job 1
    # at most 3 steps/s (all its time on V100) = 1.5 normalised, reached with the pair on V100
    # full time (job 0 then 2 / (7/6) = 12/7 > 1.5): optimum 3/2, job 1 all on V100.
    jobs = gavel_jobs()
    packed = hetero.max_min_fairness_packed(jobs, C111, GAVEL)
    tput = hetero.effective_throughputs(jobs, packed, GAVEL)
    assert min(tput["0"] / (7 / 6), tput["1"] / 2) == pytest.approx(1.5, rel=1e-7)
    assert hetero.job_shares(packed)["1"]["V100"] == pytest.approx(1.0, abs=1e-7)
    assert set(packed) <= {("0",), ("1",), ("0", "1")}


def test_allox_as_gavel_test_allox():
    # Gavel test_allox: two calls; jobs still running keep their allocation, no type over-used.
    speeds = {"a0": (2.0, 1.0, 0.5), "a1": (3.0, 2.0, 1.0), "a2": (4.0, 3.0, 2.0), "a3": (1.0, 1.0, 1.0),
              "a4": (4.0, 2.0, 1.0)}
    table = toy_table(speeds, gpus=(1,), pair_free=False)
    cluster = {"V100": 2, "P100": 1, "K80": 3}
    jobs1 = [HeteroJob(str(i), f"a{i}", remaining_steps=r) for i, r in enumerate((300, 500, 1000, 500))]
    a1 = hetero.allox(jobs1, cluster, table)
    jobs2 = [HeteroJob(str(i), f"a{i}", remaining_steps=r, time_since_arrival_s=t)
             for i, r, t in ((1, 100, 200), (2, 800, 200), (3, 400, 200), (4, 100, 0))]
    a2 = hetero.allox(jobs2, cluster, table, previous=a1)
    for job_id in a1:
        if job_id in a2:
            assert a1[job_id] == a2[job_id]
    for alloc in (a1, a2):
        for t, n in cluster.items():
            assert sum(row[t] for row in alloc.values()) <= n
    # 4 jobs, 6 GPUs: each first matching puts every job first on some GPU
    assert all(sum(row.values()) == 1.0 for row in a1.values())


def test_allox_reduced_columns_keep_gavels_optimum():
    # Gavel's full (GPU, k <= n) columns against ours (k <= ceil(n / F_t)): the same optimal cost.
    from scipy.optimize import linear_sum_assignment
    rng = np.random.default_rng(0)
    for case in range(40):
        n = int(rng.integers(2, 9))
        free = [1, 1, 1] if case % 2 else [int(x) for x in rng.integers(1, 4, size=3)]
        q = rng.uniform(1, 100, size=(n, 3))
        d = rng.uniform(0, 50, size=n)
        gpus = [t for t in range(3) for _ in range(free[t])]
        full = np.concatenate([k * q[:, gpus] + d[:, None] for k in range(1, n + 1)], axis=1)
        r, c = linear_sum_assignment(full)
        reduced = np.concatenate([k * q[:, [t] * free[t]] + d[:, None] for t in range(3)
                                  for k in range(1, -(-n // free[t]) + 1)], axis=1)
        r2, c2 = linear_sum_assignment(reduced)
        assert full[r, c].sum() == pytest.approx(reduced[r2, c2].sum())
        # and `allox` runs first what Gavel's full matching runs first. With one free GPU per type
        # the matching is unique (random costs); with more, which of a type's tied positions goes
        # to which GPU is arbitrary (in Gavel too), and so is who of them runs now.
        if max(free) > 1:
            continue
        first = {}
        for i, col in zip(r, c):
            g, k = col % len(gpus), col // len(gpus)
            if g not in first or k > first[g][0]:
                first[g] = (k, i)
        want = {str(i): TYPES[gpus[g]] for g, (_, i) in first.items()}
        speeds = {f"t{i}": tuple(1000.0 / q[i]) for i in range(n)}      # R = 1000: q = R / T
        jobs = [HeteroJob(str(i), f"t{i}", remaining_steps=1000.0, time_since_arrival_s=float(d[i]))
                for i in range(n)]
        alloc = hetero.allox(jobs, dict(zip(TYPES, free)), toy_table(speeds, gpus=(1,), pair_free=False))
        assert {m: t for m, row in alloc.items() for t, v in row.items() if v == 1.0} == want


# -- properties ---------------------------------------------------------------------------------------
LPS = ["max_min_fairness", "max_min_fairness_perf", "max_min_fairness_water_filling",
       "max_min_fairness_water_filling_perf", "finish_time_fairness", "finish_time_fairness_perf",
       "min_total_duration", "min_total_duration_perf", "max_sum_throughput_perf", "isolated"]


@pytest.mark.parametrize("name", LPS)
def test_every_policy_keeps_gavels_base_constraints(name):
    jobs, cluster, table = random_case()
    alloc = getattr(hetero, name)(jobs, cluster, table)
    assert set(alloc) == {j.job_id for j in jobs}
    check_base_constraints(jobs, alloc, cluster)
    assert getattr(hetero, name)([], cluster, table) == {}


def test_packed_keeps_constraints_and_beats_singles():
    jobs, cluster, table = random_case(n=14, per_type=3)
    packed = hetero.max_min_fairness_packed(jobs, cluster, table)
    s = {j.job_id: j.scale_factor for j in jobs}
    for t in cluster:      # a pair counts once against N_j
        assert sum(s[c[0]] * row[t] for c, row in packed.items()) <= cluster[t] + 1e-6
    for row in hetero.job_shares(packed).values():
        assert sum(row.values()) <= 1 + 1e-7
    assert all(len(c) == 1 or s[c[0]] == s[c[1]] for c in packed)
    types, N = gpu_types(cluster)
    P = proportional_throughputs(alone_matrix(jobs, types, table), N)

    def objective(tput):
        return min(j.scale_factor * tput[j.job_id] / (j.priority_weight * p) for j, p in zip(jobs, P))
    single = hetero.max_min_fairness_perf(jobs, cluster, table)
    assert objective(hetero.effective_throughputs(jobs, packed, table)) >= \
        objective(hetero.effective_throughputs(jobs, single, table)) - 1e-7


def test_agnostic_max_min_gives_equal_normalised_throughput():
    jobs, cluster, table = random_case(n=40, per_type=4)   # contended: 12 GPUs for 40 jobs
    alloc = hetero.max_min_fairness(jobs, cluster, table)
    types, N = gpu_types(cluster)
    P = proportional_throughputs((alone_matrix(jobs, types, table) > 0).astype(float), N)
    assert P.min() == pytest.approx(2 / 3) and P.max() == 1.0    # ResNet-50 bs128 multi-GPU: no K80
    share = [j.scale_factor * sum(alloc[j.job_id].values()) / (j.priority_weight * p) for j, p in zip(jobs, P)]
    assert max(share) - min(share) < 1e-7
    # and with the cluster's GPU-time all handed out
    assert sum(j.scale_factor * sum(alloc[j.job_id].values()) for j in jobs) == pytest.approx(12)


def test_perf_gives_each_job_at_least_the_agnostic_throughput_where_types_differ():
    # Hand-derived: jobs A1, A2 run 4 / 1 steps/s on V100 / P100, B1, B2 run 1 / 2; one GPU of
    # each. Agnostic: each job 1/4 of each type: A 1.25, B 0.75. Perf: P_A = 2.5, P_B = 1.5; As
    # share the V100 less v each to the Bs, who fill the P100: A (2 - 4v) / 2.5 = B (1 + v) / 1.5
    # => v = 1/17, normalised 12/17 both: A 30/17 steps/s, B 18/17.
    table = ThroughputTable("x", "V100", {("A", 1, "V100"): 4.0, ("A", 1, "P100"): 1.0,
                                          ("B", 1, "V100"): 1.0, ("B", 1, "P100"): 2.0})
    jobs = [HeteroJob(n, n[0]) for n in ("A1", "A2", "B1", "B2")]
    cluster = {"V100": 1, "P100": 1}
    agn = hetero.effective_throughputs(jobs, hetero.max_min_fairness(jobs, cluster, table), table)
    perf = hetero.effective_throughputs(jobs, hetero.max_min_fairness_perf(jobs, cluster, table), table)
    assert agn == pytest.approx({"A1": 1.25, "A2": 1.25, "B1": 0.75, "B2": 0.75})
    assert perf == pytest.approx({"A1": 30 / 17, "A2": 30 / 17, "B1": 18 / 17, "B2": 18 / 17}, rel=1e-7)
    assert all(perf[m] >= agn[m] for m in agn)


def test_perf_raises_the_minimum_over_agnostic_on_gavels_table():
    # The agnostic X is feasible for the perf LP, so the perf minimum is at least its own.
    jobs, cluster, table = random_case(n=40, per_type=6)
    types, N = gpu_types(cluster)
    P = proportional_throughputs(alone_matrix(jobs, types, table), N)

    def low(alloc):
        tput = hetero.effective_throughputs(jobs, alloc, table)
        return min(j.scale_factor * tput[j.job_id] / (j.priority_weight * p) for j, p in zip(jobs, P))
    assert low(hetero.max_min_fairness_perf(jobs, cluster, table)) >= \
        low(hetero.max_min_fairness(jobs, cluster, table)) - 1e-9


def test_water_filling_gives_the_rest_to_who_can_use_it():
    # By hand: A runs on K80 only (P_A = 1/2), B on both (P_B = 1). Max-min stops at B's cap 1;
    # water filling freezes B there and raises A to its whole K80: 2.
    table = ThroughputTable("x", "V100", {("A", 1, "K80"): 1.0, ("B", 1, "V100"): 1.0, ("B", 1, "K80"): 1.0})
    jobs = [HeteroJob("A", "A"), HeteroJob("B", "B")]
    cluster = {"V100": 1, "K80": 1}
    alloc = hetero.max_min_fairness_water_filling_perf(jobs, cluster, table)
    assert alloc["A"] == pytest.approx({"K80": 1.0, "V100": 0.0}, abs=1e-6)
    assert alloc["B"] == pytest.approx({"K80": 0.0, "V100": 1.0}, abs=1e-6)


def test_hierarchical_water_filling_shares_by_entity():
    # By hand: 2 GPUs, T = 1. Entity e1 (weight 1, fairness) holds a, b; e2 (weight 1, fifo) c, d.
    # Weights a, b = 1/2, c = 1, d = 0: levels rise as w, a + b + c = 2 => a = b = 1/2, c = 1.
    table = toy_table({"J": (1.0, 1.0, 1.0)})
    jobs = [HeteroJob(n, "J", entity=e) for n, e in (("a", "e1"), ("b", "e1"), ("c", "e2"), ("d", "e2"))]
    entities = {"e1": (1.0, "fairness"), "e2": (1.0, "fifo")}
    alloc = hetero.max_min_fairness_water_filling_perf(jobs, {"V100": 2}, table, entities=entities)
    got = {m: sum(r.values()) for m, r in alloc.items()}
    assert got == pytest.approx({"a": 0.5, "b": 0.5, "c": 1.0, "d": 0.0}, abs=1e-6)
    with pytest.raises(ConfigError, match="entity"):
        hetero.max_min_fairness_water_filling_perf(jobs, {"V100": 2}, table, entities={"e1": (1.0, "fifo")})


def test_fifo_modes():
    table = toy_table({"A": (2.0, 1.0, 0.5), "B": (1.0, 3.0, 1.0)}, gpus=(1,))
    jobs = [HeteroJob("0", "A"), HeteroJob("1", "B"), HeteroJob("2", "A")]
    alloc, placed = hetero.fifo(jobs, C111, table, mode="perf")
    assert placed == {"0": "V100", "1": "P100", "2": "K80"}        # each the best type left
    alloc, placed = hetero.fifo(jobs[:1] + jobs[2:], {"V100": 1}, table, mode="base",
                                running={"1": "V100"})
    assert placed == {"0": "V100"} and alloc["2"]["V100"] == 0.0    # freed GPU to the queue head
    packed, placed = hetero.fifo(jobs, {"V100": 1}, table, mode="packed")
    assert packed[("0", "1")]["V100"] == 1.0 and placed == {"0": "V100", "1": "V100"}
    _, quirk = hetero.fifo(jobs, {"K80": 1, "V100": 1}, table, mode="base", gavel_type_quirk=True)
    # Gavel's code: the type is the last of [K80, V100] with a free GPU, V100; the drawn index
    # (random.Random(0).randrange(2) = 1) is what leaves the list when V100 fills, V100 itself,
    # so job 1 takes K80; then the list is empty and job 2 waits
    assert quirk == {"0": "V100", "1": "K80"}


def test_fifo_base_running_job_keeps_its_type():
    table = toy_table({"A": (2.0, 1.0, 0.5)}, gpus=(1,))
    jobs = [HeteroJob("0", "A"), HeteroJob("1", "A")]
    _, placed = hetero.fifo(jobs, {"K80": 1, "V100": 1}, table, mode="base", running={"1": "K80"},
                            rng=random.Random(1))
    assert placed == {"1": "K80", "0": "V100"}


def test_gandiva_as_gavel_test_gandiva():
    # Gavel test_gandiva calls it on three fixtures (no numbers). By hand: 2 jobs on 3 GPUs fit:
    # isolated shares; on 1 V100 they are oversubscribed and pair (equal share 1 to the pair).
    jobs = gavel_jobs()
    out, pairs = hetero.gandiva(jobs, C111, GAVEL)
    assert pairs == [] and out[("0",)] == pytest.approx({"V100": 1 / 3, "P100": 1 / 3, "K80": 1 / 3})
    out, pairs = hetero.gandiva(jobs, {"V100": 1}, GAVEL, rng=random.Random(0))
    assert pairs == [("0", "1")] and out[("0", "1")] == {"V100": 1.0}
    # A kept pair stays while its packed throughput summed over types is >= 1 (here 6), and is
    # dropped below (Gavel's fixture 3: T_pair = (1, 1) against (2, 3): 1/2 + 1/3 per type).
    three = jobs + [HeteroJob("2", "A")]
    out, pairs = hetero.gandiva(three, {"V100": 1}, GAVEL, pairs=[("0", "1")])
    assert pairs == [("0", "1")]
    assert out[("0", "1")] == out[("2",)] == {"V100": 0.5}
    slow = ThroughputTable("slow", "V100", dict(toy_table({"A": (2.0, 1.0, 0.5), "B": (3.0, 2.0, 1.0)})._alone),
                           {("A", 1, "B", t): (1.0, 1.0) for t in TYPES})
    _, pairs = hetero.gandiva(jobs, {"V100": 3}, slow, pairs=[("0", "1")])
    assert pairs == []                                  # 0.83 < 1 on the one type
    _, pairs = hetero.gandiva(jobs, C111, slow, pairs=[("0", "1")])
    assert pairs == [("0", "1")]                        # Gavel's sum over 3 types: 2.5 >= 1


def test_validation():
    with pytest.raises(ConfigError, match="scale_factor"):
        HeteroJob("x", "A", 0)
    with pytest.raises(ConfigError, match="twice"):
        hetero.max_min_fairness_perf([HeteroJob("x", "A"), HeteroJob("x", "B")], C111, GAVEL)
    with pytest.raises(ConfigError, match="cluster.V100"):
        hetero.max_min_fairness_perf(gavel_jobs(), {"V100": -1}, GAVEL)
    with pytest.raises(ConfigError, match="1-GPU"):
        hetero.allox(gavel_jobs(s0=2), C111, GAVEL)
    assert math.isfinite(hetero.HeteroJob("x", "A", deadline_in_s=5.0).deadline_in_s)


def test_agnostic_policies_without_v100s_take_the_clusters_first_type():
    """With no reference named by the call and no V100 in the cluster (the runtime's `fake-gpu`
    nodes under the bundled table, whose reference is V100), the agnostic policies view every
    type as the cluster's first; before, every round failed with "GPU type 'V100' is not in the
    cluster" and the runtime held every job (benchmarks/runtime_matrix.py). A type the call
    names and the cluster lacks is still refused."""
    cluster = {"P100": 2, "K80": 3}
    jobs = gavel_jobs()
    for table in (GAVEL, ThroughputTable("toy", None, GAVEL._alone, GAVEL._pairs)):
        for policy in (hetero.finish_time_fairness, hetero.min_total_duration):
            got = policy(jobs, cluster, table)
            assert got == policy(jobs, cluster, table, reference="K80")
            assert sum(got["0"].values()) > 0 and sum(got["1"].values()) > 0
            with pytest.raises(ConfigError, match="'V100' is not in the cluster"):
                policy(jobs, cluster, table, reference="V100")
