"""Gavel's heterogeneity-aware allocation policies, as pure functions.

Gavel (Narayanan et al., OSDI'20; stanford-futuredata/gavel, `scheduler/policies/*.py`) turns a
scheduling policy into an optimisation over an allocation X: X[m, j] is the fraction of time job m
should run on GPU type j (all s_m of its GPUs on that type). Here every policy is a function

    policy(jobs, cluster, table, ...) -> {job_id: {gpu_type: time_fraction}}

with `jobs` a sequence of `HeteroJob`, `cluster` the GPUs per type (`{"V100": 36, ...}`) and
`table` a `dlsched.workload.throughputs.ThroughputTable` (`load_throughputs("gavel")`). Nothing is
kept between calls: what Gavel keeps in its policy objects (Themis's isolated time, Gandiva's
pairs, FIFO's and AlloX's previous assignment) is passed in and handed back.

Notation (one for every module): T[m, j] steps/s of job m alone on type j at its scale factor
(0 where the table has no entry), s_m scale factor (GPUs), w_m priority weight, N_j GPUs of type j,
R_m remaining steps, t_m seconds since arrival. Effective throughput tput_m(X) = sum_j T[m, j]
X[m, j]. Gavel's base constraints, kept exactly:

    X >= 0,     sum_j X[m, j] <= 1  (each job),     sum_m s_m X[m, j] <= N_j  (each type).

Space sharing (`_packed`): columns are combinations c, a job alone `(a,)` or a pair `(a, b)` of
equal scale factor sharing the GPUs; a pair counts once against N_j, and each job's time over every
combination holding it is <= 1. The packed allocation is `{(a,): {...}, (a, b): {...}}`
(`PackedAllocation`; `job_shares` folds it to per-job time).

Modules: `lp` (HiGHS, and the basis carried between LPs), `common` (jobs, problem assembly), `max_min` (LAS and its water filling),
`finish_time` (Themis), `throughput` (isolated, min total duration, max sum throughput), `rules`
(FIFO, Gandiva, AlloX: round-level rules, not LPs). Linear problems are solved by HiGHS through
`highspy` (the release scipy's linprog bundles; `lp`); it is imported on first solve, not on import.
"""
from dlsched.policies.hetero.common import (
                                            Allocation,
                                            HeteroJob,
                                            PackedAllocation,
                                            advance_isolated_time,
                                            agnostic_reference,
                                            effective_throughputs,
                                            job_shares,
)
from dlsched.policies.hetero.finish_time import (
                                            finish_time_fairness,
                                            finish_time_fairness_perf,
                                            finish_time_ratios,
)
from dlsched.policies.hetero.max_min import (
                                            max_min_fairness,
                                            max_min_fairness_packed,
                                            max_min_fairness_perf,
                                            max_min_fairness_water_filling,
                                            max_min_fairness_water_filling_packed,
                                            max_min_fairness_water_filling_perf,
)
from dlsched.policies.hetero.lp import Warm
from dlsched.policies.hetero.rules import allox, fifo, gandiva
from dlsched.policies.hetero.throughput import (
                                            isolated,
                                            isolated_throughputs,
                                            max_sum_throughput_perf,
                                            min_total_duration,
                                            min_total_duration_perf,
)

__all__ = [
    "Allocation", "HeteroJob", "PackedAllocation", "Warm", "advance_isolated_time", "agnostic_reference", "allox",
    "effective_throughputs", "fifo", "finish_time_fairness", "finish_time_fairness_perf",
    "finish_time_ratios",
    "gandiva", "isolated", "isolated_throughputs", "job_shares", "max_min_fairness",
    "max_min_fairness_packed", "max_min_fairness_perf", "max_min_fairness_water_filling",
    "max_min_fairness_water_filling_packed", "max_min_fairness_water_filling_perf", "max_sum_throughput_perf", "min_total_duration",
    "min_total_duration_perf",
]
