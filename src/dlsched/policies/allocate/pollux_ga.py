"""Pollux's allocation search: replicas per (job, node), its objective, operators and repair.

Source: petuum/adaptdl branch osdi21-artifact, `simulator/pollux.py` (`Problem._evaluate`,
`_mutation`, `_crossover`, `_repair`, `PolluxPolicy.optimize`); the code is ours.

A state is an integer matrix X[j, n]: replicas of job j on node n (one GPU each). Jobs are in
Pollux's order (least attained service first, then submission), which the repair's priorities
follow.

Objective (maximised), for a state with N_j = sum_n X[j, n] and K_j = #{n: X[j, n] > 0}:

    x_j   = speedup_j(K_j, N_j) x nodes / GPUs         (one node's worth of GPUs = speedup 1 share)
            x restart_j   when row j differs from the current allocation,
    restart_j = max(age_j - restarts_j x 30, 0) / (age_j + 30)
    value = ( mean_j (x_j + 1e-3)^p )^(1/p),  p = -1  (the power mean: a harmonic mean)

speedup_j is the job's goodput at (K, N) over its goodput at the fair share (goodput.speedup),
read from a table filled once per round (`SpeedupTable`).

Repair, in Pollux's order: (1) at most one distributed job (K > 1) per node: on each node the
first distributed job in job order keeps its replicas, later ones lose theirs there; (2) at most
max_replicas_j replicas, (3) at most 16 nodes per job: both over the nodes in a random order,
the first ones kept; (4) node capacity: on each node the jobs in order take what is left.

The search (`search`): Pollux runs pymoo's NSGA-II (population 100, 100 generations) on two
objectives, the value above and cluster utility, and returns the Pareto member best on the
first, i.e. the best value it met that survived. We run a single-objective genetic search on
the same encoding with Pollux's operators: binary tournaments, single-point crossover over jobs,
Pollux's mutation, repair, and (mu + lambda) survival (the population's best always survives).
Seeded with the previous round's population (rows of jobs still active) and the current
allocation. tests/unit/test_pollux_policy.py checks it against exhaustive search on small cases.
"""
from __future__ import annotations

import numpy as np

P_MEAN = -1.0
FLOOR = 1e-3
RESTART_S = 30.0
MAX_NODES = 16


def restart_factor(age, restarts, delay: float = RESTART_S) -> np.ndarray:
    """Pollux's penalty on a job whose allocation changes: the share of its life it would have
    spent running had every restart cost `delay`."""
    age = np.asarray(age, dtype=np.float64)
    return np.maximum(age - np.asarray(restarts) * delay, 0.0) / (age + delay)


