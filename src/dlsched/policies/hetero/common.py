"""Jobs, the problem every hetero policy shares (variables, Gavel's base constraints), and HiGHS.

A problem has one variable per (combination c, GPU type j), index `c * k + j` (k types, sorted
by name as Gavel sorts them). Three sparse matrices describe it:

- `E` (jobs x variables): the steps/s job m gets per unit of the variable, so tput_m(X) = E_m x.
  Alone: T[m, j]; in a pair, m's own throughput sharing the GPUs (`table.pair`).
- `G` (jobs x variables): 1 where the variable's combination holds job m; `G x <= 1` is
  Gavel's sum_j X[m, j] <= 1, over every combination holding m when packing.
- `K` (types x variables): s_c on type j's variables; `K x <= N` is sum_m s_m X[m, j] <= N_j, a
  pair counted once (Gavel's `PolicyWithPacking` gives a pair of unequal scale factors s = 0,
  which forces X = 0; such pairs are simply not built here).

A variable no job gains from (all its throughputs 0) is never built or is set to 0 after a solve:
it can only use capacity, so dropping it keeps every optimum of these objectives. HiGHS answers
within its tolerances (1e-7); values are clipped to [0, 1] as Gavel clips cvxpy's.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from dlsched.core.errors import ConfigError
from dlsched.policies.hetero.lp import InfeasibleError, Warm, rowwise, solve_lp, solve_lp_warm  # noqa: F401 (re-exported)

Allocation = dict[str, dict[str, float]]
PackedAllocation = dict[tuple[str, ...], dict[str, float]]


class Table(Protocol):
    def steps_per_s(self, job_type: str, gpus: int, gpu_type: str) -> float | None: ...
    def pair(self, job_type: str, gpus: int, other: str, gpu_type: str) -> tuple[float, float] | None: ...


@dataclass(frozen=True)
class HeteroJob:
    """One job as Gavel's policies see it.

    `isolated_time_s` is Themis's C_m: the time the steps already done would have taken under the
    isolated allocation (`advance_isolated_time` adds to it). `deadline_in_s` is the SLO as Gavel
    passes it: seconds from now to the deadline (None: no SLO). `entity` groups jobs for the
    hierarchical water filling.
    """
    job_id: str
    job_type: str
    scale_factor: int = 1
    priority_weight: float = 1.0
    remaining_steps: float = 0.0
    time_since_arrival_s: float = 0.0
    isolated_time_s: float = 0.0
    deadline_in_s: float | None = None
    entity: str | None = None

    def __post_init__(self) -> None:
        # the common case in one expression (Gavel's rounds build every active job at each reset:
        # 4.3 million at 5.2 jobs/h, benchmarks/bench_gavel.py); anything else is explained below
        sf, a, b, c, d = self.scale_factor, self.priority_weight, self.remaining_steps, self.time_since_arrival_s, \
            self.isolated_time_s
        try:
            ok = type(sf) is int and sf >= 1 and a > 0 and b >= 0 and c >= 0 and d >= 0 and a + b + c + d < math.inf
        except TypeError:
            ok = False
        if ok and self.deadline_in_s is None:
            return
        where = f"jobs[{self.job_id}]"
        if not isinstance(self.scale_factor, int) or self.scale_factor < 1:
            raise ConfigError(f"{where}.scale_factor", f"must be an integer >= 1, got {self.scale_factor!r}")
        for name in ("priority_weight", "remaining_steps", "time_since_arrival_s", "isolated_time_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ConfigError(f"{where}.{name}", f"must be a finite number >= 0, got {v!r}")
        if self.priority_weight == 0:
            raise ConfigError(f"{where}.priority_weight", "must be > 0")
        if self.deadline_in_s is not None and not (math.isfinite(self.deadline_in_s) and self.deadline_in_s > 0):
            raise ConfigError(f"{where}.deadline_in_s", f"must be > 0 or None, got {self.deadline_in_s!r}")


def advance_isolated_time(job: HeteroJob, remaining_steps: float, isolated_steps_per_s: float) -> HeteroJob:
    """Themis's bookkeeping between two allocations (Gavel's `_cumulative_isolated_time`):
    C_m += (R_before - R_now) / tput_iso_before, with tput_iso_before the job's isolated
    throughput at the previous allocation (`isolated_throughputs`)."""
    done = job.remaining_steps - remaining_steps
    extra = done / isolated_steps_per_s if isolated_steps_per_s > 0 else 0.0
    return replace(job, remaining_steps=remaining_steps, isolated_time_s=job.isolated_time_s + extra)


def gpu_types(cluster: Mapping[str, int]) -> tuple[list[str], np.ndarray]:
    """Sorted type names and their GPU counts N_j (validated)."""
    types = sorted(cluster)
    for t in types:
        n = cluster[t]
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
            raise ConfigError(f"cluster.{t}", f"GPU count must be an integer >= 0, got {n!r}")
    return types, np.array([float(cluster[t]) for t in types])


def check_jobs(jobs: Sequence[HeteroJob]) -> None:
    seen: set[str] = set()
    for j in jobs:
        if j.job_id in seen:
            raise ConfigError(f"jobs[{j.job_id}]", "job id given twice")
        seen.add(j.job_id)


def alone_matrix(jobs: Sequence[HeteroJob], types: Sequence[str], table: Table) -> np.ndarray:
    """T[m, j]: steps/s of job m alone on `s_m` GPUs of type j; 0 where the table has none."""
    rows: dict[tuple[str, int], list[float]] = {}       # one lookup per (job type, GPUs), not per job
    out = []
    for job in jobs:
        key = (job.job_type, job.scale_factor)
        row = rows.get(key)
        if row is None:
            row = rows[key] = [table.steps_per_s(job.job_type, job.scale_factor, t) or 0.0 for t in types]
        out.append(row)
    return np.array(out, dtype=float).reshape(len(jobs), len(types))


def agnostic_reference(types: Sequence[str], table: Table, reference: str | None = None) -> str:
    """The type whose throughput an agnostic policy gives every type: the one the call names;
    else the table's reference (Gavel's bundled table: V100) or, without one, Gavel's hard-coded
    V100, where the cluster has it; else the cluster's first type (sorted). A cluster without
    that type, such as the runtime's `fake-gpu` nodes under the bundled table, has no such
    column to take: before, every round failed with "GPU type 'V100' is not in the cluster" and
    the runtime held every job (benchmarks/runtime_matrix.py). A type the call names and the
    cluster lacks stays an error (reference_matrix)."""
    if reference:
        return reference
    ref = getattr(table, "reference", None) or "V100"
    return ref if ref in types or not types else types[0]


def reference_matrix(T: np.ndarray, types: Sequence[str], reference: str) -> np.ndarray:
    """Gavel's agnostic substitution T[m, j] := T[m, reference] (where the job can run at all)."""
    if reference not in types:
        raise ConfigError("reference", f"GPU type {reference!r} is not in the cluster ({', '.join(types)})")
    ref = T[:, [list(types).index(reference)]]
    return np.where(T > 0, ref, 0.0)


