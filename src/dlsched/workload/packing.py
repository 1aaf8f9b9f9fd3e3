"""Gandiva's per-model data: Table 1 (packing), the packing speed model, and what a suspend,
resume or migration costs.

Source: Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep Learning", OSDI 2018;
seed 001, Table 1 "Packing multiple jobs on P40 (mb/s = minibatches/s)":

    job              GPU util (%)   time slicing (mb/s)   packing max (mb/s)   packing gain (%)
    VAE                   8.7              81.8                 419.3               412
    SuperResolution      14.1              40.3                 145.2               260
    RHN                  61.6              10.1                  14.8                46
    SCRNN                66.8              16.7                  23.3                39
    MI-LSTM              76.2              22.2                  25.9                17
    LSTM                 87.2              63.8                  53.0               -16
    ResNet-50            94.0              10.3                   9.0               -13
    ResNext-50           98.9              83.6                  74.4               -11

Packing model. Time slicing runs one job at a time, so the time-sliced aggregate is one job's
solo rate: G_m = packing max / time slicing is the most that packing jobs of model m raises the
aggregate (VAE 5.13, ResNet-50 0.87). Each model gets a packing cost c_m = 1 / G_m (how much of
the GPU one job takes when packed); jobs packed together on a GPU each run at

    factor = min(1, 1 / sum_j c_j)        (of their solo speed; sum over the jobs on the GPU)

so k jobs of one model give an aggregate min(k, G_m) x solo: two VAEs run at full speed each
(2.0x), six reach Table 1's 5.13x; two ResNet-50s run at 0.435 each (0.87x, the -13 %). A job
never runs faster than alone. Models outside Table 1 take c = u / CONTENTION from the zoo's
solo GPU utilisation u (models.py) and the speed model's CONTENTION (0.9); unknown models c = 1.
The experiment `seed001-gandiva` simulates the Table 1 pairs (and full packs) with this model
and the time-slicing costs below and compares the gains with the published ones.

Switch costs (SwitchCost): a time-slice suspend waits for the end of the current mini-batch,
then copies the job's GPU memory to host memory (checkpoint bytes / host bandwidth) plus a fixed
overhead; a resume copies it back (same cost); a migration moves the checkpoint between servers
over the NIC and restarts the process. Checkpoint bytes: what GPU memory holds at a mini-batch
boundary, where Gandiva suspends because use is lowest there (seed 001, Figure 5: the cyclic
pattern): the weights, gradients and optimizer state, 3 x the model's parameter bytes
(models.py; PARAM_MB below for the Table 1 models outside the zoo, our assumption). ResNet-50:
3 x 102 MB = 0.3 GB, 0.03 s at 80 Gbps; with fixed_s = 0.5 s a suspend or resume is about half
a second, as Gandiva reports ("tens to hundreds of milliseconds" plus signalling).
Packing's memory check uses the peak footprint instead (gpu_mem_gb).
"""
from __future__ import annotations

from dataclasses import dataclass

from dlsched.workload.models import get_model

GB = 1e9
GBPS = 1e9 / 8.0

#: Table 1 of seed 001 (Gandiva, OSDI 2018): model -> (GPU util %, time slicing mb/s,
#: packing max mb/s, packing gain %). Published figures: the experiment prints them beside ours.
TABLE1: dict[str, tuple[float, float, float, float]] = {
    "vae": (8.7, 81.8, 419.3, 412.0),
    "superresolution": (14.1, 40.3, 145.2, 260.0),
    "rhn": (61.6, 10.1, 14.8, 46.0),
    "scrnn": (66.8, 16.7, 23.3, 39.0),
    "mi-lstm": (76.2, 22.2, 25.9, 17.0),
    "lstm": (87.2, 63.8, 53.0, -16.0),
    "resnet50": (94.0, 10.3, 9.0, -13.0),
    "resnext50": (98.9, 83.6, 74.4, -11.0),
}
#: Display names of the Table 1 rows.
TABLE1_NAMES = {"vae": "VAE", "superresolution": "SuperResolution", "rhn": "RHN", "scrnn": "SCRNN",
                 "mi-lstm": "MI-LSTM", "lstm": "LSTM", "resnet50": "ResNet-50", "resnext50": "ResNext-50"}

