"""Round-level rules in Gavel's policy set, not LPs: FIFO (`fifo.py`), Gandiva (`gandiva.py`) and
AlloX (`allox.py`), written from their rules. Gavel keeps state in the policy object; here it
goes in and comes back (`running`, `pairs`, `previous`), so each call is a pure function.

Job order is the order of `jobs` (pass them in arrival order: Gavel sorts its integer ids).
"""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import numpy as np

from dlsched.core.errors import ConfigError
from dlsched.policies.hetero.common import (
    Allocation,
    HeteroJob,
    PackedAllocation,
    Table,
    alone_matrix,
    check_jobs,
    gpu_types,
)


def _pair_tput(table: Table, a: HeteroJob, b: HeteroJob, t: str) -> tuple[float, float]:
    return table.pair(a.job_type, a.scale_factor, b.job_type, t) or (0.0, 0.0)


def _gain(table: Table, a: HeteroJob, b: HeteroJob, types: Sequence[str], *, zero_kills: bool) -> float:
    """sum over `types` and both jobs of T_pair / T_alone (Gavel's normalised packed throughput).
    A member with nothing in the pair adds 0 (FIFO) or makes the whole sum 0 (`zero_kills`:
    Gandiva)."""
    total = 0.0
    for t in types:
        pa, pb = _pair_tput(table, a, b, t)
        for job, p in ((a, pa), (b, pb)):
            alone = table.steps_per_s(job.job_type, job.scale_factor, t) or 0.0
            if p <= 0 or alone <= 0:
                if zero_kills:
                    return 0.0
                continue
            total += p / alone
    return total


def fifo(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table, *, mode: str = "base",
         running: Mapping[str, str] | None = None, rng: random.Random | None = None,
         packing_threshold: float = 1.5, gavel_type_quirk: bool = False
         ) -> tuple[Allocation | PackedAllocation, dict[str, str]]:
    """FIFO: jobs take whole GPUs (X = 1 on one type) in `jobs` order while one fits.

    - "base" (agnostic): a job in `running` (the previous call's `{job_id: type}`, returned as the
      second value) keeps its type; a type freed by a finished job (in `running`, not in `jobs`)
      goes first to the head of the queue if it fits there; then each queued job takes a random
      type (`rng`) among those with >= s_m free. `gavel_type_quirk=True` gives what Gavel's code
      does instead: the last type by name (V100 of K80/P100/V100) whenever some type has room,
      which may over-commit V100 (Gavel's base branch draws a random index but never sets the
      type variable from it).
    - "perf": no state; each job in order takes the free type where its T is highest.
    - "packed": "perf", then queued jobs in order try to share a placed single job's GPUs (equal
      s): the partner with the largest T_a,pair/T_a + T_b,pair/T_b on the placed job's type, if
      that exceeds `packing_threshold` (1.5); the first job without one ends the pass. Returns a
      `PackedAllocation`.

    The queue stops at the first job no type can hold (FIFO: nothing jumps ahead); a job whose
    chosen type gives it 0 steps/s is skipped. Returns (allocation, assignment) with assignment
    `{job_id: type}` (pairs: both members).
    """
    check_jobs(jobs)
    if mode not in ("base", "perf", "packed"):
        raise ConfigError("mode", f"must be 'base', 'perf' or 'packed', got {mode!r}")
    types, N = gpu_types(cluster)
    free = dict(zip(types, N.astype(int).tolist()))
    T = alone_matrix(jobs, types, table)
    idx = {j.job_id: i for i, j in enumerate(jobs)}
    rng = rng or random.Random(0)
    placed: dict[str, str] = {}
    queue = list(range(len(jobs)))
    for job_id, t in (running or {}).items():
        if t not in free:
            raise ConfigError(f"running.{job_id}", f"GPU type {t!r} is not in the cluster ({', '.join(types)})")
    if mode == "base" and running:
        # Gavel's pass over its previous allocation, in job id order: a job still here keeps its
        # type; a finished one's type goes to the queue's head (jobs without a type, in order) if
        # it fits in what is free so far
        queue = [i for i in queue if jobs[i].job_id not in running]
        for job_id in sorted(running):
            t = running[job_id]
            if job_id in idx:
                placed[job_id] = t
                free[t] -= jobs[idx[job_id]].scale_factor
            elif queue:
                head = jobs[queue[0]]
                if head.scale_factor <= free[t] and T[queue[0], types.index(t)] > 0:
                    placed[head.job_id] = t
                    free[t] -= head.scale_factor
                    queue.pop(0)
    # Gavel's list of types with a free GPU, in name order; a type leaves it when its free count
    # reaches exactly 0 (the entry removed is the chosen one's: in base mode with the quirk, the
    # randomly drawn one's, as Gavel's code removes it)
    avail = [t for t in types if free[t] > 0]
    while queue and avail:
        i = queue.pop(0)
        job = jobs[i]
        fits = [(k, t) for k, t in enumerate(avail) if free[t] >= job.scale_factor]
        if not fits:
            break
        if mode == "base":
            pick = rng.randrange(len(fits))
            t = avail[-1] if gavel_type_quirk else fits[pick][1]
        else:
            pick = max(range(len(fits)), key=lambda p: (T[i, types.index(fits[p][1])], -p))
            t = fits[pick][1]
        if T[i, types.index(t)] > 0:
            placed[job.job_id] = t
            free[t] -= job.scale_factor
            if free[t] == 0:
                avail.pop(fits[pick][0])
    zero = dict.fromkeys(types, 0.0)
    alloc: Allocation = {j.job_id: zero.copy() for j in jobs}
    for job_id, t in placed.items():
        alloc[job_id][t] = 1.0
    if mode != "packed":
        return alloc, placed
    pairs: dict[tuple[str, str], str] = {}
    singles = dict(placed)
    for i in queue:
        new = jobs[i]
        best, partner = packing_threshold, None
        for job_id, t in singles.items():
            old = jobs[idx[job_id]]
            if old.scale_factor != new.scale_factor:
                continue
            g = _gain(table, old, new, [t], zero_kills=False)
            if g > best:
                best, partner = g, job_id
        if partner is None:
            break
        pairs[(partner, new.job_id)] = singles.pop(partner)
    out: PackedAllocation = {(j.job_id,): {t: 0.0 for t in types} for j in jobs}
    for job_id, t in singles.items():
        out[(job_id,)][t] = 1.0
    for key, t in pairs.items():
        out[key] = {ty: float(ty == t) for ty in types}
        for job_id in key:
            placed[job_id] = t
    return out, placed


