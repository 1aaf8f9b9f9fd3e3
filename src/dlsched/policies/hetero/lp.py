"""The LPs of Gavel's policies, handed to HiGHS through its own Python binding (`highspy`).

    solve_lp(c, A_ub, b_ub, bounds, what)   min c x  s.t.  A_ub x <= b_ub,  lb <= x <= ub

The solver is the one `scipy.optimize.linprog(method="highs")` runs, called without linprog's
checks and conversions: on Gavel's continuous sweep those cost more than the solves themselves
(finish-time fairness at 4.0 jobs/h, 5,568 LPs: 16 s in HiGHS, 28 s around it; benchmarks/
bench_gavel.py, decision record 0051). `highspy` is pinned to the HiGHS release that scipy bundles
(1.12.0), and the options are linprog's: presolve on, the dual simplex, HiGHS's own choice of
solver below `IPM_FROM_VARS` variables and the interior point with crossover to a vertex above
(4x faster on the packed LPs: 126k variables, 10 s against 38 s). Same release, same options, same
matrix: the same vertex, so every figure computed through linprog before stays as it was.
"""
from __future__ import annotations

import threading
from itertools import repeat

import numpy as np

from dlsched.core.errors import DlschedError

IPM_FROM_VARS = 20_000      # from this many variables, HiGHS's interior point (then crossover)
_INF = 1e30                 # HiGHS's infinity (kHighsInf); linprog maps inf to it too


class InfeasibleError(DlschedError):
    """A linear problem has no solution (only SLO rows can make one so)."""


_local = threading.local()


def _highs():
    """One HiGHS instance per thread, its options set once (making one costs as much as a small
    solve); `passModel` clears the last model, its solution and its basis."""
    h = getattr(_local, "highs", None)
    if h is None:
        import highspy
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("presolve", "on")
        _local.highs = h
    return h


def _bounds(bounds, n: int) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(bounds, tuple) and len(bounds) == 2 and isinstance(bounds[0], np.ndarray):
        return np.minimum(np.maximum(bounds[0], -_INF), _INF), np.minimum(np.maximum(bounds[1], -_INF), _INF)
    lb, ub = np.zeros(n), np.full(n, _INF)
    for i, (lo, hi) in enumerate(bounds):
        lb[i] = -_INF if lo is None else lo
        ub[i] = _INF if hi is None else hi
    return lb, ub


class Rowwise(tuple):
    """A matrix as (start, index, value, shape): row i's entries are index/value[start[i]:start[i+1]]."""


def rowwise(row: np.ndarray, col: np.ndarray, val: np.ndarray, m: int, n: int) -> Rowwise:
    """The row-wise form of a coordinate list without duplicates (cheaper than scipy's
    conversions on small matrices; HiGHS takes it as it is)."""
    order = np.argsort(row, kind="stable")
    start = np.zeros(m + 1, dtype=np.int32)
    np.cumsum(np.bincount(row, minlength=m), out=start[1:])
    return Rowwise((start, col[order].astype(np.int32), val[order], (m, n)))


def solve_lp(c: np.ndarray, A_ub, b_ub: np.ndarray, bounds, what: str) -> np.ndarray:
    """min c x s.t. A_ub x <= b_ub and the bounds (a list of (lo, hi), None unbounded, or the
    arrays (lb, ub)). A_ub is any scipy sparse matrix. Raises InfeasibleError or DlschedError."""
    return solve_lp_warm(c, A_ub, b_ub, bounds, what)[0]


class Warm:
    """A simplex basis carried from one LP to the next, matched by the names of columns and rows.

    Gavel's policies solve a long sequence of LPs that differ little: Dinkelbach's steps within
    one allocation (same rows and columns, other coefficients), and the allocation after one job
    arrived or left. Each starts from the last one's basis, a column or row that was not there
    before at its bound (a column) or basic (a row's slack); what no longer fits HiGHS repairs
    (an "alien" basis). Finish-time fairness at 4.0 jobs/h: 455k simplex iterations -> 33k, HiGHS's
    time 10.3 s -> 2.0 s (jobs 2000-2499); the same optimum, another optimal vertex where the
    optimum is not unique (decision record 0051).
    """

    def __init__(self) -> None:
        self.cols: list = []
        self.rows: list = []
        self.basis = None

    def start(self, cols: list, rows: list):
        import highspy
        if self.basis is None:
            return None
        if (cols is self.cols or cols == self.cols) and (rows is self.rows or rows == self.rows):
            return self.basis
        S = highspy.HighsBasisStatus
        cs = dict(zip(self.cols, self.basis.col_status))
        rs = dict(zip(self.rows, self.basis.row_status))
        b = highspy.HighsBasis()
        b.col_status = list(map(cs.get, cols, repeat(S.kLower)))
        b.row_status = list(map(rs.get, rows, repeat(S.kBasic)))
        b.alien = True
        b.valid = True
        return b

    def keep(self, cols: list, rows: list, basis) -> None:
        self.cols, self.rows, self.basis = cols, rows, basis

    # copied (a policy's round state is, scheduler/core.py) and pickled (Ray) as plain statuses
    def __getstate__(self) -> dict:
        b = self.basis
        return {"cols": self.cols, "rows": self.rows,
                "basis": None if b is None else ([int(x) for x in b.col_status], [int(x) for x in b.row_status], b.alien)}

    def __setstate__(self, state: dict) -> None:
        self.cols, self.rows, self.basis = state["cols"], state["rows"], None
        if state["basis"] is not None:
            import highspy
            S = highspy.HighsBasisStatus
            cols, rows, alien = state["basis"]
            b = highspy.HighsBasis()
            b.col_status, b.row_status = [S(x) for x in cols], [S(x) for x in rows]
            b.alien, b.valid = alien, True
            self.basis = b


def solve_lp_warm(c: np.ndarray, A_ub, b_ub: np.ndarray, bounds, what: str, basis=None):
    """solve_lp, started from `basis` (`Warm.start`), returning (x, the final basis)."""
    import highspy
    from scipy import sparse
    if isinstance(A_ub, Rowwise):
        start, index, value, (m, n) = A_ub
        fmt = highspy.MatrixFormat.kRowwise
    else:
        A = sparse.csc_array(A_ub)
        A.sort_indices()
        (m, n), start, index, value = A.shape, A.indptr, A.indices, A.data
        fmt = highspy.MatrixFormat.kColwise
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, m
    lp.col_cost_ = np.asarray(c, dtype=float)
    lp.col_lower_, lp.col_upper_ = _bounds(bounds, n)
    lp.row_lower_ = np.full(m, -_INF)
    lp.row_upper_ = np.minimum(np.asarray(b_ub, dtype=float), _INF)
    lp.a_matrix_.format_ = fmt
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = index
    lp.a_matrix_.value_ = value
    h = _highs()
    h.setOptionValue("solver", "ipm" if n >= IPM_FROM_VARS else "choose")
    h.passModel(lp)
    if basis is not None:
        h.setBasis(basis)
    h.run()
    status = h.getModelStatus()
    if basis is not None and status != highspy.HighsModelStatus.kOptimal:
        h.passModel(lp)                              # a start HiGHS could not use: from scratch
        h.run()
        status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        raise InfeasibleError(f"{what}: no allocation satisfies the constraints")
    if status != highspy.HighsModelStatus.kOptimal:
        raise DlschedError(f"{what}: HiGHS did not solve the problem ({h.modelStatusToString(status)})")
    return np.asarray(h.getSolution().col_value, dtype=float), h.getBasis()