def proportional_throughputs(T: np.ndarray, N: np.ndarray) -> np.ndarray:
    """P_m = sum_j T[m, j] N_j / sum_j N_j: the job's throughput on an equal slice of every type
    (Gavel's `ProportionalPolicy`, the normaliser of max-min fairness)."""
    total = N.sum()
    return T @ N / total if total > 0 else np.zeros(len(T))


def isolated_fractions(scale: np.ndarray, N: np.ndarray) -> np.ndarray:
    """Gavel's `IsolatedPolicy`: X[m, j] = N_j / (n s_m), each row divided by max(row sum, 1)."""
    n = len(scale)
    if n == 0:
        return np.zeros((0, len(N)))
    x = (N[None, :] / n) / scale[:, None]
    return x / np.maximum(x.sum(axis=1), 1.0)[:, None]


def spread_type_blind(X: np.ndarray, N: np.ndarray, T: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """One canonical point of an agnostic LP's optimal face. When each job's coefficients are
    equal over the types it can run on (T[m, j] := 1 or := T[m, ref]), the objective and rows
    depend on X only through y_m = sum_j X[m, j], so any X with those row sums that fits is as
    good. The type-blind one: a job that cannot run on some type (a 0 in the table) spreads y_m
    over its types in proportion to N_j; every other job spreads over what those leave, in
    proportion (X[m, j] = y_m N_j / sum N when no job is restricted). That fits whenever the
    restricted jobs' spread does (sum_m s_m y_m <= sum N holds for any feasible X); if it does
    not (jobs restricted to different types), the LP's own point is returned."""
    if len(X) == 0 or N.sum() <= 0:
        return X
    y, ok = X.sum(axis=1), T > 0
    out = np.zeros_like(X)
    restricted = ~ok.all(axis=1)
    for m in np.flatnonzero(restricted):
        room = N * ok[m]
        out[m] = y[m] * room / room.sum() if room.sum() > 0 else 0.0
    left = N - (scale[:, None] * out).sum(axis=0)
    if (left < -1e-9).any():
        return X
    full = ~restricted
    if full.any() and left.sum() > 0:
        out[full] = y[full, None] * (np.maximum(left, 0) / np.maximum(left, 0).sum())[None, :]
    if ((scale[:, None] * out).sum(axis=0) > N + 1e-9).any():
        return X
    return out


def all_at_fastest(T: np.ndarray, N: np.ndarray, scale: np.ndarray, ok: np.ndarray) -> np.ndarray | None:
    """X giving every considered job (`ok`) its fastest type all the time, when those fit at once
    (else None). No X gives job m more than max_j T[m, j]; so when this one fits, each job's own
    objective term (Themis's rho_m, max-min's tput_m / P_m) is at its best, and the min-max (or
    max-min) is at its optimum: an LP would only find another X of the same value. Two cases are
    tried: each job has one fastest type (per-type demand <= N_j), or every type is fastest (the
    agnostic view: X[m, j] = N_j / sum N, which fits when sum s_m <= sum N). Gavel's continuous
    sweep at 0.4 jobs/h (8,890 solves): finish-time fairness 463 s -> 22 s a cell, max-min
    (Gavel-LAS) 58 s -> 25 s, the same 17.58 h (RESULTS.md block `gavel`)."""
    X = np.zeros_like(T)
    rows = np.flatnonzero(ok)
    best = T.max(axis=1)
    tie = (T == best[:, None]) & (T > 0)
    if tie[rows].all():
        if scale[rows].sum() > N.sum():
            return None
        X[rows] = N / N.sum()
        return X
    if (tie[rows].sum(axis=1) != 1).any():
        return None
    j = tie[rows].argmax(axis=1)
    if (np.bincount(j, weights=scale[rows], minlength=len(N)) > N).any():
        return None
    X[rows, j] = 1.0
    return X


@dataclass
class Problem:
    """Variables, their throughputs and Gavel's base constraints (module docstring)."""
    jobs: Sequence[HeteroJob]
    types: list[str]
    N: np.ndarray
    combos: list[tuple[int, ...]]
    E: object           # scipy.sparse csr, jobs x variables
    G: object           # scipy.sparse csr, jobs x variables
    K: object           # scipy.sparse csr, types x variables
    alone: np.ndarray   # T[m, j] alone (the table's), for normalisers
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_vars(self) -> int:
        return len(self.combos) * len(self.types)

    def base_rows(self):
        from scipy import sparse
        return sparse.vstack([self.G, self.K], format="csr"), np.concatenate([np.ones(len(self.jobs)), self.N])

    def base_coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """base_rows as (row, col, value, rhs), built once per problem."""
        if "base" not in self._memo:
            A, b = self.base_rows()
            C = A.tocoo()
            self._memo["base"] = (C.row, C.col, C.data, b)
        return self._memo["base"]

    def coo(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """E, G or K as (row, col, value), built once per problem."""
        if name not in self._memo:
            C = getattr(self, name).tocoo()
            self._memo[name] = (C.row, C.col, C.data)
        return self._memo[name]

    def names(self, act: np.ndarray, n_floor: int) -> tuple[list, list]:
        """Names of max_min_solve's columns and rows (`lp.Warm` matches bases by them): a
        variable by its jobs and type, a row by its kind and job or type."""
        key = ("rows", act.tobytes(), n_floor)
        if key in self._memo:
            return self._memo["cols"], self._memo[key]
        ids = [j.job_id for j in self.jobs]
        if "cols" not in self._memo:
            self._memo["cols"] = [(tuple(ids[i] for i in c), t) for c in self.combos for t in self.types] + ["t"]
        self._memo[key] = ([("t", ids[m]) for m in act] + [("f", i) for i in range(n_floor)]
                           + [("G", i) for i in ids] + [("K", t) for t in self.types])
        return self._memo["cols"], self._memo[key]


def singles_problem(jobs: Sequence[HeteroJob], types: list[str], N: np.ndarray, T: np.ndarray,
                    alone: np.ndarray | None = None) -> Problem:
    """One variable per (job, type); E carries T (the table's or an agnostic substitute)."""
    from scipy import sparse
    n, k = T.shape
    rows, cols = np.repeat(np.arange(n), k), np.arange(n * k)
    scale = np.array([j.scale_factor for j in jobs], dtype=float)
    E = sparse.csr_matrix((T.ravel(), (rows, cols)), shape=(n, n * k))
    G = sparse.csr_matrix((np.ones(n * k), (rows, cols)), shape=(n, n * k))
    K = sparse.csr_matrix((np.repeat(scale, k), (np.tile(np.arange(k), n), cols)), shape=(k, n * k))
    return Problem(jobs, types, N, [(i,) for i in range(n)], E, G, K, T if alone is None else alone)


def packed_problem(jobs: Sequence[HeteroJob], types: list[str], N: np.ndarray, table: Table,
                   min_pair_gain: float | None = None) -> Problem:
    """Singles plus every pair (a, b), a before b in `jobs`, of equal scale factor (Gavel builds
    the same set). With `min_pair_gain`, a pair is kept only if on some type the normalised
    packed throughput T_a,pair/T_a + T_b,pair/T_b reaches it (Gavel's FIFO-packing test, 1.5);
    None keeps every pair with a throughput (Gavel's LP)."""
    from scipy import sparse
    n, k = len(jobs), len(types)
    alone = alone_matrix(jobs, types, table)
    cache: dict[tuple[str, str, int], np.ndarray] = {}

    def pair_tputs(a: HeteroJob, b: HeteroJob) -> np.ndarray:
        key = (a.job_type, b.job_type, a.scale_factor)
        if key not in cache:
            arr = np.zeros((k, 2))
            for j, t in enumerate(types):
                arr[j] = table.pair(a.job_type, a.scale_factor, b.job_type, t) or (0.0, 0.0)
            cache[key] = arr
        return cache[key]

    combos: list[tuple[int, ...]] = [(i,) for i in range(n)]
    pair_rows: list[np.ndarray] = []
    by_scale: dict[int, list[int]] = {}
    for i, job in enumerate(jobs):
        by_scale.setdefault(job.scale_factor, []).append(i)
    for idx in by_scale.values():
        for p, a in enumerate(idx):
            for b in idx[p + 1:]:
                tp = pair_tputs(jobs[a], jobs[b])
                if not tp.any():
                    continue
                if min_pair_gain is not None:
                    with np.errstate(divide="ignore", invalid="ignore"):
                        gain = np.where(alone[a] > 0, tp[:, 0] / alone[a], 0) + np.where(alone[b] > 0, tp[:, 1] / alone[b], 0)
                    if gain.max() < min_pair_gain:
                        continue
                combos.append((a, b))
                pair_rows.append(tp)
    n_pairs = len(pair_rows)
    scale = np.array([jobs[c[0]].scale_factor for c in combos], dtype=float)
    # singles: as singles_problem; pairs: each variable feeds two job rows
    s_rows, s_cols = np.repeat(np.arange(n), k), np.arange(n * k)
    pairs = np.array(combos[n:], dtype=int).reshape(n_pairs, 2)
    p_cols = (n * k + np.arange(n_pairs * k)).reshape(n_pairs, k)
    tp = np.array(pair_rows).reshape(n_pairs, k, 2)
    rows = np.concatenate([s_rows, np.repeat(pairs[:, 0], k), np.repeat(pairs[:, 1], k)])
    cols = np.concatenate([s_cols, p_cols.ravel(), p_cols.ravel()])
    data = np.concatenate([alone.ravel(), tp[:, :, 0].ravel(), tp[:, :, 1].ravel()])
    V = len(combos) * k
    E = sparse.csr_matrix((data, (rows, cols)), shape=(n, V))
    G = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, V))
    K = sparse.csr_matrix((np.repeat(scale, k), (np.tile(np.arange(k), len(combos)), np.arange(V))), shape=(k, V))
    return Problem(jobs, types, N, combos, E, G, K, alone)


