"""An exact baseline for Optimus's allocation: its integer program solved by HiGHS, and the
optimality gap of the marginal-gain heuristic on small random cases.

Optimus (Peng et al., EuroSys 2018; seed 001, "Resource Allocation: Optimization Problem"):

    minimise    sum_j T_j(w_j, p_j)            T_j = Q_j / f_j(p_j, w_j): time to finish
    subject to  sum_j (w_j O_j^r + p_j N_j^r) <= C_r    for every resource r
                w_j, p_j positive integers

T_j is not linear in (w, p), so the program is written with one binary x_{j,o} per job j and
option o = (w, p) of a table over the feasible sizes (1 <= w <= cap_j; PS jobs 1 <= p <= w,
all-reduce jobs p = 0 - the sizes the heuristic may reach): sum_o x_{j,o} = 1 for each job,
objective sum T_j(o) x_{j,o}, one capacity row per resource over the cluster's aggregate
capacity (as the heuristic's resource vector: fragmentation over servers is placement's
problem, not allocation's). Solved by scipy.optimize.milp (HiGHS).

`greedy_allocate` runs the policy's own allocation (`optimus.greedy_allocate`, steps 1 and 2)
on the same tables (a test checks the choice against a real first round of the policy):
minimum sizes in arrival order, then the largest gain (T_j(w, p) - T_j(w', p')) / d(task) x
factor_j first, until no positive gain fits.

`random_case` builds a small case (3-8 PS jobs of the seed001 workload's kind, 2-4 servers of
the seed001 cluster's shape) with T_j = Q_j x Optimus's oracle seconds per iteration, and
`gap_study` reports (heuristic - optimum) / optimum over N cases.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_EPS = 1e-9


@dataclass
class ExactJob:
    """One job of an allocation problem: T[(w, p)] = seconds to finish with w workers and p PS."""
    job_id: str
    T: dict[tuple[int, int], float]
    worker: np.ndarray                  # demand vector of one worker
    ps: np.ndarray | None = None        # demand vector of one PS (None: all-reduce, p = 0)
    cap: int = 1 << 30                  # most workers
    factor: float = 1.0                 # the policy's early factor (gains only; not the objective)

    def feasible(self) -> list[tuple[int, int]]:
        out = []
        for (w, p), t in sorted(self.T.items()):
            if not (1 <= w <= self.cap) or not math.isfinite(t):
                continue
            if self.ps is None and p != 0:
                continue
            if self.ps is not None and not 1 <= p <= w:
                continue
            out.append((w, p))
        return out


def solve_exact(jobs: list[ExactJob], capacity, time_limit_s: float = 30.0
                ) -> tuple[dict[str, tuple[int, int]], float]:
    """The optimum of the integer program: ({job: (w, p)}, sum of T). Raises ValueError when
    the program has no solution (some job's minimum does not fit next to the others')."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    cap = np.asarray(capacity, dtype=float)
    cols, cost, owner = [], [], []
    for j, job in enumerate(jobs):
        for (w, p) in job.feasible():
            use = w * np.asarray(job.worker, dtype=float)
            if p:
                use = use + p * np.asarray(job.ps, dtype=float)
            cols.append(use)
            cost.append(job.T[(w, p)])
            owner.append((j, (w, p)))
    n = len(cols)
    if n == 0:
        return {}, 0.0
    use = np.asarray(cols).T                               # resources x options
    pick = np.zeros((len(jobs), n))
    for i, (j, _) in enumerate(owner):
        pick[j, i] = 1.0
    dims = cap > 0
    cons = [LinearConstraint(pick, 1.0, 1.0),
            LinearConstraint(use[dims], -np.inf, cap[dims] + _EPS)]
    if (~dims).any() and np.any(use[~dims] > _EPS):
        cons.append(LinearConstraint(use[~dims], -np.inf, 0.0))
    res = milp(np.asarray(cost), constraints=cons, integrality=np.ones(n), bounds=Bounds(0, 1),
               options={"time_limit": time_limit_s})
    if res.x is None or res.status not in (0,):
        raise ValueError(f"integer program not solved: {res.message}")
    alloc = {}
    for i in np.flatnonzero(res.x > 0.5):
        j, wp = owner[i]
        alloc[jobs[j].job_id] = wp
    return alloc, float(sum(jobs[j].T[alloc[jobs[j].job_id]] for j in range(len(jobs))))


