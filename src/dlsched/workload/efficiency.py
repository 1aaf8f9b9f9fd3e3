"""Statistical efficiency: how much training progress one iteration at a large batch is worth.

Source: Pollux (Qiao et al., OSDI'21), section 3.1, and its simulator (petuum/adaptdl,
simulator/simulator.py `Job.step`, simulator/applications.py). With the gradient noise scale
measured during training (grad_sqr = |E g|^2, grad_var = tr Var g, per epoch, in the
applications' validation-<bsz>.csv profiles), one iteration at batch B makes

    gain(B, epoch) = (grad_var + grad_sqr) / (grad_var / s + grad_sqr),   s = B / B0

iterations' worth of progress at the application's initial batch size B0 (1 <= gain <= s: a
larger batch never helps more than proportionally). Pollux's `progress` column counts that
progress, and a job is complete once progress reaches progress(max_epochs) (the minimum over
the profiled batch sizes of the progress after max_epochs epochs). Grad stats for a batch between
two profiled ones are interpolated linearly, as Pollux does.

So a job of `app` with a fixed trained batch B needs

    iterations(B) = sum over epochs e < max_epochs of (P(e+1) - P(e)) / gain(B, e)

iterations of batch B, where P(e) is the progress at the end of epoch e. For B = B0 that is
P(max_epochs) (samples / B0); for larger batches it is more than samples / B: the samples a
job must process grow with its batch, which is what makes Pollux's jobs with big batches long.
The batch Pollux's jobs actually train with is the target rounded up to whole per-GPU batches
(`measured.trained_batch`), so the iteration count depends on the replica count too.
"""
from __future__ import annotations

import csv
import functools

import numpy as np

from dlsched.core.errors import DlschedError
from dlsched.workload.pollux_data import POLLUX_MAX_EPOCHS, pollux_data_dir


@functools.lru_cache(maxsize=None)
def _validation(app: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(profiled batch sizes, P(e) for e = 0..E, grad_sqr and grad_var per (batch, epoch))."""
    folder = pollux_data_dir() / "app-profiles" / app
    files = sorted(folder.glob("validation-*.csv"), key=lambda f: int(f.stem.split("-")[1]))
    if not files:
        raise DlschedError(f"{folder}: no validation-*.csv profiles (bundled data missing?)")
    rows = []
    for f in files:
        with f.open(newline="") as fh:
            rows.append([{k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)])
    n = min(len(r) for r in rows)
    sizes = np.array([int(f.stem.split("-")[1]) for f in files], dtype=np.float64)
    progress = np.concatenate([[0.0], np.min([[r[e]["progress"] for e in range(n)] for r in rows], axis=0)])
    sqr = np.array([[r[e]["grad_sqr"] for e in range(n)] for r in rows])
    var = np.array([[r[e]["grad_var"] for e in range(n)] for r in rows])
    return sizes, progress, sqr, var


def _check(app: str) -> str:
    name = str(app).lower()
    if name not in POLLUX_MAX_EPOCHS:
        raise DlschedError(f"unknown Pollux application {app!r} (known: {', '.join(POLLUX_MAX_EPOCHS)})")
    return name


def progress_after(app: str, epoch: int) -> float:
    """P(epoch): Pollux's progress (iterations at the initial batch) after `epoch` epochs."""
    name = _check(app)
    return float(_validation(name)[1][max(int(epoch), 0)])


def _stats(app: str, batch: float) -> tuple[np.ndarray, np.ndarray]:
    """grad_sqr and grad_var per epoch at `batch`, linear between the profiled batch sizes."""
    sizes, _, sqr, var = _validation(app)
    b = min(max(float(batch), sizes[0]), sizes[-1])   # Pollux asserts the batch is in range
    hi = int(np.searchsorted(sizes, b, side="left"))
    if sizes[hi] == b:
        return sqr[hi], var[hi]
    lo = hi - 1
    a = (b - sizes[lo]) / (sizes[hi] - sizes[lo])
    return (1 - a) * sqr[lo] + a * sqr[hi], (1 - a) * var[lo] + a * var[hi]


def grad_stats(app: str, batch: float, epoch: int) -> tuple[float, float]:
    """(grad_sqr, grad_var) of `app` during `epoch` at global batch `batch` (linear between the
    profiled batch sizes, clamped into their range)."""
    name = _check(app)
    sqr, var = _stats(name, batch)
    return float(sqr[epoch]), float(var[epoch])


def _gains(app: str, batch: float) -> np.ndarray:
    sizes = _validation(app)[0]
    scale = float(batch) / sizes[0]
    sqr, var = _stats(app, batch)
    return (var + sqr) / (var / scale + sqr)


def gain(app: str, batch: float, epoch: int) -> float:
    """Progress (in initial-batch iterations) one iteration of `batch` makes during `epoch`."""
    return float(_gains(_check(app), batch)[epoch])


@functools.lru_cache(maxsize=4096)
def iterations_to_target(app: str, batch: int) -> float:
    """Iterations of `batch` (the trained global batch) a job of `app` needs to finish Pollux's
    training (max_epochs epochs' worth of progress), statistical efficiency included."""
    name = _check(app)
    E = POLLUX_MAX_EPOCHS[name]
    progress = _validation(name)[1]
    return float(np.sum(np.diff(progress[:E + 1]) / _gains(name, batch)[:E]))