def gandiva(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table, *,
            pairs: Sequence[tuple[str, str]] = (), rng: random.Random | None = None
            ) -> tuple[PackedAllocation, list[tuple[str, str]]]:
    """Gavel's Gandiva: time-slicing, plus random pairs when the cluster is oversubscribed.

    `pairs` (the previous call's, returned as the second value) are kept unless a member has
    left or their normalised packed throughput, summed over every type as Gavel sums it, is < 1.
    If sum_m s_m <= sum_j N_j every job gets its `isolated` share alone. Otherwise each job not
    in a kept pair is paired at random (n tries: draw two, pair them if their scale factors
    match), the rest stay alone, and each scheduled combination c gets an equal share
    X[c, j] = N_j / (n_c s_c), rows divided by max(row sum, 1).
    """
    check_jobs(jobs)
    types, N = gpu_types(cluster)
    rng = rng or random.Random(0)
    idx = {j.job_id: i for i, j in enumerate(jobs)}
    kept = [p for p in pairs if p[0] in idx and p[1] in idx
            and _gain(table, jobs[idx[p[0]]], jobs[idx[p[1]]], types, zero_kills=True) >= 1.0]
    combos: list[tuple[str, ...]]
    if sum(j.scale_factor for j in jobs) <= N.sum():
        combos = [(j.job_id,) for j in jobs]
    else:
        in_pair = {m for p in kept for m in p}
        pool = [j.job_id for j in jobs if j.job_id not in in_pair]
        new_pairs = []
        for _ in range(len(pool)):
            if len(pool) < 2:
                break
            a, b = rng.sample(pool, 2)
            if jobs[idx[a]].scale_factor != jobs[idx[b]].scale_factor:
                continue
            pool.remove(a)
            pool.remove(b)
            new_pairs.append((a, b) if idx[a] < idx[b] else (b, a))
        kept = kept + new_pairs
        combos = list(kept) + [(m,) for m in pool]
    out: PackedAllocation = {(j.job_id,): {t: 0.0 for t in types} for j in jobs}
    n_c = len(combos)
    for combo in combos:
        s = jobs[idx[combo[0]]].scale_factor
        row = N / (n_c * s)
        row = row / max(row.sum(), 1.0)
        out[tuple(combo)] = {t: float(v) for t, v in zip(types, row)}
    return out, list(kept)