def max_min_solve(prob: Problem, B, offset: np.ndarray, active: np.ndarray, what: str,
                  floor_rows=None, floor: np.ndarray | None = None, warm: Warm | None = None) -> tuple[np.ndarray, float]:
    """max t s.t. t <= B_m x - offset_m (m active), floor_rows x >= floor, base constraints.
    Returns (x, t). `active` must select at least one row. With `warm` (`lp.Warm`), HiGHS
    starts from the basis the last call with it ended on, columns and rows matched by job and
    type, and leaves its own there.

    The rows are assembled as one coordinate list and converted once: scipy's hstack and vstack
    cost more than HiGHS's solve on these small problems (benchmarks/bench_gavel.py)."""
    V = prob.n_vars
    act = np.flatnonzero(active)
    na = len(act)
    if isinstance(B, np.ndarray):                    # diag(B) @ E, E's entries kept once per problem
        br, bc, bv = prob.coo("E")
        bv = B[br] * bv
    else:
        Bc = B.tocoo()
        br, bc, bv = Bc.row, Bc.col, Bc.data
    at = np.full(len(prob.jobs), -1)
    at[act] = np.arange(na)
    keep = at[br] >= 0
    rows, cols, vals = [at[br[keep]], np.arange(na)], [bc[keep], np.full(na, V)], [-bv[keep], np.ones(na)]
    rhs = [-offset[act]]
    top = na
    if floor_rows is not None:
        F = floor_rows.tocoo()
        rows.append(F.row + top)
        cols.append(F.col)
        vals.append(-F.data)
        rhs.append(-floor)
        top += F.shape[0]
    br, bc, bv, b_base = prob.base_coo()
    rows.append(br + top)
    cols.append(bc)
    vals.append(bv)
    rhs.append(b_base)
    A = rowwise(np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), top + len(b_base), V + 1)
    c = np.zeros(V + 1)
    c[-1] = -1.0
    lb, ub = np.zeros(V + 1), np.full(V + 1, np.inf)
    lb[-1] = -np.inf
    if warm is None:
        return _split(solve_lp(c, A, np.concatenate(rhs), (lb, ub), what), V)
    cols, rows = prob.names(act, top - na)
    sol, basis = solve_lp_warm(c, A, np.concatenate(rhs), (lb, ub), what, warm.start(cols, rows))
    warm.keep(cols, rows, basis)
    return _split(sol, V)


