"""Isolated shares, minimum total duration and maximum sum of throughput: Gavel's `isolated.py`,
`min_total_duration.py` and `max_sum_throughput.py`, written from the formulas (notation: package
docstring).

- `isolated` (Gavel's `IsolatedPolicy`, Themis's baseline): X[m, j] = N_j / (n s_m), each row
  divided by max(sum_j X[m, j], 1): every job an equal 1/n slice of every type, in GPU-time.
- `min_total_duration_perf`: the smallest T such that every job can finish within T,

      minimise T  s.t.  tput_m(X) >= R_m / T  for every job,  Gavel's base constraints.

  With u = 1/T this is one LP: max u s.t. E_m x >= R_m u. Gavel bisects T over [100, 1e6] s to
  a factor 1.05 (widened x10 while infeasible) and returns a feasible X at the last T it
  accepted, so its T is within 5 % above the optimum; here T* = 1/u* exactly (HiGHS's
  tolerance). Jobs with R_m = 0 add no row.
- `min_total_duration` (agnostic): the same with T[m, j] := T[m, reference] (Gavel: v100);
  returned spread over types in proportion to N_j, as the agnostic max-min
  (`common.spread_type_blind`).
- `max_sum_throughput_perf` (Gavel's `ThroughputNormalizedByCostSum(WithPerf|WithPerfSLOs)`):

      maximise  sum_m sum_j T[m, j] X[m, j] / c_j      (c_j = 1, or $/h per GPU with `costs`)

  raw steps/s, no s_m and no normalisation, as Gavel. A job with `deadline_in_s` adds
  tput_m(X) >= R_m / deadline_in_s (the SLO). If the SLOs cannot all hold, the problem is solved
  again without them, as Gavel does (`strict=True` raises `InfeasibleError` instead).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dlsched.core.errors import ConfigError
from dlsched.policies.hetero.common import (
    agnostic_reference,
    Allocation,
    HeteroJob,
    InfeasibleError,
    Problem,
    Table,
    alone_matrix,
    check_jobs,
    gpu_types,
    isolated_fractions,
    matrix_allocation,
    reference_matrix,
    singles_problem,
    solve_lp,
    spread_type_blind,
    to_allocation,
)


def _scale(jobs: Sequence[HeteroJob]) -> np.ndarray:
    return np.array([j.scale_factor for j in jobs], dtype=float)


def isolated(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table | None = None) -> Allocation:
    """X[m, j] = N_j / (n s_m) / max(sum_j N_j / (n s_m), 1). `table` is not read."""
    check_jobs(jobs)
    types, N = gpu_types(cluster)
    return matrix_allocation(jobs, types, isolated_fractions(_scale(jobs), N))


def isolated_throughputs(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                         *, reference: str | None = None) -> dict[str, float]:
    """tput_iso_m = sum_j T[m, j] X_iso[m, j] (with `reference`, T[m, j] := T[m, reference]:
    the agnostic finish-time fairness's view). Themis's denominator and C_m's rate."""
    check_jobs(jobs)
    types, N = gpu_types(cluster)
    T = alone_matrix(jobs, types, table)
    if reference is not None:
        T = reference_matrix(T, types, reference)
    iso = (T * isolated_fractions(_scale(jobs), N)).sum(axis=1)
    return {j.job_id: float(v) for j, v in zip(jobs, iso)}


def _min_duration(prob: Problem, jobs: Sequence[HeteroJob], what: str) -> np.ndarray:
    from scipy import sparse
    R = np.array([j.remaining_steps for j in jobs], dtype=float)
    rows = np.flatnonzero(R > 0)
    V = prob.n_vars
    if len(rows) == 0:
        return np.zeros(V)
    base, b_base = prob.base_rows()
    # u R_m - E_m x <= 0 ;  max u
    A = sparse.vstack([sparse.hstack([-prob.E[rows], sparse.csr_matrix(R[rows].reshape(-1, 1))]),
                       sparse.hstack([base, sparse.csr_matrix((base.shape[0], 1))])], format="csr")
    c = np.zeros(V + 1)
    c[-1] = -1.0
    sol = solve_lp(c, A, np.concatenate([np.zeros(len(rows)), b_base]), [(0, None)] * (V + 1), what)
    return sol[:V]


def min_total_duration_perf(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table) -> Allocation:
    """min T s.t. sum_j T[m, j] X[m, j] >= R_m / T for every job (as max u = 1/T, one LP)."""
    check_jobs(jobs)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    prob = singles_problem(jobs, types, N, alone_matrix(jobs, types, table))
    return to_allocation(prob, _min_duration(prob, jobs, "min_total_duration_perf"))


def min_total_duration(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                       *, reference: str | None = None) -> Allocation:
    """Agnostic: `min_total_duration_perf` with T[m, j] := T[m, reference] (default: the table's
    reference type, else V100, Gavel's hard-coded v100)."""
    check_jobs(jobs)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    ref = agnostic_reference(types, table, reference)
    T = reference_matrix(alone_matrix(jobs, types, table), types, ref)
    prob = singles_problem(jobs, types, N, T)
    X = _min_duration(prob, jobs, "min_total_duration").reshape(len(jobs), len(types))
    return to_allocation(prob, spread_type_blind(X, N, T, _scale(jobs)).ravel())


def max_sum_throughput_perf(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                            *, costs: Mapping[str, float] | None = None, strict: bool = False) -> Allocation:
    """max sum_m sum_j T[m, j] X[m, j] / c_j, with tput_m >= R_m / deadline_in_s for jobs with an
    SLO (dropped, as Gavel, when they cannot all hold, unless `strict`)."""
    from scipy import sparse
    check_jobs(jobs)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    c_j = np.ones(len(types))
    if costs is not None:
        for j, t in enumerate(types):
            if t not in costs or not costs[t] > 0:
                raise ConfigError(f"costs.{t}", f"a cost > 0 is required for every GPU type, got {costs.get(t)!r}")
            c_j[j] = float(costs[t])
    T = alone_matrix(jobs, types, table)
    prob = singles_problem(jobs, types, N, T)
    base, b_base = prob.base_rows()
    objective = -(T / c_j[None, :]).ravel()
    bounds = [(0, None)] * prob.n_vars
    slo = [i for i, j in enumerate(jobs) if j.deadline_in_s is not None and j.remaining_steps > 0]
    if slo:
        need = np.array([jobs[i].remaining_steps / jobs[i].deadline_in_s for i in slo])
        A = sparse.vstack([-prob.E[slo], base], format="csr")
        try:
            x = solve_lp(objective, A, np.concatenate([-need, b_base]), bounds, "max_sum_throughput_perf")
            return to_allocation(prob, x)
        except InfeasibleError:
            if strict:
                raise
    return to_allocation(prob, solve_lp(objective, base, b_base, bounds, "max_sum_throughput_perf"))
