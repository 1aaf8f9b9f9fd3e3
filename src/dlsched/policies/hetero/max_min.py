"""Max-min fairness (LAS) over GPU types: Gavel's `max_min_fairness.py` and
`max_min_fairness_water_filling.py`, written from the formulas (notation: package docstring).

    maximise  min_m  s_m tput_m(X) / (w_m P_m)        subject to Gavel's base constraints,

with P_m = sum_j T[m, j] N_j / sum_j N_j the job's throughput on an equal slice of every type
(`ProportionalPolicy`). Multiplying by s_m gives a 1-GPU job s_m times the time of an s_m-GPU
job of equal speed, so both hold the same GPU-time. The program is an LP: max t s.t.
t <= s_m E_m x / (w_m P_m) for every job, solved by HiGHS.

- `max_min_fairness` (agnostic, Gavel's LAS): T[m, j] := 1 wherever the job can run, so P_m = 1
  and the objective is min_m s_m sum_j X[m, j] / w_m. Gavel sets 1 on every type, also where its
  table has 0 (ResNet-50 bs128 on K80 at 2-8 GPUs), and may give time where the job makes no
  progress; here such a type stays 0, and P_m is the share of GPUs on the job's types. The
  optimum fixes only each job's total time; the mix over types is returned spread in proportion
  to N_j (`common.spread_type_blind`), the type-blind point, where Gavel returns whatever point
  its interior-point solver stops at.
- `max_min_fairness_perf` (Gavel-LAS): the table's T.
- `max_min_fairness_packed`: the same objective over singles and equal-scale pairs;
  tput_m sums m's own throughput over every combination holding it; P_m from alone throughputs.
- `max_min_fairness_water_filling(_perf, _packed)`: the same LP repeated; after each, the jobs
  that cannot rise further are frozen at their level and the rest rise together. Gavel finds
  them with a MILP (GLPK_MI, max the number of jobs that can all rise by a factor 1.0001); here
  one LP does it: max sum_m d_m, 0 <= d_m <= eta_m, nt_m >= level_m + d_m, every frozen job at
  its level. If each job that can rise alone can rise by eta_m |S| (S the set of such jobs),
  the average of those points lets all of S rise by eta_m at once, so the optimum puts every
  job of S at d_m = eta_m and the others at 0; a job with d_m < eta_m / 2 is frozen.
  eta_m = 1e-4 max(level_m, 1e-4), Gavel's 1.0001 factor. Floors carried from one solve to
  the next are loosened by 1e-9 (relative) so HiGHS's tolerances cannot make them infeasible.
  `entities` ({entity: (weight, "fairness" | "fifo")}, jobs naming theirs in `HeteroJob.entity`)
  reweights each round as Gavel does: "fairness" shares the entity's weight over its unfrozen
  jobs in proportion to w_m; "fifo" gives it all to its first unfrozen job (in `jobs` order);
  others get weight 0 (kept at their level, not in the objective).

A job that cannot run on any type (P_m = 0) is left out of the minimum and gets no time.
Plain max-min stops at the bottleneck: jobs above it keep whatever point the LP gives them
(water filling is the cure, as in Gavel).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dlsched.core.errors import ConfigError
from dlsched.policies.hetero.common import (
    Allocation,
    HeteroJob,
    PackedAllocation,
    Problem,
    Table,
    Warm,
    all_at_fastest,
    alone_matrix,
    check_jobs,
    gpu_types,
    max_min_solve,
    packed_problem,
    proportional_throughputs,
    singles_problem,
    solve_lp,
    spread_type_blind,
    to_allocation,
    to_packed,
)

_FLOOR_SLACK = 1e-9     # floors from an earlier solve, loosened a little (HiGHS's tolerance: 1e-7)


def _weights(jobs: Sequence[HeteroJob]) -> np.ndarray:
    return np.array([j.priority_weight for j in jobs], dtype=float)


def _scale(jobs: Sequence[HeteroJob]) -> np.ndarray:
    return np.array([j.scale_factor for j in jobs], dtype=float)


def _objective_rows(prob: Problem, P: np.ndarray, mult: np.ndarray):
    """Rows mult_m E_m / P_m (0 for jobs with P_m = 0)."""
    from scipy import sparse
    with np.errstate(divide="ignore"):
        d = np.where(P > 0, mult / np.where(P > 0, P, 1.0), 0.0)
    return sparse.diags(d) @ prob.E


def _max_min(prob: Problem, P: np.ndarray, what: str, warm: Warm | None = None) -> np.ndarray:
    jobs = prob.jobs
    active = P > 0
    if not active.any():
        return np.zeros(prob.n_vars)
    if len(prob.combos) == len(jobs):               # singles: see common.all_at_fastest
        fast = all_at_fastest(prob.alone, prob.N, _scale(jobs), active)
        if fast is not None:
            return fast.ravel()
    B = _objective_rows(prob, P, _scale(jobs) / _weights(jobs))
    x, _ = max_min_solve(prob, B, np.zeros(len(jobs)), active, what, warm=warm)
    return x


def max_min_fairness(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                     *, warm: Warm | None = None) -> Allocation:
    """Agnostic LAS: max min_m s_m sum_j X[m, j] / w_m (T := 1 where the job can run, P_m = 1).
    `warm` (`lp.Warm`) carries HiGHS's basis from one call to the next, here and below."""
    check_jobs(jobs)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    ones = (alone_matrix(jobs, types, table) > 0).astype(float)
    alike = _alike_oversubscribed(jobs, N, ones)
    if alike is not None:
        return dict(zip((j.job_id for j in jobs), (dict(zip(types, row)) for row in alike.tolist())))
    prob = singles_problem(jobs, types, N, ones)
    x = _max_min(prob, proportional_throughputs(ones, N), "max_min_fairness", warm)
    X = x.reshape(len(jobs), len(types))
    return to_allocation(prob, spread_type_blind(X, N, ones, _scale(jobs)).ravel())