def _split(sol: np.ndarray, V: int) -> tuple[np.ndarray, float]:
    return sol[:V], float(sol[-1])


def clean(prob: Problem, x: np.ndarray) -> np.ndarray:
    """Clip to [0, 1] and zero the variables no job gains from."""
    x = np.clip(x, 0.0, 1.0) + 0.0          # + 0.0: no -0.0 in the output
    useless = np.asarray(abs(prob.E).sum(axis=0)).ravel() == 0
    x[useless] = 0.0
    return x


def to_allocation(prob: Problem, x: np.ndarray) -> Allocation:
    X = clean(prob, x)[: len(prob.jobs) * len(prob.types)].reshape(len(prob.jobs), len(prob.types))
    return {job.job_id: {t: float(X[i, j]) for j, t in enumerate(prob.types)} for i, job in enumerate(prob.jobs)}


def matrix_allocation(jobs: Sequence[HeteroJob], types: Sequence[str], X: np.ndarray) -> Allocation:
    return {job.job_id: {t: float(X[i, j]) for j, t in enumerate(types)} for i, job in enumerate(jobs)}


def to_packed(prob: Problem, x: np.ndarray) -> PackedAllocation:
    """Every job's `(a,)` row, and each pair `(a, b)` with a positive share."""
    X = clean(prob, x).reshape(len(prob.combos), len(prob.types))
    out: PackedAllocation = {}
    for ci, combo in enumerate(prob.combos):
        if len(combo) == 1 or X[ci].max() > 1e-12:
            out[tuple(prob.jobs[i].job_id for i in combo)] = {t: float(X[ci, j]) for j, t in enumerate(prob.types)}
    return out


