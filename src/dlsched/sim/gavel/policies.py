"""Gavel's policies as the round mechanism calls them: one allocator per run, holding what
Gavel's policy objects hold between calls (FIFO's assignment, Gandiva's pairs and random stream,
AlloX's previous allocation, Themis's isolated time), around the pure functions of
dlsched.policies.hetero.

An allocator is called with the active jobs (`HeteroJob`, in arrival order), the GPUs per type
and the time, and answers `{combination: {gpu_type: fraction}}` with combinations as tuples of
job ids: `(a,)` alone, `(a, b)` sharing GPUs (packing policies only).

`GAVEL_POLICIES` names each under dlsched's name (`gavel-` + Gavel's name, hyphens for
underscores) with Gavel's own class name (`label`), which decides two things in Gavel's
scheduler: the GPU type order is shuffled each round unless the label holds `Perf` or `Packing`,
pairs are scheduled only when it holds `Packing`, and a `FIFO` label skips jobs of priority 0.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlsched.policies.hetero.common import HeteroJob


def _h():
    """dlsched.policies.hetero, imported on first use: dlsched.policies registers the gavel-*
    profiles from this module's table, so this module must not import that package at load."""
    from dlsched.policies import hetero
    return hetero


Combo = tuple[str, ...]
Allocation = dict[Combo, dict[str, float]]


def _singles(alloc: Mapping[str, Mapping[str, float]]) -> Allocation:
    """Keyed by combination; the rows are the policy's own (fresh at each call, read only)."""
    return {(job_id,): row for job_id, row in alloc.items()}


def _packed(alloc: Mapping[tuple[str, ...], Mapping[str, float]]) -> Allocation:
    return {k if type(k) is tuple else tuple(k): row for k, row in alloc.items()}


class _Stateless:
    """A policy that is a function of the jobs; `warm`: HiGHS's basis carried between calls."""

    def __init__(self, fn: str, packed: bool, seed: int, warm: bool = False, **kw) -> None:
        self.fn, self.packed, self.kw = getattr(_h(), fn), packed, dict(kw)
        if warm:
            self.kw["warm"] = _h().Warm()

    def __call__(self, jobs: Sequence[HeteroJob], cluster: Mapping[str, int], table, now: float) -> Allocation:
        if not jobs:
            return {}
        out = self.fn(jobs, cluster, table, **self.kw)
        return _packed(out) if self.packed else _singles(out)


class _Fifo:
    """Gavel's FIFOPolicy: in base mode each job keeps its type until it finishes; the type
    choice follows Gavel's code (`gavel_type_quirk`: see `hetero.rules.fifo`)."""

    def __init__(self, mode: str, seed: int) -> None:
        self.mode, self.rng, self.running = mode, random.Random(seed), {}

    def __call__(self, jobs, cluster, table, now):
        alloc, placed = _h().fifo(jobs, cluster, table, mode=self.mode, running=self.running if self.mode == "base" else None,
                               rng=self.rng, gavel_type_quirk=True)
        self.running = placed
        return _packed(alloc) if self.mode == "packed" else _singles(alloc)


class _Gandiva:
    def __init__(self, seed: int) -> None:
        self.rng, self.pairs = random.Random(seed), []

    def __call__(self, jobs, cluster, table, now):
        if not jobs:
            return {}
        alloc, self.pairs = _h().gandiva(jobs, cluster, table, pairs=self.pairs, rng=self.rng)
        return _packed(alloc)


class _AlloX:
    def __init__(self, seed: int) -> None:
        self.previous: dict = {}

    def __call__(self, jobs, cluster, table, now):
        if not jobs:
            return {}
        alloc = _h().allox(jobs, cluster, table, previous=self.previous)
        self.previous = alloc
        return _singles(alloc)


class _FinishTime:
    """Themis's C_m as Gavel's FinishTimeFairnessPolicy keeps it: at each call, the steps done
    since the previous call divided by the isolated throughput of that call."""

    def __init__(self, perf: bool, seed: int) -> None:
        self.perf = perf
        self.iso_time: dict[str, float] = {}
        self.prev: dict[str, tuple[float, float]] = {}     # job -> (remaining steps, isolated steps/s)
        self.warm = _h().Warm()                            # HiGHS's basis, from one call to the next

    def __call__(self, jobs, cluster, table, now):
        if not jobs:
            return {}
        # (the agnostic policy's own reference: hetero.common.agnostic_reference)
        ref = None if self.perf else _h().agnostic_reference(sorted(cluster), table)
        self.iso_time = {j.job_id: self.iso_time[j.job_id] for j in jobs if j.job_id in self.iso_time}   # left: gone
        out = []
        for j in jobs:
            c = self.iso_time.get(j.job_id, 0.0)
            if j.job_id in self.prev:
                r0, iso0 = self.prev[j.job_id]
                if iso0 > 0:
                    c += (r0 - j.remaining_steps) / iso0
            self.iso_time[j.job_id] = c
            out.append(replace(j, isolated_time_s=max(c, 0.0)))
        iso = _h().isolated_throughputs(out, cluster, table, reference=ref)
        self.prev = {j.job_id: (j.remaining_steps, iso[j.job_id]) for j in out}
        fn = _h().finish_time_fairness_perf if self.perf else _h().finish_time_fairness
        return _singles(fn(out, cluster, table, warm=self.warm))


