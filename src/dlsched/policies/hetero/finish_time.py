"""Finish-time fairness (Themis's rho) over GPU types: Gavel's `finish_time_fairness.py`, written
from the formula (notation: package docstring).

    minimise  max_m rho_m(X),   rho_m(X) = (t_m + R_m / tput_m(X)) / (C_m + R_m / tput_iso_m)

subject to Gavel's base constraints. C_m is the time the steps done so far would have taken
isolated (`HeteroJob.isolated_time_s`, kept by `advance_isolated_time`), tput_iso_m the job's
throughput under `isolated` shares. The numerator is the job's finish time under X, the
denominator under its 1/n share. w_m is not used, as in Gavel's code.

Solver: each rho_m = (t_m tput_m(X) + R_m) / (D_m tput_m(X)) is a ratio of affine functions of
X, so min max_m rho_m is a generalised fractional program, solved by Dinkelbach's method in the
form of Crouzeix, Ferland and Schaible: from the isolated allocation X_0 (feasible), with rho_k =
max_m rho_m(X_k), one LP (HiGHS) max s s.t. s <= ((rho_k D_m - t_m) tput_m(X) - R_m) /
(D_m tput_m(X_k)) gives X_{k+1}; s = 0 proves rho_k optimal, s > 0 lowers every rho_m below
rho_k. It stops when s or the step falls to a relative 1e-6: 2 to 5 LPs where a bisection on rho
needed about 11 (Gavel's continuous sweep at 4.8 jobs/h; benchmarks/bench_gavel.py). Gavel hands
the same program to cvxpy with `inv_pos` (ECOS), which answers to its own tolerance; both give
the optimum rho*, not the same X: the optimum fixes only the worst job's ratio, and ECOS's
interior point spreads the other jobs over every type where HiGHS's vertex puts each on one
(docs/policies/gavel.md: Gavel-FTF at 4.8 jobs/h, 22.00 h in Gavel's code, 21.26 h here).

- `finish_time_fairness_perf`: the table's T.
- `finish_time_fairness` (agnostic): T[m, j] := T[m, reference] for every type (Gavel: v100),
  tput_iso included; spread over types in proportion to N_j (`common.spread_type_blind`).

Jobs with R_m = 0 (done) or no throughput anywhere get no time and are left out of the max.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dlsched.policies.hetero.common import (
    agnostic_reference,
    Allocation,
    HeteroJob,
    Problem,
    Table,
    Warm,
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


def _solve(prob: Problem, T: np.ndarray, N: np.ndarray, what: str, warm: Warm | None = None) -> np.ndarray:
    jobs = prob.jobs
    t, R, D, ok, iso = _parts(jobs, T, N)
    scale = np.array([j.scale_factor for j in jobs], dtype=float)
    x = (isolated_fractions(scale, N) * (T > 0) * ok[:, None]).ravel()
    if not ok.any():
        return np.zeros(prob.n_vars)
    fast = all_at_fastest(T, N, scale, ok)
    if fast is not None:
        return fast.ravel()
    tput = prob.E @ x
    rho = float(_rho(tput, t, R, D, ok).max())
    warm = warm if warm is not None else Warm()
    for _ in range(_MAX_STEPS):
        # rho_m = (t_m tput_m + R_m) / (D_m tput_m): ratios of affine functions of X. Dinkelbach's
        # step, scaled by each denominator at the current X (Crouzeix, Ferland and Schaible):
        # max s s.t. s <= ((rho D_m - t_m) tput_m(X') - R_m) / w_m, w_m = D_m tput_m(X).
        w = np.where(ok, D * tput, 1.0)
        B = np.where(ok, (rho * D - t) / w, 0.0)             # rows of diag(B) @ E
        x_new, s = max_min_solve(prob, B, np.where(ok, R / w, 0.0), ok, what, warm=warm)
        tput_new = prob.E @ x_new
        got = float(_rho(tput_new, t, R, D, ok).max())
        if got < rho:
            x, tput, step, rho = x_new, tput_new, rho - got, got
        else:
            step = 0.0
        if s <= RHO_TOLERANCE or step <= RHO_TOLERANCE * rho:
            break
    return x


def finish_time_fairness_perf(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                              *, warm: Warm | None = None) -> Allocation:
    """min max_m (t_m + R_m / sum_j T[m, j] X[m, j]) / (C_m + R_m / tput_iso_m) (module docstring).
    `warm` (`lp.Warm`) carries HiGHS's basis from this call to the next (Gavel's rounds do)."""
    check_jobs(jobs)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    T = alone_matrix(jobs, types, table)
    prob = singles_problem(jobs, types, N, T)
    return to_allocation(prob, _solve(prob, T, N, "finish_time_fairness_perf", warm))


def finish_time_fairness(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                         *, reference: str | None = None, warm: Warm | None = None) -> Allocation:
    """Agnostic Themis: T[m, j] := T[m, reference] (default: the table's reference, else V100)."""
    check_jobs(jobs)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    ref = agnostic_reference(types, table, reference)
    T = reference_matrix(alone_matrix(jobs, types, table), types, ref)
    prob = singles_problem(jobs, types, N, T)
    X = _solve(prob, T, N, "finish_time_fairness", warm).reshape(len(jobs), len(types))
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