def greedy_allocate(jobs: list[ExactJob], capacity) -> dict[str, tuple[int, int]]:
    """Optimus's marginal-gain heuristic (the policy's own `allocate.optimus.greedy_allocate`) on tables.
    `jobs` in arrival order; capacity = the cluster's resource vector (all free)."""
    from dlsched.policies.allocate.optimus import AllocJob
    from dlsched.policies.allocate.optimus import greedy_allocate as policy_greedy
    cap = [float(c) for c in capacity]
    inv = [1.0 / c if c > 0 else 0.0 for c in cap]
    entries = []
    for job in jobs:
        wv = [float(x) for x in job.worker]
        pv = None if job.ps is None else [float(x) for x in job.ps]
        dw = max(max((wv[i] * inv[i] for i in range(len(cap)) if wv[i] > _EPS), default=0.0), _EPS)
        dp = max(max((pv[i] * inv[i] for i in range(len(cap)) if pv[i] > _EPS), default=0.0), _EPS) \
            if pv is not None else _EPS
        entries.append(AllocJob(job.job_id, wv, pv, job.cap, job.factor / dw, job.factor / dp,
                                lambda w, p, job=job: job.T.get((w, p), math.inf)))
    alloc = policy_greedy(entries, list(cap))
    return {jid: (a[0], a[1]) for jid, a in alloc.items()}


def objective(jobs: list[ExactJob], alloc: dict[str, tuple[int, int]]) -> float:
    return float(sum(j.T.get(alloc[j.job_id], math.inf) for j in jobs))


# -- random small cases ---------------------------------------------------------------------------
def small_cluster(nodes: int):
    """`nodes` servers of the seed001 cluster's shape."""
    from dlsched.cluster import cluster_from_dict
    from dlsched.cluster.topology import PRESETS
    spec = PRESETS["seed001"]()
    spec["node_groups"] = [{**spec["node_groups"][0], "count": int(nodes)}]
    spec["name"] = f"seed001-{nodes}"
    return cluster_from_dict(spec)


def tables_for(specs, remaining, cluster, cap: int | None = None, opt=None) -> list[ExactJob]:
    """ExactJobs with T = remaining x Optimus's oracle seconds per iteration (packed placement,
    the job alone), for every w up to cap (default: the cluster's GPUs) and p up to w."""
    from dlsched.core.types import Role
    from dlsched.policies.allocate.optimus import OptimusAllocate
    opt = opt or OptimusAllocate()
    total = cluster.capacity.sum(axis=0)
    cap = int(cap or max(int(total[0]), 1))
    out = []
    for spec, q in zip(specs, remaining):
        w0 = next(t for t in spec.tasks if t.role is Role.WORKER).vector
        p0 = next((t.vector for t in spec.tasks if t.role is Role.PS), None)
        job_cap = min(cap, opt.cap(spec))
        T = {}
        for w in range(1, job_cap + 1):
            for p in (range(1, w + 1) if p0 is not None else (0,)):
                t = opt.oracle_iter_time(spec, w, p, cluster)
                if math.isfinite(t):
                    T[(w, p)] = float(q) * t
        out.append(ExactJob(spec.job_id, T, np.asarray(w0, float), None if p0 is None else np.asarray(p0, float),
                            cap=job_cap))
    return out


def random_case(rng: np.random.Generator) -> tuple[list[ExactJob], np.ndarray]:
    """3-8 PS jobs of the seed001 workload's kind (a random generator seed, jobs in arrival
    order), each with a random part (10-100 %) of its iterations left, on 2-4 seed001 servers."""
    from dlsched.workload.generators import gen_seed001
    cluster = small_cluster(int(rng.integers(2, 5)))
    n = int(rng.integers(3, 9))
    specs = gen_seed001(int(rng.integers(0, 2**31 - 1)), jobs=n)
    remaining = [float(s.iterations) * float(rng.uniform(0.1, 1.0)) for s in specs]
    jobs = tables_for(specs, remaining, cluster)
    return jobs, cluster.capacity.sum(axis=0)


def gap_study(cases: int = 20, seed: int = 0) -> dict:
    """Optimality gap (heuristic - optimum) / optimum of the marginal-gain heuristic over random
    small cases: mean, max, per case, and the number of cases where it is optimal."""
    rng = np.random.default_rng(seed)
    gaps, sizes = [], []
    for _ in range(cases):
        jobs, cap = random_case(rng)
        heur = objective(jobs, greedy_allocate(jobs, cap))
        _, best = solve_exact(jobs, cap)
        gaps.append(max(heur - best, 0.0) / best if best > 0 else 0.0)
        sizes.append(len(jobs))
    g = np.asarray(gaps)
    return {"cases": cases, "mean_gap": float(g.mean()), "max_gap": float(g.max()),
            "optimal_cases": int(np.sum(g <= 1e-9)), "gaps": [float(x) for x in g], "jobs": sizes}
