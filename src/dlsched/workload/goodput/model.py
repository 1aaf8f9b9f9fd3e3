"""Goodput = throughput x statistical efficiency, for one job (Pollux's `GoodputFunction`).

Source: petuum/adaptdl branch osdi21-artifact, `simulator/goodput.py`
(`GoodputFunction.evaluate`, `.throughput`, `.efficiency`); the code is ours.

    goodput(K, N, m, s) = throughput(K, N, m, s) * E(N * m * (s + 1))

in samples per second at the initial batch size M0: how fast the job progresses towards its
end, whatever batch it trains with. A job's model combines its fitted `PerfParams` (`fit.py`),
its latest `GradParams` (`stat_efficiency.py`) and its M0. The batch and accumulation search
over this function is `search.py`; the speedup over a base allocation is `speedup.py`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.workload.goodput import stat_efficiency, throughput
from dlsched.workload.goodput.stat_efficiency import GradParams
from dlsched.workload.goodput.throughput import PerfParams


@dataclass(frozen=True)
class GoodputModel:
    """One job's goodput function: vectorised over nodes, replicas, atomic batch and
    accumulation steps (numpy broadcasting)."""

    perf: PerfParams
    grad: GradParams
    init_batch_size: int

    def __post_init__(self):
        if self.init_batch_size < 1:
            raise ValueError(f"init_batch_size must be >= 1, got {self.init_batch_size}")
        object.__setattr__(self, "perf", PerfParams(*self.perf))
        object.__setattr__(self, "grad", GradParams(*self.grad))

    def throughput(self, nodes, replicas, atomic_bsz, accum_steps=0) -> np.ndarray:
        """Samples per second."""
        return throughput.throughput(self.perf, nodes, replicas, atomic_bsz, accum_steps)

    def efficiency(self, batch_size) -> np.ndarray:
        """Statistical efficiency E(M) relative to the initial batch size."""
        return stat_efficiency.efficiency(self.grad, batch_size, self.init_batch_size)

    def goodput(self, nodes, replicas, atomic_bsz, accum_steps=0) -> np.ndarray:
        """Samples per second at the initial batch size's efficiency. Pollux asserts the batch
        is at least M0 (E > 1 below it would reward batches no job trains with); so do we."""
        m = throughput.batch_size(replicas, atomic_bsz, accum_steps)
        if np.any(m < self.init_batch_size):
            raise ValueError(f"batch size below the initial batch size {self.init_batch_size}")
        return self.throughput(nodes, replicas, atomic_bsz, accum_steps) * self.efficiency(m)

    __call__ = goodput