def allox(jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table: Table, *,
          previous: Allocation | None = None, alpha: float = 1.0) -> Allocation:
    """AlloX (Le et al., EuroSys'20) as Gavel runs it: 1-GPU jobs only, min-cost matching.

    A job whose `previous` row sums to 1 keeps it (and its GPU). The oldest (largest
    time_since_arrival_s) max(int(alpha n), free GPUs) of the other n jobs are matched to
    (free GPU g, position k = 1..n) at cost k R_m / T[m, type(g)] + t_m (T = 0 read as 1e-10) by
    the Hungarian method (`scipy.optimize.linear_sum_assignment`): position k means k-th from
    last on that GPU, so the cost sums the jobs' completion times. Each GPU runs now the job
    matched to it at its largest k; that job gets X = 1 on the GPU's type.

    Gavel builds every (GPU, k <= n) column: n x (n x GPUs) costs, 6 GB and minutes at 1,000
    jobs. GPUs of one type are identical, and an optimal matching fills them evenly (moving a
    type's deepest job to a GPU of that type two levels shallower lowers its cost k q), so
    k <= ceil(n / F_t) on the F_t free GPUs of type t loses no optimum: n x (3n + GPUs) costs.
    Jobs at equal k on GPUs of one type tie, so which of them runs now is the solver's pick, in
    Gavel's matching too.
    """
    from scipy.optimize import linear_sum_assignment
    check_jobs(jobs)
    for j in jobs:
        if j.scale_factor != 1:
            raise ConfigError(f"jobs[{j.job_id}].scale_factor", "AlloX takes 1-GPU jobs only")
    types, N = gpu_types(cluster)
    previous = previous or {}
    alloc: Allocation = {j.job_id: {t: 0.0 for t in types} for j in jobs}
    free = dict(zip(types, N.astype(int).tolist()))
    waiting = []
    for j in jobs:
        row = previous.get(j.job_id)
        if row is not None:
            alloc[j.job_id] = {t: float(row.get(t, 0.0)) for t in types}
        if row is not None and sum(row.values()) == 1.0:
            for t, v in row.items():
                if v == 1.0:
                    free[t] -= 1
        else:
            waiting.append(j)
    n_free = sum(max(free[t], 0) for t in types)
    if not waiting or n_free == 0:
        return alloc
    waiting.sort(key=lambda j: -j.time_since_arrival_s)          # stable: ties keep `jobs` order
    waiting = waiting[:max(int(alpha * len(waiting)), n_free)]
    m = len(waiting)
    T = alone_matrix(waiting, types, table)
    T = np.where(T == 0, 1e-10, T)
    R = np.array([j.remaining_steps for j in waiting])
    wait = np.array([j.time_since_arrival_s for j in waiting])
    # columns (type, GPU u, position k): k <= ceil(m / F_t) suffices (module docstring of allox)
    col_type, col_gpu, col_k, blocks = [], [], [], []
    gpu_base = 0
    for ti, t in enumerate(types):
        f = max(free[t], 0)
        if f == 0:
            continue
        depth = -(-m // f)
        ks = np.repeat(np.arange(1, depth + 1), f)
        us = np.tile(np.arange(f), depth)
        blocks.append(ks[None, :] * (R / T[:, ti])[:, None] + wait[:, None])
        col_type += [t] * len(ks)
        col_gpu.append(gpu_base + us)
        col_k.append(ks)
        gpu_base += f
    gpu_of, k_of = np.concatenate(col_gpu), np.concatenate(col_k)
    rows, cols = linear_sum_assignment(np.concatenate(blocks, axis=1))
    first: dict[int, tuple[int, int, str]] = {}                              # GPU -> (k, job, type)
    for r, c in zip(rows, cols):
        gpu, k = int(gpu_of[c]), int(k_of[c])
        if gpu not in first or k > first[gpu][0]:
            first[gpu] = (k, r, col_type[c])
    for _, r, t in first.values():
        alloc[waiting[r].job_id][t] = 1.0
    return alloc