def _alike_oversubscribed(jobs: Sequence[HeteroJob], N: np.ndarray, ones: np.ndarray) -> np.ndarray | None:
    """Agnostic LAS's one answer when every job can run on every type, all have the same s_m / w_m
    and together ask more GPUs than there are (sum s_m > sum N), else None. Then each job's term
    is a constant times y_m = sum_j X[m, j], the min asks y_m >= t for all, and the GPUs ask
    sum_m s_m y_m <= sum N, so t = sum N / sum s_m and every y_m is exactly t: the optimum is
    unique in y, and the type-blind spread (`spread_type_blind`) gives X[m, j] = t N_j / sum N,
    the point the LP and the spread reach. Past a knee of Gavel's continuous sweep the LP over
    thousands of alike jobs was most of the cell (gavel-max-min-fairness at 6.0 jobs/h: 160 of
    203 s; benchmarks/bench_gavel.py)."""
    total = N.sum()
    if len(jobs) == 0 or total <= 0 or not ones.all():
        return None
    scale, w = _scale(jobs), _weights(jobs)
    r = scale / w
    if not (r == r[0]).all() or scale.sum() <= total:
        return None
    t = total / scale.sum()
    return np.repeat((t * (N / total))[None, :], len(jobs), axis=0)


def max_min_fairness_perf(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                          *, warm: Warm | None = None) -> Allocation:
    """Gavel-LAS: max min_m s_m (sum_j T[m, j] X[m, j]) / (w_m P_m), P_m = T_m . N / sum N."""
    check_jobs(jobs)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    T = alone_matrix(jobs, types, table)
    prob = singles_problem(jobs, types, N, T)
    return to_allocation(prob, _max_min(prob, proportional_throughputs(T, N), "max_min_fairness_perf", warm))


def max_min_fairness_packed(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                            *, min_pair_gain: float | None = None, warm: Warm | None = None) -> PackedAllocation:
    """LAS with space sharing: max min_m s_m (sum_{c holding m} sum_j T[m, c, j] X[c, j]) /
    (w_m P_m) over singles and equal-scale pairs (`packed_problem`; `min_pair_gain` prunes
    pairs, None = Gavel's every pair). Returns `{(a,): row, (a, b): row}`."""
    check_jobs(jobs)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    prob = packed_problem(jobs, types, N, table, min_pair_gain)
    return to_packed(prob, _max_min(prob, proportional_throughputs(prob.alone, N), "max_min_fairness_packed", warm))


# -- water filling ---------------------------------------------------------------------------------
def _entity_weights(jobs: Sequence[HeteroJob], entities: Mapping[str, tuple[float, str]] | None,
                    frozen: np.ndarray) -> np.ndarray:
    w = _weights(jobs)
    if entities is None:
        return np.where(frozen, 0.0, w)
    out = np.zeros(len(jobs))
    members: dict[str, list[int]] = {}
    for i, j in enumerate(jobs):
        members.setdefault(j.entity, []).append(i)
    for e, idx in members.items():
        weight, rule = entities[e]
        live = [i for i in idx if not frozen[i]]
        if not live:
            continue
        if rule == "fairness":
            total = sum(w[i] for i in live)
            for i in live:
                out[i] = weight * w[i] / total
        else:                                   # "fifo": the first unfrozen job holds it all
            out[live[0]] = weight
    return out


