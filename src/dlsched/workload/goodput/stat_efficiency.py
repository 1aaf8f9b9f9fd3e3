"""Statistical efficiency from the gradient noise scale (Pollux section 3.1).

Source: petuum/adaptdl branch osdi21-artifact, `simulator/goodput.py`
(`GoodputFunction.efficiency`) and `simulator/simulator.py` (`Job.step`); the code is ours.

Pollux measures, while a job trains, the squared norm of the true gradient and the trace of the
per-sample gradient covariance at the initial batch size M0:

    grad_sqr = |E[g]|^2        grad_var = tr(Var[g])   (both estimated at batch M0)

(the bundled profiles hold them per epoch and batch size, `validation-<bsz>.csv`). The
gradient noise scale is phi = M0 * grad_var / grad_sqr (PGNS). Training with batch M = r * M0
instead of M0 makes one step worth

    gain(M) = (grad_var + grad_sqr) / (grad_var / r + grad_sqr)     (1 <= gain <= r)

steps at M0, so each sample at M is worth

    E(M) = gain(M) / r = (phi + M0) / (phi + M)                     (E(M0) = 1, E <= 1)

samples at M0: the statistical efficiency. Goodput = throughput x E(M): progress per second in
samples of the initial batch. Pollux's convention when the denominator is not positive (no
gradient signal at all): gain = 1, E = 1 / r. When the noise dominates (grad_sqr -> 0) E -> 1:
a larger batch loses nothing; with no noise (grad_var = 0) E = M0 / M: only the step count counts.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dlsched.workload.efficiency import grad_stats


class GradParams(NamedTuple):
    """Gradient statistics at the initial batch size (Pollux's `GradParams`)."""

    sqr: float   # |E g|^2
    var: float   # tr Var g


def gain(grad: GradParams, batch_size, init_batch_size: float) -> np.ndarray:
    """Progress of one step at `batch_size`, in steps at `init_batch_size`."""
    r = np.asarray(batch_size, dtype=np.float64) / float(init_batch_size)
    denom = grad.var / r + grad.sqr
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denom > 0, (grad.var + grad.sqr) / denom, 1.0)


def efficiency(grad: GradParams, batch_size, init_batch_size: float) -> np.ndarray:
    """E(M) = gain(M) / (M / M0): progress per sample relative to training at M0."""
    r = np.asarray(batch_size, dtype=np.float64) / float(init_batch_size)
    return gain(grad, batch_size, init_batch_size) / r


def noise_scale(grad: GradParams, init_batch_size: float) -> float:
    """phi = M0 * grad_var / grad_sqr (inf when grad_sqr is 0)."""
    if grad.sqr <= 0:
        return float("inf")
    return float(init_batch_size) * grad.var / grad.sqr


def app_grad_params(app: str, batch_size: float, epoch: int) -> GradParams:
    """The gradient statistics a Pollux job of `app` reports at `batch_size` during `epoch`
    (bundled profiles, linear between the profiled batch sizes, as Pollux's
    `Application.get_grad_stats`). Pollux's simulated jobs hand exactly these to their
    goodput model each step (`Job.update_params`)."""
    sqr, var = grad_stats(app, batch_size, epoch)
    return GradParams(float(sqr), float(var))