def job_shares(packed: PackedAllocation) -> Allocation:
    """Each job's time per type, summed over every combination holding it."""
    out: Allocation = {}
    for combo, row in packed.items():
        for job_id in combo:
            acc = out.setdefault(job_id, {})
            for t, v in row.items():
                acc[t] = acc.get(t, 0.0) + v
    return out


def effective_throughputs(jobs: Sequence[HeteroJob], allocation: Allocation | PackedAllocation,
                          table: Table) -> dict[str, float]:
    """tput_m(X) in steps/s for either form: `{job_id: row}` or `{(a,): row, (a, b): row}`."""
    by_id = {j.job_id: j for j in jobs}
    out = {j.job_id: 0.0 for j in jobs}
    for key, row in allocation.items():
        combo = key if isinstance(key, tuple) else (key,)
        for t, frac in row.items():
            if frac <= 0:
                continue
            if len(combo) == 1:
                j = by_id[combo[0]]
                out[j.job_id] += frac * (table.steps_per_s(j.job_type, j.scale_factor, t) or 0.0)
            else:
                a, b = by_id[combo[0]], by_id[combo[1]]
                ta, tb = table.pair(a.job_type, a.scale_factor, b.job_type, t) or (0.0, 0.0)
                out[a.job_id] += frac * ta
                out[b.job_id] += frac * tb
    return out
