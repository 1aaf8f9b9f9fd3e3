"""Pollux's own search: NSGA-II on two objectives, with Pollux's operators and repair.

Source: petuum/adaptdl branch osdi21-artifact, `simulator/pollux.py` (`PolluxPolicy.optimize`,
`Problem.get_cluster_utilities`); the code is ours. Pollux ran pymoo 0.4's NSGA2; this is pymoo
0.6.2's NSGA2 (`pymoo.optimize.minimize` with our sampling, crossover, mutation and repair), step
for step, on numpy arrays.

The objectives, both minimised: minus the power mean of pollux_ga.Problem.evaluate, and minus
the cluster utility, the most utilised resource's mean of speedup / replicas weighted by each
job's share of the GPUs on the nodes in use. Operators are pollux_ga.Problem's (Pollux's):
single-point crossover over jobs (two children a pair), mutation, repair. The population starts
from `seeds` (the last round's front, as Pollux's `_adapt_prev_states`), and the pick is the
member of the final non-dominated front best on the first objective (Pollux:
`np.argmin(values[:, 0])`).

What pymoo 0.6.2 does with this configuration, and so what `search` does, in the same order and
with the same random draws: `rng` (ours) drives the operators; pymoo's own generator
(`default_rng(seed)`, the seed drawn from `rng`) drives selection and survival.

- start: the seeds repaired (ours), then repaired again and deduplicated (pymoo's
  Initialization), evaluated, and ranked by the survival below with all of them kept (so the first
  population is as many as there are distinct seeds). That counts as generation 1: `generations`
  G runs G - 1 matings.
- mating (core/mating.py, core/infill.py), until pop_size offspring or 100 tries: n =
  ceil(still needed / 2) pairs; binary tournaments on consecutive random permutations of the
  population (`binary_tournament`: the dominating one wins, else the larger crowding distance,
  else a coin); crossover on each pair with probability 0.9 (else the parents are the children;
  the children are all first ones, then all second ones); mutation of every child (pymoo draws a
  probability per child and compares it with 1.0: always); repair; children equal to an earlier
  child, a member of the population or an offspring kept already are dropped; the surplus cut
  from the end. No offspring at all ends the search (the population is re-ranked once more).
- survival (`RankAndCrowding`): non-dominated fronts until pop_size are ranked; a front that does
  not fit whole is sorted by crowding distance, descending, ties in a random order
  (`randomized_argsort`), and cut; the survivors are the fronts in order, each member's rank and
  crowding distance kept for the next tournaments.
- result: the members of rank 0, in population order.

pymoo's non-dominated sorting and randomized argsort are called as they are; the crowding
distance is pymoo's "cd" computed for all fronts at once (the same operations, so the same
floats); pymoo's Population and Individual objects (a Python object per member, get/set per
member, its termination and display) are not used. tests/unit/test_pollux_moo.py checks the
survival, crowding and tournament against pymoo's own on random objective arrays with ties, and
whole searches against `pymoo.optimize.minimize` with the same configuration: the same front,
pick and final `rng` state, member for member.

Cost at the pollux-fidelity size (32 x 20, `benchmarks/bench_pollux.py`, pollux-7, 1,314 rounds,
2-core machine under load): 39 CPU s a workload, was 84 on pymoo's objects (the GA: 23). About
three quarters of it is the search; well over half of that is Pollux's operators
(pollux_ga.Problem.repair, mutate: called once per mating try, about two tries a generation as
duplicates are refilled), then the survival, evaluation and tournaments.

`search` has pollux_ga.search's signature and returns the final front as the population to seed
the next round with. The allocator's default (`search: nsga2`, at 32 x 20: decision 0056);
`search: ga` picks our single objective search (docs/policies/pollux.md says what each gives and
costs).
"""
from __future__ import annotations

import functools
import math

import numpy as np

CROSS_PROB = 0.9        # pymoo's Crossover default
MAX_TRIES = 100         # pymoo's GeneticAlgorithm: Mating(n_max_iterations=100)


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


