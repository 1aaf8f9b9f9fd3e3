"""Pollux's NSGA-II on arrays (policies/allocate/pollux_nsga.py) against pymoo 0.6.2's own.

Each step against pymoo's object: the rank-and-crowding survival against `RankAndCrowding`, the
crowding distance against pymoo's "cd" function, the tournament against `binary_tournament`,
each on random objective arrays with ties and with the same random generator, and then whole
searches against `pymoo.optimize.minimize` with NSGA2 and Pollux's operators (the way the search
ran before it was written on arrays, `_pymoo_search` below): fed the same `rng`, both draw the
same numbers in the same order, so the front, the pick and the state `rng` is left in are the
same, member for member. Whole-search equality covers what the step tests do not: the initial
population (repair, duplicates), mating's refills after duplicates and its 100 tries, crossover
probability, the offspring count, and the number of generations.
"""
import numpy as np
import pytest

from dlsched.policies.allocate import pollux_ga, pollux_nsga
from dlsched.policies.allocate.pollux_ga import Problem, restart_factor


def _objective_arrays(seed: int):
    """Random objective arrays, many with ties (small integer values) and duplicate rows."""
    r = np.random.default_rng(seed)
    n, m = int(r.integers(1, 80)), int(r.integers(2, 4))
    if seed % 2:
        return r.integers(0, int(r.integers(1, 7)), size=(n, m)).astype(float)
    return r.random((n, m))


def _moo_problem(m: int):
    from pymoo.core.problem import Problem as MooProblem
    return MooProblem(n_var=1, n_obj=m)


@pytest.mark.parametrize("seed", range(60))
def test_survival_selects_what_pymoos_rank_and_crowding_selects(seed):
    from pymoo.core.population import Population
    from pymoo.operators.survival.rank_and_crowding import RankAndCrowding
    F = _objective_arrays(seed)
    n_survive = int(np.random.default_rng(seed + 1000).integers(1, len(F) + 1))
    pop = Population.new("F", F)
    rs_theirs, rs_ours = np.random.default_rng(seed), np.random.default_rng(seed)
    theirs = RankAndCrowding().do(_moo_problem(F.shape[1]), pop, n_survive=n_survive, random_state=rs_theirs,
                                  return_indices=True)
    idx, rank, crowd = pollux_nsga.survive(F, n_survive, rs_ours)
    assert idx.tolist() == list(theirs)
    assert rank.tolist() == [pop[i].get("rank") for i in theirs]
    assert np.array_equal(crowd, np.array([pop[i].get("crowding") for i in theirs], dtype=float))
    assert rs_theirs.random() == rs_ours.random()            # the same draws, no more, no fewer


@pytest.mark.parametrize("seed", range(40))
def test_crowding_is_pymoos_to_the_bit(seed):
    from pymoo.operators.survival.rank_and_crowding.metrics import get_crowding_function
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting
    F = _objective_arrays(seed)
    fronts = NonDominatedSorting().do(F)
    for front, ours in zip(fronts, pollux_nsga.crowding(F, fronts)):
        assert np.array_equal(get_crowding_function("cd").do(F[front], n_remove=0), ours)


@pytest.mark.parametrize("seed", range(40))
def test_tournament_picks_what_pymoos_binary_tournament_picks(seed):
    from types import SimpleNamespace

    from pymoo.algorithms.moo.nsga2 import binary_tournament
    from pymoo.core.population import Population
    r = np.random.default_rng(seed)
    F = _objective_arrays(seed)
    n = len(F)
    crowd = r.choice([0.0, 0.5, 1.0, np.inf], size=n)          # ties, infinite ones among them
    P = r.integers(0, n, size=(int(r.integers(1, 60)), 2))
    pop = Population.new("F", F, "crowding", crowd, "rank", np.zeros(n, dtype=int))
    rs_theirs, rs_ours = np.random.default_rng(seed), np.random.default_rng(seed)
    algo = SimpleNamespace(tournament_type="comp_by_dom_and_crowding", random_state=rs_theirs)
    theirs = binary_tournament(pop, P, algo)[:, 0]
    assert pollux_nsga.tournament(F, crowd, P, rs_ours).tolist() == theirs.tolist()
    assert rs_theirs.random() == rs_ours.random()