class Problem:
    """One round's allocation problem (see the module docstring).

    speed:     (jobs, MAX_NODES + 1, R + 1) table, speed[j, K, N] = speedup of job j at (K, N)
               (0 where N = 0 or K > N)
    capacity:  (nodes,) GPUs each node offers the adaptive jobs
    base:      (jobs, nodes) current allocation
    max_rep:   (jobs,) most replicas per job
    penalty:   (jobs,) restart factor of each job
    scale:     nodes / GPUs of the cluster (Pollux's dominant share x nodes)
    avoid:     repair rule (1) on (Pollux's default) or off (its interference study's "noavoid")
    """

    def __init__(self, speed, capacity, base, max_rep, penalty, scale: float, avoid: bool = True) -> None:
        self.speed = np.asarray(speed, dtype=np.float64)
        self.capacity = np.asarray(capacity, dtype=np.int64)
        self.base = np.asarray(base, dtype=np.int64)
        self.max_rep = np.minimum(np.asarray(max_rep, dtype=np.int64), self.speed.shape[2] - 1)
        self.penalty = np.asarray(penalty, dtype=np.float64)
        self.scale = float(scale)
        self.avoid = bool(avoid)          # repair rule (1); off: Pollux's "noavoid" runs
        self.jobs, self.nodes = self.base.shape

    def evaluate(self, states: np.ndarray) -> np.ndarray:
        """The objective of each state of a (pop, jobs, nodes) array."""
        k = np.minimum(np.count_nonzero(states, axis=2), self.speed.shape[1] - 1)
        n = np.minimum(states.sum(axis=2), self.speed.shape[2] - 1)
        x = self.speed[np.arange(self.jobs)[None, :], k, n] * self.scale
        moved = np.any(states != self.base[None], axis=2)
        x = np.where(moved, x * self.penalty[None, :], x)
        return np.mean((x + FLOOR) ** P_MEAN, axis=1) ** (1.0 / P_MEAN)

    def repair(self, states: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        s = np.array(states, dtype=np.int64)
        if self.avoid:      # (1) one distributed job per node, the first in job order
            dist = np.count_nonzero(s, axis=2) > 1
            on = (s > 0) & dist[:, :, None]
            s[(np.cumsum(on, axis=1) > 1) & on] = 0
        # (2) max replicas and (3) max nodes, over the nodes in a random order
        shuffle = np.argsort(rng.random(s.shape), axis=2)
        t = np.take_along_axis(s, shuffle, axis=2)
        t = np.diff(np.minimum(np.cumsum(t, axis=2), self.max_rep[None, :, None]), axis=2, prepend=0)
        used = np.cumsum(t > 0, axis=2)
        t[used > MAX_NODES] = 0
        s = np.take_along_axis(t, np.argsort(shuffle, axis=2), axis=2)
        # (4) node capacity, jobs in order
        return np.diff(np.minimum(np.cumsum(s, axis=1), self.capacity[None, None, :]), axis=1, prepend=0)

    def mutate(self, states: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        s = np.array(states, dtype=np.int64)
        pop = s.shape[0]
        reset = rng.random((pop, self.jobs)) < 0.1                       # back to the base row
        s = np.where(reset[:, :, None], self.base[None], s)
        prob = np.where(rng.random((pop, self.jobs)) < 0.1, 0.1, 0.0)    # zero some elements
        s[rng.random(s.shape) < prob[:, :, None]] = 0
        free = self.capacity[None, :] - s.sum(axis=1)                    # (pop, nodes)
        fits = np.broadcast_to((free >= 1)[:, None, :], s.shape)
        # normalised over the jobs (axis 1), as Pollux's prob1 and prob2 (its pollux.py lines
        # 368 and 370): a node with room grows about one job; over the nodes instead, every job
        # grew onto about one more node (until 2026-12-02: decision 0057)
        p1 = fits / np.maximum(fits.sum(axis=1, keepdims=True), 1)
        held = (s > 0) & fits
        p2 = held / np.maximum(held.sum(axis=1, keepdims=True), 1)
        grow = rng.random(s.shape) < p1 + p2 - p1 * p2                   # raise some elements
        hi = self.capacity[None, None, :] + 1
        new = s + np.floor(rng.random(s.shape) * np.maximum(hi - s, 1)).astype(np.int64)
        s[grow] = new[grow]
        return s

    def crossover(self, a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Single-point crossover over jobs: two children per pair of parents."""
        point = rng.integers(0, self.jobs, size=(a.shape[0], 1, 1))
        first = np.arange(self.jobs)[None, :, None] < point
        return np.concatenate([np.where(first, a, b), np.where(first, b, a)])


def search(problem: Problem, seeds: np.ndarray, rng: np.random.Generator, pop_size: int = 100,
           generations: int = 100) -> tuple[np.ndarray, float, np.ndarray]:
    """(best state, its value, the final population). `seeds`: (k, jobs, nodes) states the
    population starts from (repaired; the rest of it are mutations of them)."""
    pop = problem.repair(seeds, rng)
    while pop.shape[0] < pop_size:
        extra = pop[rng.integers(0, pop.shape[0], size=pop_size - pop.shape[0])]
        pop = np.concatenate([pop, problem.repair(problem.mutate(extra, rng), rng)])
    pop = pop[:pop_size]
    fit = problem.evaluate(pop)
    half = (pop_size + 1) // 2
    for _ in range(generations):
        i, j = rng.integers(0, pop_size, size=(2, 2 * half))            # binary tournaments
        parents = np.where((fit[i] >= fit[j])[:, None, None], pop[i], pop[j])
        kids = problem.crossover(parents[:half], parents[half:], rng)
        kids = problem.repair(problem.mutate(kids, rng), rng)
        allp = np.concatenate([pop, kids])
        allf = np.concatenate([fit, problem.evaluate(kids)])
        keep = np.argsort(-allf, kind="stable")[:pop_size]
        pop, fit = allp[keep], allf[keep]
    best = int(np.argmax(fit))
    return pop[best], float(fit[best]), pop