def _check_entities(jobs: Sequence[HeteroJob], entities: Mapping[str, tuple[float, str]] | None) -> None:
    if entities is None:
        return
    for e, spec in entities.items():
        if not (isinstance(spec, tuple) and len(spec) == 2 and spec[1] in ("fairness", "fifo")
                and isinstance(spec[0], (int, float)) and spec[0] > 0):
            raise ConfigError(f"entities.{e}", f"must be (weight > 0, 'fairness' | 'fifo'), got {spec!r}")
    for j in jobs:
        if j.entity not in entities:
            raise ConfigError(f"jobs[{j.job_id}].entity", f"{j.entity!r} is not one of the entities ({', '.join(entities)})")


def _water_fill(prob: Problem, P: np.ndarray, entities, what: str) -> np.ndarray:
    from scipy import sparse
    jobs, n = prob.jobs, len(prob.jobs)
    runnable = P > 0
    if not runnable.any():
        return np.zeros(prob.n_vars)
    nt = _objective_rows(prob, P, np.ones(n))        # normalised effective throughput rows
    scale = _scale(jobs)
    level = np.zeros(n)
    frozen = ~runnable                               # never in the objective
    base, b_base = prob.base_rows()
    V = prob.n_vars
    x = np.zeros(V)
    for _ in range(n + 1):
        w = _entity_weights(jobs, entities, frozen)
        active = (w > 0) & ~frozen
        if not active.any():
            break
        mult = np.where(active, scale / np.where(active, w, 1.0), 0.0)
        floor = level * (1 - _FLOOR_SLACK)
        others = runnable & ~active
        floor_rows = nt[np.flatnonzero(others)] if others.any() else None
        B = sparse.diags(mult) @ nt
        x, c = max_min_solve(prob, B, mult * level, active, what, floor_rows,
                             floor[others] if others.any() else None)
        c = max(c, 0.0)
        level[active] += c / mult[active]
        # which of the active jobs can still rise, all at once, with everyone kept at their level
        act = np.flatnonzero(active)
        eta = 1e-4 * np.maximum(level[act], 1e-4)
        floor = level * (1 - _FLOOR_SLACK)
        blocks = [sparse.hstack([-nt[act], sparse.identity(len(act), format="csr")])]
        rhs = [-floor[act]]
        if others.any():
            blocks.append(sparse.hstack([-nt[np.flatnonzero(others)], sparse.csr_matrix((others.sum(), len(act)))]))
            rhs.append(-floor[others])
        blocks.append(sparse.hstack([base, sparse.csr_matrix((base.shape[0], len(act)))]))
        rhs.append(b_base)
        cost = np.concatenate([np.zeros(V), -np.ones(len(act))])
        sol = solve_lp(cost, sparse.vstack(blocks, format="csr"), np.concatenate(rhs),
                       [(0, None)] * V + [(0, e) for e in eta], f"{what} (bottleneck test)")
        stuck = act[sol[V:] < 0.5 * eta]
        if len(stuck) == 0:
            break
        frozen[stuck] = True
    return x


def max_min_fairness_water_filling(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                                   *, entities: Mapping[str, tuple[float, str]] | None = None) -> Allocation:
    """Agnostic water filling: `max_min_fairness` repeated, freezing bottlenecks (module docstring)."""
    check_jobs(jobs)
    _check_entities(jobs, entities)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    ones = (alone_matrix(jobs, types, table) > 0).astype(float)
    prob = singles_problem(jobs, types, N, ones)
    x = _water_fill(prob, proportional_throughputs(ones, N), entities, "max_min_fairness_water_filling")
    return to_allocation(prob, spread_type_blind(x.reshape(len(jobs), len(types)), N, ones, _scale(jobs)).ravel())


def max_min_fairness_water_filling_perf(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                                        *, entities: Mapping[str, tuple[float, str]] | None = None) -> Allocation:
    """Gavel's water filling over the table's T (module docstring)."""
    check_jobs(jobs)
    _check_entities(jobs, entities)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    T = alone_matrix(jobs, types, table)
    prob = singles_problem(jobs, types, N, T)
    return to_allocation(prob, _water_fill(prob, proportional_throughputs(T, N), entities,
                                           "max_min_fairness_water_filling_perf"))


def max_min_fairness_water_filling_packed(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table,
                                          *, entities: Mapping[str, tuple[float, str]] | None = None,
                                          min_pair_gain: float | None = None) -> PackedAllocation:
    """Water filling over singles and pairs (`max_min_fairness_packed`'s problem)."""
    check_jobs(jobs)
    _check_entities(jobs, entities)
    if not jobs:
        return {}
    types, N = gpu_types(cluster)
    prob = packed_problem(jobs, types, N, table, min_pair_gain)
    return to_packed(prob, _water_fill(prob, proportional_throughputs(prob.alone, N), entities,
                                       "max_min_fairness_water_filling_packed"))