def _pymoo_search(problem, seeds, rng, pop_size, generations):
    """The search as it ran on pymoo's objects (pymoo.optimize.minimize), for reference."""
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
            out["F"] = pollux_nsga.objectives(problem, states(x))

    class Cross(Crossover):
        def __init__(self):
            super().__init__(n_parents=2, n_offsprings=2)

        def _do(self, _, x, *args, **kwargs):
            return problem.crossover(states(x[0]), states(x[1]), rng).reshape(2, x.shape[1], -1)

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


def _case(seed: int, jobs: int, nodes: int, cap: int):
    """A random problem (speedups concave in replicas, a penalty for spreading) and seeds: the
    current allocation and a few repaired mutations of it, duplicates possible."""
    r = np.random.default_rng(seed)
    width = cap * nodes
    a, e = r.uniform(0.5, 2.0, size=jobs), r.uniform(0.3, 0.95, size=jobs)
    speed = np.zeros((jobs, pollux_ga.MAX_NODES + 1, width + 1))
    for n in range(1, width + 1):
        for k in range(1, min(n, pollux_ga.MAX_NODES) + 1):
            speed[:, k, n] = a * n ** e * (0.85 if k > 1 else 1.0)
    base = np.zeros((jobs, nodes), dtype=int)
    for j in range(min(jobs, nodes)):
        base[j, j] = 1
    pr = Problem(speed, [cap] * nodes, base, r.integers(1, width + 1, size=jobs),
                 restart_factor(r.uniform(10, 1000, size=jobs), r.integers(0, 3, size=jobs)), scale=nodes / width)
    seeds = [base] + [pr.repair(pr.mutate(base[None], r), r)[0] for _ in range(int(r.integers(0, 6)))]
    return pr, np.stack(seeds)


CASES = [  # (jobs, nodes, GPUs a node, population, generations)
    (3, 2, 2, 32, 20),       # a tiny space: mating runs out of new children, its 100 tries
    (6, 4, 4, 32, 20),
    (12, 8, 4, 32, 20),
    (20, 6, 8, 32, 20),
    (5, 16, 4, 32, 20),      # the pollux-fidelity cluster's shape, a typical round
    (9, 5, 3, 7, 12),        # an odd population: the offspring count rounds up, then is cut
    (4, 3, 4, 16, 1),        # one generation: the initial population alone
    (1, 1, 2, 8, 5),         # three states in all: mating finds none new, the search ends early
    (2, 1, 2, 16, 6),
]


@pytest.mark.parametrize("k", range(len(CASES)))
@pytest.mark.parametrize("seed", [0, 1])
def test_the_whole_search_is_pymoos_draw_for_draw(k, seed):
    jobs, nodes, cap, pop_size, gens = CASES[k]
    pr, seeds = _case(100 * k + seed, jobs, nodes, cap)
    rng_theirs, rng_ours = np.random.default_rng(seed), np.random.default_rng(seed)
    best_t, value_t, front_t = _pymoo_search(pr, seeds, rng_theirs, pop_size, gens)
    best_o, value_o, front_o = pollux_nsga.search(pr, seeds, rng_ours, pop_size, gens)
    assert front_o.shape == front_t.shape and (front_o == front_t).all()
    assert (best_o == best_t).all() and value_o == value_t
    assert rng_theirs.random() == rng_ours.random()          # the next round starts from the same state


@pytest.mark.parametrize("k", range(len(CASES)))
def test_every_front_member_is_repaired_and_the_run_repeats(k):
    jobs, nodes, cap, pop_size, gens = CASES[k]
    pr, seeds = _case(7 + k, jobs, nodes, cap)
    best, value, front = pollux_nsga.search(pr, seeds, np.random.default_rng(3), pop_size, gens)
    assert (pr.repair(front, np.random.default_rng(0)) == front).all()
    assert value == pr.evaluate(best[None])[0] == pr.evaluate(front).max()   # the pick: best power mean
    assert len({s.tobytes() for s in front}) == len(front)                    # no member twice
    again = pollux_nsga.search(pr, seeds, np.random.default_rng(3), pop_size, gens)
    assert (again[2] == front).all() and again[1] == value
