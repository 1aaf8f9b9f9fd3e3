"""Labels for Liquid's estimator: the requirement vector a job needs, by the law of diminishing
marginal utility (seed 003: "beyond that amount, the job execution time is similar, but the
extra allocated resource is wasted").

The requirement vector is <N x GPU, GMem, Bandwidth>: the job's GPUs, the GPU memory it needs on
each of them (GB) and the NIC bandwidth each worker needs (Gbps).

The rule (`smallest_sufficient`): among the allocations tried, the smallest whose execution time
is within `tol` (default 5 %) of the best one's:

    label = min { a : T_e(a) <= (1 + tol) * min_a' T_e(a') }

Execution time (seed 003's T_e = T_l + N x (T_t + T_sy) + T_sa) comes from dlsched's speed model
(`dlsched.workload.speed`: Pollux's measured step times for its applications on T4, the analytic
compute + communication model otherwise), for the job alone on a reference cluster, its workers
packed on the fewest nodes (the placement Liquid's best fit aims at) and its parameter servers
spread round-robin over the workers' nodes:

    T_e(N) = LAUNCH_SAVE_S + iterations x iteration time(N workers of one GPU each)

LAUNCH_SAVE_S (T_l + T_sa, 30 s: the simulator's restart delay) does not depend on N but makes the
tolerance relative to the whole run: a short job gains little from more GPUs.

- N x GPU: the rule over N = 1 .. MAX_GPUS (global batch and iterations fixed: more workers mean a
  smaller per-GPU batch and more synchronisation).
- Bandwidth: at that N, the rule over the per-worker rates of BANDWIDTH_GRID_GBPS up to a NIC's
  share per worker on the job's fullest node (so that the reservation fits beside the job's other
  workers there, and never spreads it further), each link of the job capped at the rate times the
  job's workers behind it (a node's NIC: its workers; a rack uplink: the rack's workers),
  iteration times by the analytic model (Pollux's measurements fix the network they were taken
  on, so only the analytic model has bandwidth as an input). A job whose workers share one node
  needs none.
- GMem: not a time trade-off: a job runs or it does not. The memory model below at that N,
  capped at the reference GPU's memory (past it the job accumulates gradients).

GPU memory model (per GPU, GB): weights, gradients and optimizer state (3 x parameter bytes, the
checkpoint size of dlsched.workload.packing) plus activations proportional to the per-GPU batch,
scaled so that the zoo's footprint at the model's default batch (packing.gpu_mem_gb) holds:

    GMem(b) = S + (P - S) * b / default_batch,   S = 3 x param bytes, P = footprint, b = per-GPU batch

A model outside the zoo gets its footprint P.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

TOLERANCE = 0.05
MAX_GPUS = 16
LAUNCH_SAVE_S = 30.0
BANDWIDTH_GRID_GBPS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.5, 25.0, 40.0, 50.0, 100.0)
REFERENCE_CLUSTER = "liquid-20"
TARGETS = ("gpus", "gpu_mem_gb", "bw_gbps")


def smallest_sufficient(amounts: Sequence[float], times: Sequence[float], tol: float = TOLERANCE) -> float:
    """The smallest amount whose time is within `tol` of the best time (the labelling rule)."""
    if len(amounts) == 0 or len(amounts) != len(times):
        raise ValueError("need as many times as amounts, at least one")
    if not tol >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tol!r}")
    t = np.asarray(times, dtype=np.float64)
    ok = t <= (1.0 + tol) * t.min()
    return float(np.min(np.asarray(amounts, dtype=np.float64)[ok]))


def gpu_mem_need_gb(model: str | None, local_batch: float) -> float:
    """GPU memory (GB) one worker of `model` needs at a per-GPU batch (module docstring)."""
    from dlsched.workload.models import get_model
    from dlsched.workload.packing import checkpoint_bytes, gpu_mem_gb
    peak = gpu_mem_gb(model)
    m = get_model(model)
    if m is None:
        return peak
    static = min(checkpoint_bytes(model) / 1e9, peak)
    return static + (peak - static) * float(local_batch) / m.default_batch


@dataclass(frozen=True)
class JobParams:
    """What the estimator knows of a job: its type and key parameters (Liquid's features)."""
    model: str
    comm: str                # "ps" or "allreduce"
    batch_size: int
    iterations: float
    num_ps: int
    num_workers: int         # as requested


class Oracle:
    """Execution times and labels of jobs on one reference cluster (module docstring)."""

    def __init__(self, cluster=REFERENCE_CLUSTER, tol: float = TOLERANCE, max_gpus: int = MAX_GPUS):
        from dlsched.cluster.topology import load_cluster
        from dlsched.core.types import GPU
        from dlsched.workload.speed import SpeedModel, SpeedParams
        self.cluster = load_cluster(cluster)
        if self.cluster.max_gpus_per_node < 1:
            raise ValueError(f"reference cluster {self.cluster.name} has no GPUs")
        if not 0 <= tol <= 1:
            raise ValueError(f"tolerance must be in [0, 1], got {tol!r}")
        self.tol = float(tol)
        # N is tried up to max_gpus, within what the cluster's workers can be packed on
        self.max_gpus = int(min(max_gpus, self.cluster.capacity[:, GPU].sum()))
        self.speed = SpeedModel(self.cluster)
        self.analytic = SpeedModel(self.cluster, SpeedParams(measured=False))
        first = self.cluster.nodes[0]
        self.gpu_mem_gb = float(first.gpu_mem_gb)
        self.nic_gbps = float(first.nic_gbps)

    def _job(self, p: JobParams, workers: int):
        from dlsched.workload.schema import job_from_row
        return job_from_row({"job_id": "j", "submit_time_s": 0.0, "workers": workers, "ps": p.num_ps,
                             "model": p.model, "comm": p.comm, "batch_size": p.batch_size,
                             "iterations": p.iterations})

    def _placement(self, job):
        """Workers packed on the fewest nodes (node-id order), PS round-robin over those nodes."""
        from dlsched.core.types import Role, TaskPlacement
        per = self.cluster.max_gpus_per_node
        workers = [t for t in job.tasks if t.role is Role.WORKER]
        nodes = -(-len(workers) // per)
        if nodes > self.cluster.num_nodes:
            raise ValueError(f"{len(workers)} workers do not fit the reference cluster {self.cluster.name}")
        pl = [TaskPlacement(t.index, i // per, (i % per,)) for i, t in enumerate(workers)]
        pl += [TaskPlacement(t.index, i % nodes, ()) for i, t in
               enumerate(t for t in job.tasks if t.role is Role.PS)]
        return tuple(pl)

    def exec_time_s(self, p: JobParams, gpus: int) -> float:
        """T_e of the job on `gpus` one-GPU workers, alone on the reference cluster."""
        job = self._job(p, gpus)
        return LAUNCH_SAVE_S + p.iterations * self.speed.isolated_iter_time(job, self._placement(job))

    def bandwidth_gbps(self, p: JobParams, gpus: int) -> float:
        """The per-worker NIC rate the job needs on `gpus` workers (module docstring)."""
        from dlsched.workload.speed import GBPS
        job = self._job(p, gpus)
        pl = self._placement(job)
        prof = self.analytic.profile(job, pl)
        if prof is None or not prof.link_bytes:
            return 0.0
        behind = {}                      # link -> this job's workers behind it
        n = self.cluster.num_nodes
        for tp in pl:
            if tp.gpu_ids:
                behind[tp.node] = behind.get(tp.node, 0) + 1
                rack = n + int(self.cluster.node_rack[tp.node])
                behind[rack] = behind.get(rack, 0) + 1
        cap = self.analytic.link_capacity
        full = self.nic_gbps / max(behind.get(tp.node, 0) for tp in pl)   # a NIC's share per worker
        rates = [b for b in BANDWIDTH_GRID_GBPS if b < full] + [full]
        times = [prof.iter_time({link: min(float(cap[link]), r * GBPS * max(behind.get(link, 1), 1))
                                 for link in prof.link_bytes}) for r in rates]
        return smallest_sufficient(rates, times, self.tol)

    def label(self, p: JobParams) -> tuple[float, float, float]:
        """<GPUs, GPU memory per GPU (GB), bandwidth per worker (Gbps)> the job needs."""
        sizes = list(range(1, self.max_gpus + 1))
        n = int(smallest_sufficient(sizes, [self.exec_time_s(p, g) for g in sizes], self.tol))
        mem = min(gpu_mem_need_gb(p.model, math.ceil(p.batch_size / n)), self.gpu_mem_gb)
        return float(n), float(mem), self.bandwidth_gbps(p, n)
