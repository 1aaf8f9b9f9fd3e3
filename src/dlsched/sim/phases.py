"""A DL job's three phases in the simulator, and Liquid's pre-scheduling of the next job.

Seed 003 (Liquid) writes a job's execution time as

    T_e = T_l + N x (T_t + T_sy) + T_sa

launch (data and model transfer), N iterations (training and synchronisation: the speed model,
dlsched.workload.speed) and saving. The job holds its GPUs in all three phases.

Launch (first start only; a restart is charged the backend's restart delay as before):
    T_l = launch_s                                           when the job gives it, else
    T_l = (data_gb x 1e9 + model bytes) / (nic x GBPS)       when it gives data_gb,
          nic = the slowest NIC of the nodes its tasks are on (each worker reads its data and
          the model over its own NIC at the same time), model bytes = the zoo's parameter bytes
          (0 for a job without a known model), else
    T_l = 0.
  The backend's run-wide start_delay_s is added to it. A job's fields default to no launch and
  no saving phase, so every workload without them runs exactly as before.

Saving: save_s seconds after the last iteration (writing the model out); the job finishes at
its end.

Pre-scheduling (SimBackend(prescheduling=True), or a profile that needs the `prescheduling`
capability): when a job enters its saving phase its resources go back to the cluster's ledger,
and the scheduler is woken, so the next job may be placed on its GPUs at once and run its launch
phase while the first job saves. The GPUs themselves stay busy until the saving ends, so the
new job's first iteration starts at

    max(now + T_l, end of every saving on its GPUs)          (first_start_hold_s)

instead of (end of the saving) + T_l. A job placed on GPUs that nobody saves on is unaffected.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from dlsched.core.types import JobSpec, TaskPlacement
from dlsched.workload.models import get_model
from dlsched.workload.packing import GBPS


def launch_s(spec: JobSpec, placements: Iterable[TaskPlacement], nodes: Sequence) -> float:
    """T_l of `spec` placed on `placements` (`nodes`: the cluster's NodeSpecs by id)."""
    if spec.launch_s is not None:
        return float(spec.launch_s)
    if spec.data_gb is None:
        return 0.0
    model = get_model(spec.model)
    size = spec.data_gb * 1e9 + (model.param_bytes if model is not None else 0.0)
    nic = min((nodes[tp.node].nic_gbps for tp in placements), default=None)
    return 0.0 if nic is None or size <= 0 else size / (nic * GBPS)


def first_start_hold_s(now: float, launch: float, busy_until: Iterable[float]) -> float:
    """Seconds a job started at `now` holds its GPUs before its first iteration: its launch,
    overlapped with the savings still running on its GPUs (module docstring)."""
    return max(launch, max(busy_until, default=now) - now)
