"""Finish-time fairness (Themis's rho) over GPU types: Gavel's `finish_time_fairness.py`, written
from the formula (notation: package docstring).

    minimise  max_m rho_m(X),   rho_m(X) = (t_m + R_m / tput_m(X)) / (C_m + R_m / tput_iso_m)

subject to Gavel's base constraints. C_m is the time the steps done so far would have taken
isolated (`HeteroJob.isolated_time_s`, kept by `advance_isolated_time`), tput_iso_m the job's
throughput under `isolated` shares. The numerator is the job's finish time under X, the
denominator under its 1/n share. w_m is not used, as in Gavel's code.

Solver: bisection on rho over LPs, exact to a relative 1e-6 (no cvxpy). The problem is
quasi-convex: rho_m(X) <= rho  <=>  tput_m(X) >= r_m(rho) = R_m / (rho D_m - t_m) with
D_m = C_m + R_m / tput_iso_m and rho D_m > t_m, a linear row in X, and feasibility only grows
with rho. Each step solves max lambda s.t. tput_m(X) >= lambda r_m(rho) (HiGHS): rho is feasible
iff lambda >= 1, and every X it returns also gives an upper bound max_m rho_m(X), which narrows
the bracket faster than halving. It starts from [max_m t_m / D_m, max_m rho_m(X_iso)] (the
isolated allocation is feasible). Gavel hands the same program to cvxpy with `inv_pos` (ECOS),
which answers to its own tolerance; both give the optimum, so the same rho*.

- `finish_time_fairness_perf`: the table's T.
- `finish_time_fairness` (agnostic): T[m, j] := T[m, reference] for every type (Gavel: v100),
  tput_iso included; spread over types in proportion to N_j (`common.spread_type_blind`).

Jobs with R_m = 0 (done) or no throughput anywhere get no time and are left out of the max.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dlsched.policies.hetero.common import (
    Allocation,
    HeteroJob,
    Problem,
    Table,
    all_at_fastest,
    alone_matrix,
    check_jobs,
    gpu_types,
    isolated_fractions,
    max_min_solve,
    reference_matrix,
    singles_problem,
    spread_type_blind,
    to_allocation,
)

RHO_TOLERANCE = 1e-6        # relative width of the final bracket on rho
_MAX_STEPS = 200


def _parts(jobs: Sequence[HeteroJob], T: np.ndarray, N: np.ndarray):
    """(t, R, D, considered) per job; D_m = C_m + R_m / tput_iso_m."""
    scale = np.array([j.scale_factor for j in jobs], dtype=float)
    iso = (T * isolated_fractions(scale, N)).sum(axis=1)
    t = np.array([j.time_since_arrival_s for j in jobs], dtype=float)
    R = np.array([j.remaining_steps for j in jobs], dtype=float)
    C = np.array([j.isolated_time_s for j in jobs], dtype=float)
    ok = (R > 0) & (iso > 0)
    D = np.where(ok, C + R / np.where(ok, iso, 1.0), 0.0)
    return t, R, D, ok, iso


def _rho(tput: np.ndarray, t, R, D, ok) -> np.ndarray:
    with np.errstate(divide="ignore"):
        finish = t + np.where(tput > 0, R / np.where(tput > 0, tput, 1.0), np.inf)
    return np.where(ok, finish / np.where(ok, D, 1.0), -np.inf)


def _solve(prob: Problem, T: np.ndarray, N: np.ndarray, what: str) -> np.ndarray:
    from scipy import sparse
    jobs = prob.jobs
    t, R, D, ok, iso = _parts(jobs, T, N)
    scale = np.array([j.scale_factor for j in jobs], dtype=float)
    best_x = (isolated_fractions(scale, N) * (T > 0) * ok[:, None]).ravel()
    if not ok.any():
        return np.zeros(prob.n_vars)
    fast = all_at_fastest(T, N, scale, ok)
    if fast is not None:
        return fast.ravel()
    hi = float(_rho(iso, t, R, D, ok).max())
    lo = float(np.max(np.where(ok, t / np.where(ok, D, 1.0), 0.0)))
    for _ in range(_MAX_STEPS):
        if hi - lo <= RHO_TOLERANCE * hi:
            break
        rho = 0.5 * (lo + hi)
        r = np.where(ok, R / np.maximum(rho * D - t, 1e-300), 0.0)
        B = sparse.diags(np.where(ok, 1.0 / np.where(ok, r, 1.0), 0.0)) @ prob.E
        x, lam = max_min_solve(prob, B, np.zeros(len(jobs)), ok, what)
        got = float(_rho(prob.E @ x, t, R, D, ok).max())    # X is feasible: an upper bound
        if got < hi:
            hi, best_x = got, x
        if lam < 1.0:
            lo = rho
    return best_x


def finish_time_fairness_perf(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table) -> Allocation:
    """min max_m (t_m + R_m / sum_j T[m, j] X[m, j]) / (C_m + R_m / tput_iso_m) (module docstring)."""
    check_jobs(jobs)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    T = alone_matrix(jobs, types, table)
    prob = singles_problem(jobs, types, N, T)
    return to_allocation(prob, _solve(prob, T, N, "finish_time_fairness_perf"))


def finish_time_fairness(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                         *, reference: str | None = None) -> Allocation:
    """Agnostic Themis: T[m, j] := T[m, reference] (default: the table's reference, else V100)."""
    check_jobs(jobs)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    ref = reference or getattr(table, "reference", None) or "V100"
    T = reference_matrix(alone_matrix(jobs, types, table), types, ref)
    prob = singles_problem(jobs, types, N, T)
    X = _solve(prob, T, N, "finish_time_fairness").reshape(len(jobs), len(types))
    return to_allocation(prob, spread_type_blind(X, N, T, np.array([j.scale_factor for j in jobs], dtype=float)).ravel())


def finish_time_ratios(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                       allocation: Allocation, *, reference: str | None = None) -> dict[str, float]:
    """rho_m of `allocation` (inf for a job it gives no throughput; jobs left out are absent).
    With `reference`, throughputs are the agnostic policy's T[m, reference]."""
    check_jobs(jobs)
    types, N = gpu_types(cluster)
    T = alone_matrix(jobs, types, table)
    if reference is not None:
        T = reference_matrix(T, types, reference)
    X = np.array([[allocation.get(j.job_id, {}).get(ty, 0.0) for ty in types] for j in jobs]).reshape(len(jobs), len(types))
    t, R, D, ok, _ = _parts(jobs, T, N)
    rho = _rho((T * X).sum(axis=1), t, R, D, ok)
    return {j.job_id: float(v) for j, v, k in zip(jobs, rho, ok) if k}