#: Peak GPU memory (GB) and parameter size (MB) of the Table 1 models that are not in the zoo:
#: our assumptions (small recurrent language models at their published batch sizes).
#: ResNext-50: Gandiva packed two on one 24 GB P40 (Table 1), so 11 GB at its batch size there
#: (the zoo's 14 GB is at batch 64).
PEAK_MEM_GB = {"rhn": 3.0, "scrnn": 2.0, "mi-lstm": 3.0, "resnext50": 11.0}
PARAM_MB = {"rhn": 96.0, "scrnn": 40.0, "mi-lstm": 80.0}
DEFAULT_GPU_MEM_GB = 4.0      # a model we know nothing about
DEFAULT_PARAM_MB = 100.0
CONTENTION = 0.9              # as dlsched.workload.speed.CONTENTION


def _key(model: str | None) -> str | None:
    return None if model is None else str(model).lower()


def packing_gain(model: str | None) -> float | None:
    """G_m = packing max / time slicing (Table 1), or None outside Table 1."""
    row = TABLE1.get(_key(model) or "")
    return None if row is None else row[2] / row[1]


def gpu_util(model: str | None) -> float:
    """Solo GPU utilisation in [0, 1]: Table 1's, else the zoo's, else 1."""
    k = _key(model)
    if k in TABLE1:
        return TABLE1[k][0] / 100.0
    m = get_model(k)
    return 1.0 if m is None else float(m.gpu_util)


def pack_cost(model: str | None) -> float:
    """c_m: the share of a GPU one packed job of this model takes (1 / G_m)."""
    g = packing_gain(model)
    if g is not None:
        return 1.0 / g
    m = get_model(_key(model))
    return 1.0 if m is None else float(m.gpu_util) / CONTENTION


def packed_factor(models) -> float:
    """Speed (of its solo speed) of each job packed on one GPU with the others in `models`
    (the list includes the job itself): min(1, 1 / sum c); 1 for a job alone."""
    models = list(models)
    if len(models) <= 1:
        return 1.0
    total = sum(pack_cost(m) for m in models)
    return 1.0 if total <= 1.0 else 1.0 / total


def gpu_mem_gb(model: str | None) -> float:
    """Peak GPU memory of one job of the model (packing must fit it)."""
    k = _key(model)
    if k in PEAK_MEM_GB:
        return PEAK_MEM_GB[k]
    m = get_model(k)
    return DEFAULT_GPU_MEM_GB if m is None else float(m.gpu_mem_gb)


def checkpoint_bytes(model: str | None) -> float:
    """Bytes one worker of the job saves at a mini-batch boundary: 3 x its parameter bytes."""
    k = _key(model)
    m = get_model(k)
    mb = PARAM_MB.get(k or "", DEFAULT_PARAM_MB) if m is None else float(m.param_mb)
    return 3.0 * mb * 1e6


@dataclass(frozen=True)
class SwitchCost:
    """What a suspend, resume, migration or resize carried by a decision costs the simulator.

    host_gbps: GPU <-> host memory copy bandwidth (PCIe 3.0 x16 at about 10 GB/s = 80 Gbps).
    fixed_s:   fixed overhead of each suspend and each resume (signal, sync, CUDA context).
    restart_s: extra fixed time when the job's process restarts (migration, resize).
    net_gbps:  bandwidth of a checkpoint moved between servers; None = the slower of the two
               servers' NICs.
    boundary:  a suspend first finishes the current mini-batch (Gandiva suspends at the
               mini-batch boundary, where GPU memory use is lowest)."""
    host_gbps: float = 80.0
    fixed_s: float = 0.5
    restart_s: float = 5.0
    net_gbps: float | None = None
    boundary: bool = True

    def __post_init__(self):
        if self.host_gbps <= 0 or (self.net_gbps is not None and self.net_gbps <= 0):
            raise ValueError("switch cost bandwidths must be > 0")
        if self.fixed_s < 0 or self.restart_s < 0:
            raise ValueError("switch cost times must be >= 0")

    def copy_s(self, model: str | None) -> float:
        """One copy of the job's GPU memory to or from host memory, plus the fixed overhead."""
        return self.fixed_s + checkpoint_bytes(model) / (self.host_gbps * GBPS)

    def transfer_s(self, model: str | None, nic_gbps: float) -> float:
        """Moving the checkpoint to another server."""
        bw = self.net_gbps if self.net_gbps is not None else nic_gbps
        return checkpoint_bytes(model) / (bw * GBPS)