def objectives(problem, states: np.ndarray) -> np.ndarray:
    """(pop, 2): minus the power mean, minus the cluster utility."""
    return np.column_stack([-problem.evaluate(states), -utility(problem, states)])


def crowding(F: np.ndarray, fronts: list[np.ndarray]) -> list[np.ndarray]:
    """pymoo's crowding distance ("cd": calc_crowding_distance through FunctionalDiversity) of
    each front, all fronts at once: the same operations on the same numbers, so the same floats.
    Per objective, a front's members sorted stably (ties in front order), each member's gaps to
    its neighbours over the front's range (infinite at the ends; 0 where the range is 0), summed
    over the objectives and halved; fronts of one or two members are infinite."""
    sizes = np.fromiter(map(len, fronts), dtype=np.int64, count=len(fronts))
    ends = np.cumsum(sizes) - 1                        # each front's last position
    starts = ends + 1 - sizes
    idx = np.concatenate(fronts)
    group = np.repeat(np.arange(len(fronts)), sizes)
    G = F[idx]
    m = len(idx)
    total = np.zeros(m)
    gap = np.empty(m + 1)
    with np.errstate(invalid="ignore"):
        for j in range(F.shape[1]):
            order = np.lexsort((G[:, j], group))       # by front, then value; stable
            sv = G[order, j]
            norm = sv[ends] - sv[starts]               # max - min of each front
            norm[norm == 0] = np.nan
            norm = norm[group]
            gap[1:-1] = sv[1:] - sv[:-1]               # gap[i]: member i to the one before it
            gap[starts] = np.inf                       # no neighbour: infinite (but 0 / nan -> 0)
            gap[ends + 1] = np.inf
            to_last, to_next = gap[:-1] / norm, gap[1:] / norm
            to_last[np.isnan(to_last)] = 0.0
            to_next[np.isnan(to_next)] = 0.0
            d = np.empty(m)
            d[order] = to_last + to_next
            total = d if j == 0 else total + d
    cd = total / F.shape[1]
    cd[(sizes <= 2)[group]] = np.inf
    return np.split(cd, ends[:-1] + 1)


def survive(F: np.ndarray, n_survive: int, rs: np.random.Generator):
    """pymoo's RankAndCrowding: (indices of the survivors in their order, their rank, their
    crowding distance)."""
    from pymoo.util.randomized_argsort import randomized_argsort

    F = np.asarray(F, dtype=np.float64)
    n_survive = min(n_survive, len(F))
    if len(F) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
    fronts = _nds().do(F, n_stop_if_ranked=n_survive)
    idx, rank, crowd = [], [], []
    taken = 0
    for k, (front, cd) in enumerate(zip(fronts, crowding(F, fronts))):
        if taken + len(front) > n_survive:
            n_remove = taken + len(front) - n_survive
            keep = randomized_argsort(cd, order="descending", method="numpy", random_state=rs)[:-n_remove]
            front, cd = front[keep], cd[keep]
        idx.append(front)
        rank.append(np.full(len(front), k))
        crowd.append(cd)
        taken += len(front)
    return np.concatenate(idx), np.concatenate(rank), np.concatenate(crowd)


@functools.cache
def _nds():
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting
    return NonDominatedSorting()


def tournament(F: np.ndarray, crowd: np.ndarray, P: np.ndarray, rs: np.random.Generator) -> np.ndarray:
    """pymoo's binary_tournament (comp_by_dom_and_crowding, every member feasible): the winner of
    each row (a, b) of P."""
    a, b = P[:, 0], P[:, 1]
    fa, fb = F[a], F[b]
    a_less, b_less = (fa < fb).any(axis=1), (fb < fa).any(axis=1)
    ca, cb = crowd[a], crowd[b]
    S = np.where(a_less & ~b_less, a, np.where(b_less & ~a_less, b, np.where(ca > cb, a, b)))
    tie = ~(a_less ^ b_less) & ~(ca > cb) & ~(ca < cb)
    for i in np.flatnonzero(tie):       # compare(..., return_random_if_equal=True): a coin each, in order
        S[i] = rs.choice([a[i], b[i]])
    return S