@dataclass(frozen=True)
class GavelPolicy:
    name: str                     # dlsched's name: gavel-max-min-fairness-perf
    gavel: str                    # Gavel's policy name (`utils.get_policy`): max_min_fairness_perf
    label: str                    # Gavel's class name (`policy.name`): MaxMinFairness_Perf
    make: Callable[[int], Callable]
    summary: str

    @property
    def packing(self) -> bool:
        return "Packing" in self.label

    @property
    def shuffles_types(self) -> bool:
        return "Perf" not in self.label and "Packing" not in self.label

    @property
    def fifo(self) -> bool:
        return self.label.startswith("FIFO")


def _stateless(fn, packed=False, **kw):
    return lambda seed: _Stateless(fn, packed, seed, **kw)


def _warm(fn, packed=False):
    return lambda seed: _Stateless(fn, packed, seed, warm=True)


_SPECS: tuple[tuple[str, str, Callable[[int], Callable], str], ...] = (
    ("fifo", "FIFO", lambda s: _Fifo("base", s), "arrival order; a job keeps its GPU type (type-agnostic)"),
    ("fifo_perf", "FIFO_Perf", lambda s: _Fifo("perf", s), "arrival order on the fastest free type"),
    ("fifo_packed", "FIFO_Packing", lambda s: _Fifo("packed", s), "FIFO_Perf, then queued jobs share GPUs"),
    ("max_min_fairness", "MaxMinFairness", _warm("max_min_fairness"), "LAS (type-agnostic)"),
    ("max_min_fairness_perf", "MaxMinFairness_Perf", _warm("max_min_fairness_perf"), "Gavel-LAS"),
    ("max_min_fairness_packed", "MaxMinFairness_Packing", _warm("max_min_fairness_packed", packed=True),
     "Gavel-LAS with space sharing"),
    ("max_min_fairness_water_filling", "MaxMinFairnessWaterFilling",
     _stateless("max_min_fairness_water_filling"), "hierarchical max-min (type-agnostic)"),
    ("max_min_fairness_water_filling_perf", "MaxMinFairnessWaterFilling_Perf",
     _stateless("max_min_fairness_water_filling_perf"), "hierarchical max-min"),
    ("max_min_fairness_water_filling_packed", "MaxMinFairnessWaterFilling_Packing",
     _stateless("max_min_fairness_water_filling_packed", packed=True), "hierarchical max-min with space sharing"),
    ("finish_time_fairness", "FinishTimeFairness", lambda s: _FinishTime(False, s), "Themis (type-agnostic)"),
    ("finish_time_fairness_perf", "FinishTimeFairness_Perf", lambda s: _FinishTime(True, s), "Gavel-FTF"),
    ("gandiva", "Gandiva_Packing", lambda s: _Gandiva(s), "time slicing, random pairs when oversubscribed"),
    ("isolated", "Isolated", _stateless("isolated"), "an equal 1/n share of every type"),
    ("min_total_duration", "MinTotalDuration", _stateless("min_total_duration"), "makespan (type-agnostic)"),
    ("min_total_duration_perf", "MinTotalDuration_Perf", _stateless("min_total_duration_perf"), "makespan"),
    ("max_sum_throughput_perf", "ThroughputSumWithPerf", _stateless("max_sum_throughput_perf"),
     "total steps/s"),
    ("allox", "AlloX_Perf", lambda s: _AlloX(s), "AlloX: min-cost matching (1-GPU jobs)"),
)

GAVEL_POLICIES: dict[str, GavelPolicy] = {
    "gavel-" + g.replace("_", "-"): GavelPolicy("gavel-" + g.replace("_", "-"), g, label, make, summary)
    for g, label, make, summary in _SPECS
}


def gavel_policy(name: str) -> GavelPolicy | None:
    return GAVEL_POLICIES.get(name)


__all__ = ["GAVEL_POLICIES", "Allocation", "Combo", "GavelPolicy", "gavel_policy"]
