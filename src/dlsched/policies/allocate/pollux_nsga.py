"""Pollux's own search: pymoo's NSGA-II on two objectives, with Pollux's operators and repair.

Source: petuum/adaptdl branch osdi21-artifact, `simulator/pollux.py` (`PolluxPolicy.optimize`,
`Problem.get_cluster_utilities`); the code is ours, on pymoo 0.6 (Pollux ran pymoo 0.4).

The objectives, both minimised: minus the power mean of pollux_ga.Problem.evaluate, and minus
the cluster utility, the most utilised resource's mean of speedup / replicas weighted by each
job's share of the GPUs on the nodes in use. Operators are pollux_ga.Problem's (Pollux's):
single-point crossover over jobs (two children a pair, pymoo's crossover probability 0.9),
mutation, repair. The population starts from `seeds` (the current allocation and the last
round's front, as Pollux's `_adapt_prev_states`), and the pick is the member of the final
non-dominated front best on the first objective (Pollux: `np.argmin(values[:, 0])`).

`search` has pollux_ga.search's signature and returns the final front as the population to
seed the next round with. Chosen by the allocator's `search: nsga2` (default `ga`: our single
objective search, docs/policies/pollux.md says what each gives and costs). pymoo is a
dependency (pinned in pyproject.toml).
"""
from __future__ import annotations

import numpy as np


def utility(problem, states: np.ndarray) -> np.ndarray:
    """Pollux's cluster utility of each state of a (pop, jobs, nodes) array (one resource, GPUs,
    a replica one GPU)."""
    k = np.minimum(np.count_nonzero(states, axis=2), problem.speed.shape[1] - 1)
    n = states.sum(axis=2)
    sp = problem.speed[np.arange(problem.jobs)[None, :], k, np.minimum(n, problem.speed.shape[2] - 1)]
    active = (states.sum(axis=1) > 0) * problem.capacity[None, :]
    total = active.sum(axis=1, keepdims=True).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(n > 0, n / total, 0.0)
        per = np.where(n > 0, sp / n, 0.0)
    return np.sum(per * share, axis=1)


def search(problem, seeds: np.ndarray, rng: np.random.Generator, pop_size: int = 100,
           generations: int = 100) -> tuple[np.ndarray, float, np.ndarray]:
    """(best state, its value, the final front); see the module docstring."""
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.crossover import Crossover
    from pymoo.core.mutation import Mutation
    from pymoo.core.problem import Problem as MooProblem
    from pymoo.core.repair import Repair
    from pymoo.optimize import minimize
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    shape = (problem.jobs, problem.nodes)

    def states(x):
        return np.asarray(x, dtype=np.int64).reshape(len(x), *shape)

    class Moo(MooProblem):
        def __init__(self):
            super().__init__(n_var=problem.jobs * problem.nodes, n_obj=2, xl=0,
                             xu=int(problem.capacity.max(initial=1)), vtype=int)

        def _evaluate(self, x, out, *args, **kwargs):
            s = states(x)
            out["F"] = np.column_stack([-problem.evaluate(s), -utility(problem, s)])

    class Cross(Crossover):
        def __init__(self):
            super().__init__(n_parents=2, n_offsprings=2)

        def _do(self, _, x, *args, **kwargs):
            n = x.shape[1]
            kids = problem.crossover(states(x[0]), states(x[1]), rng)      # (2n, jobs, nodes)
            return kids.reshape(2, n, -1)

    class Mutate(Mutation):
        def _do(self, _, x, *args, **kwargs):
            return problem.mutate(states(x), rng).reshape(len(x), -1)

    class Fix(Repair):
        def _do(self, _, x, **kwargs):
            return problem.repair(states(x), rng).reshape(len(x), -1)

    start = problem.repair(np.asarray(seeds, dtype=np.int64), rng).reshape(len(seeds), -1)
    algo = NSGA2(pop_size=pop_size, sampling=start, crossover=Cross(), mutation=Mutate(), repair=Fix())
    res = minimize(Moo(), algo, ("n_gen", max(generations, 1)), seed=int(rng.integers(2**31)), verbose=False)
    x, f = np.atleast_2d(res.X), np.atleast_2d(res.F)
    front = NonDominatedSorting().do(f, only_non_dominated_front=True)
    x, f = x[front], f[front]
    best = int(np.argmin(f[:, 0]))
    pop = states(x)
    return pop[best], float(-f[best, 0]), pop