def _keys(X: np.ndarray) -> list[bytes]:
    """Each row's bytes: rows are equal where their keys are (pymoo: distance <= 1e-16)."""
    X = np.ascontiguousarray(X, dtype=np.int64)
    if X.shape[1] == 0:
        return [b""] * len(X)
    return X.view(np.dtype((np.void, X.itemsize * X.shape[1]))).ravel().tolist()


def mate(problem, X: np.ndarray, F: np.ndarray, crowd: np.ndarray, n_offsprings: int,
         rng: np.random.Generator, rs: np.random.Generator) -> np.ndarray:
    """pymoo's Mating (InfillCriterion.do): up to n_offsprings new distinct members, flattened."""
    shape = (problem.jobs, problem.nodes)
    n_var = X.shape[1]
    seen = set(_keys(X))
    off = []
    for _ in range(MAX_TRIES):
        if len(off) >= n_offsprings:
            break
        n_left = n_offsprings - len(off)
        n_mat = math.ceil(n_left / 2)
        n_random = n_mat * 2 * 2                                       # TournamentSelection
        perms = [rs.permutation(len(X)) for _ in range(math.ceil(n_random / len(X)))]
        P = np.concatenate(perms)[:n_random].reshape(n_mat * 2, 2)
        S = tournament(F, crowd, P, rs).reshape(n_mat, 2)
        kids = X[S.T]                                                  # (2, n_mat, n_var)
        cross = rs.random(n_mat) < CROSS_PROB
        if cross.any():
            q = problem.crossover(kids[0].reshape(n_mat, *shape), kids[1].reshape(n_mat, *shape), rng)
            q = q.reshape(2, n_mat, n_var)
            kids[:, cross] = q[:, cross]
        kids = kids.reshape(2 * n_mat, *shape)
        kids = problem.mutate(kids, rng)
        rs.random(len(kids))                     # Mutation's per-child probability (1.0: all mutate)
        kids = problem.repair(kids, rng).reshape(2 * n_mat, n_var)
        new = []
        for i, key in enumerate(_keys(kids)):    # DefaultDuplicateElimination: self, population, offspring
            if key not in seen:
                seen.add(key)
                new.append(i)
        off.extend(kids[new[:n_left]])
    return np.array(off, dtype=np.int64).reshape(len(off), n_var)


def search(problem, seeds: np.ndarray, rng: np.random.Generator, pop_size: int = 100,
           generations: int = 100) -> tuple[np.ndarray, float, np.ndarray]:
    """(best state, its value, the final front); see the module docstring."""
    shape = (problem.jobs, problem.nodes)
    start = problem.repair(np.asarray(seeds, dtype=np.int64), rng)
    rs = np.random.default_rng(int(rng.integers(2**31)))               # minimize(..., seed=)
    X = problem.repair(start, rng).reshape(len(start), -1)              # Initialization's repair
    first = {}
    for i, key in enumerate(_keys(X)):
        first.setdefault(key, i)
    X = X[sorted(first.values())]
    F = objectives(problem, X.reshape(len(X), *shape))
    idx, rank, crowd = survive(F, len(X), rs)
    X, F = X[idx], F[idx]
    for _ in range(max(generations, 1) - 1):
        off = mate(problem, X, F, crowd, pop_size, rng, rs)
        if len(off):
            X = np.concatenate([X, off])
            F = np.concatenate([F, objectives(problem, off.reshape(len(off), *shape))])
        idx, rank, crowd = survive(F, pop_size, rs)
        X, F = X[idx], F[idx]
        if not len(off):
            break
    x, f = X[rank == 0], F[rank == 0]
    front = _nds().do(f, only_non_dominated_front=True)
    x, f = x[front], f[front]
    best = int(np.argmin(f[:, 0]))
    pop = x.reshape(len(x), *shape)
    return pop[best], float(-f[best, 0]), pop
