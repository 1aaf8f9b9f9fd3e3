"""The bundled Pollux profiles as the goodput model reads them: fit samples and batch limits.

Both come from `dlsched.workload.measured.app_profile`, which reads each application's
`placements.csv` once (`dlsched/data/pollux/app-profiles/<app>/`, see its README.md):

- **Samples** (`placement_samples`): one per placements.csv row, with num_nodes = the digits of
  the placement id (`1111` is 4 nodes of 1 GPU), num_replicas = their sum, the atomic (per-GPU)
  batch, `step_time` (a synchronising step, T_sync) and `step_time - sync_time` (its compute
  part, T_grad), as Pollux's simulated jobs feed `fit_perf_params` (simulator/simulator.py,
  `Job.update_params`).
- **Limits** (`app_limits`), as Pollux's `Application` (simulator/applications.py) sets them:
  initial and largest batch = the smallest and largest batch with a `validation-<bsz>.csv`;
  local batch range = the smallest and largest `local_bsz` in placements.csv (yolov3: at most 8).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.workload.measured import app_profile


@dataclass(frozen=True)
class AppLimits:
    """An application's batch-size limits (samples)."""

    init_batch_size: int   # M0: the batch the job starts with; efficiency is relative to it
    max_batch_size: int    # the largest global batch Pollux may choose
    min_local_bsz: int     # smallest atomic (per-GPU) batch
    max_local_bsz: int     # largest atomic batch (GPU memory); more samples accumulate

    def __post_init__(self):
        if not 1 <= self.min_local_bsz <= self.max_local_bsz:
            raise ValueError(f"local batch range [{self.min_local_bsz}, {self.max_local_bsz}] is empty")
        if not 1 <= self.init_batch_size <= self.max_batch_size:
            raise ValueError(f"init_batch_size {self.init_batch_size} > max_batch_size {self.max_batch_size}")


@dataclass(frozen=True)
class Samples:
    """Observed steps: parallel arrays, one entry per observation."""

    nodes: np.ndarray        # K
    replicas: np.ndarray     # N
    atomic_bsz: np.ndarray   # m
    compute_s: np.ndarray    # T_grad = step_time - sync_time
    step_s: np.ndarray       # T_sync = step_time (one synchronising step)

    def __len__(self) -> int:
        return int(self.nodes.size)


def app_limits(app: str) -> AppLimits:
    """The batch-size limits of a bundled Pollux application."""
    p = app_profile(app)
    return AppLimits(int(p.init_batch_size), int(p.max_batch_size),
                     int(p.min_local_bsz), int(p.max_local_bsz))


def placement_samples(app: str) -> Samples:
    """Every row of an application's placements.csv as fit samples (placements in sorted
    order, local batch ascending within each)."""
    rows = app_profile(app).rows
    nodes, reps, bsz, comp, step = [], [], [], [], []
    for key in sorted(rows):
        b, st, sy = rows[key]
        nodes.append(np.full(b.size, len(key)))
        reps.append(np.full(b.size, sum(key)))
        bsz.append(b)
        comp.append(st - sy)
        step.append(st)
    cat = np.concatenate
    return Samples(cat(nodes), cat(reps), cat(bsz), cat(comp), cat(step))
