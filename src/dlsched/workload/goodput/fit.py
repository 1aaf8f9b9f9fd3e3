"""Fitting the 7 throughput parameters of one job from its observed steps.

Source: petuum/adaptdl branch osdi21-artifact, `simulator/goodput.py` (`fit_perf_params`,
`_obj_fn`); the code is ours. Pollux minimises, by bounded L-BFGS-B (scipy.optimize.minimize
with `Bounds`), the sum of two root-mean-square errors of log times plus two regularisers:

    J = RMSE(log T_grad_pred, log T_grad_obs)          compute part of a step
      + RMSE(log T_sync_pred, log T_sync_obs)          a whole synchronising step
      + 1e-3 * (gamma - 1)^2                           prefer little overlap (easier to fit)
      + 1e-2 * ((beta_n / alpha_n)^2 + (beta_r / alpha_r)^2)   prefer optimistic scaling

from the start point alpha = 0.1, beta = 0.01 (all three pairs), gamma = 1.001, with bounds
alpha, beta in [1e-8, inf) and gamma in [1, 10]. Parameters the observations cannot identify
are pinned at their lower bound (or a value) before the fit, Pollux's priors:

- one atomic batch size only: alpha_c = mean(T_grad) / 2 (half the compute is per-step);
- no multi-node observation: alpha_n = beta_n = 1e-8 during the fit;
- no single-node multi-replica observation: alpha_r = beta_r = 1e-8;
- no observation with more than 2 replicas: beta_n = beta_r = 1e-8;

and after the fit, without multi-node observations, the inter-node terms are raised to at least
1.1 x the intra-node ones (alpha_n >= 1.1 alpha_r, beta_n >= 1.1 beta_r): crossing nodes is
assumed slower than staying in one.

Pollux differentiates J with autograd; here the gradient is written out (the chain rule through
T_sync = (T_grad^g + T_net^g)^(1/g), checked against finite differences in the tests), so the
fit needs only numpy and scipy.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, minimize

from dlsched.workload.goodput.data import Samples
from dlsched.workload.goodput.throughput import (
    TINY, PerfParams, _network_masks, compute_time, log_sync_time, network_time,
)

# Pollux's start point, bounds and regulariser weights (`fit_perf_params`, `_obj_fn`).
START = (1e-1, 1e-2, 1e-1, 1e-2, 1e-1, 1e-2, 1.0 + 1e-3)
GAMMA_MAX = 10.0
REG_GAMMA = 1e-3
REG_RETRO = 1e-2
PRIOR_INTER_OVER_INTRA = 1.1


@dataclass(frozen=True)
class FitResult:
    """A fitted model and how the fit went."""

    params: PerfParams
    objective: float     # J at the optimum (before the post-fit prior)
    success: bool        # scipy's convergence flag
    iterations: int
    seconds: float       # wall time of the fit


def objective(theta: np.ndarray, s: Samples) -> tuple[float, np.ndarray]:
    """J(theta) and its gradient (7,) for the samples `s` (see the module docstring)."""
    p = PerfParams(*theta)
    m = np.asarray(s.atomic_bsz, dtype=np.float64)
    t_grad = compute_time(p, m)
    t_net = network_time(p, s.nodes, s.replicas)
    log_sync = log_sync_time(p, t_grad, t_net)
    g = p.gamma
    lg, ln = np.log(t_grad), np.log(t_net)
    # Shares of T_sync^gamma: w_c = T_grad^g / (T_grad^g + T_net^g), w_n = 1 - w_c.
    w_c = np.exp(g * lg - g * log_sync)
    w_n = np.exp(g * ln - g * log_sync)
    r1 = lg - np.log(s.compute_s)
    r2 = log_sync - np.log(s.step_s)
    e1 = float(np.sqrt(np.mean(r1 ** 2)))
    e2 = float(np.sqrt(np.mean(r2 ** 2)))
    value = (e1 + e2 + REG_GAMMA * (g - 1.0) ** 2
             + REG_RETRO * ((p.beta_n / p.alpha_n) ** 2 + (p.beta_r / p.alpha_r) ** 2))

    # d RMSE(r) / d theta = mean(r * d r / d theta) / RMSE(r)
    k1 = r1 / (max(e1, 1e-300) * r1.size)
    k2 = r2 / (max(e2, 1e-300) * r2.size)
    inter, intra, extra = _network_masks(s.nodes, s.replicas)
    d_lsync_dc = w_c / t_grad               # d log T_sync / d T_grad
    d_lsync_dn = w_n / t_net                # d log T_sync / d T_net
    grad = np.zeros(7)
    # alpha_c, beta_c move T_grad: both errors.
    grad[0] = np.sum(k1 / t_grad) + np.sum(k2 * d_lsync_dc)
    grad[1] = np.sum(k1 * m / t_grad) + np.sum(k2 * d_lsync_dc * m)
    # alpha_n, beta_n (inter-node rows) and alpha_r, beta_r (intra-node rows) move T_net.
    grad[2] = np.sum(k2 * d_lsync_dn * inter)
    grad[3] = np.sum(k2 * d_lsync_dn * inter * extra)
    grad[4] = np.sum(k2 * d_lsync_dn * intra)
    grad[5] = np.sum(k2 * d_lsync_dn * intra * extra)
    # gamma: d/dg [log(T_grad^g + T_net^g) / g] = (w_c log T_grad + w_n log T_net - log T_sync) / g
    grad[6] = np.sum(k2 * (w_c * lg + w_n * ln - log_sync) / g) + 2 * REG_GAMMA * (g - 1.0)
    grad[2] += -2 * REG_RETRO * p.beta_n ** 2 / p.alpha_n ** 3
    grad[3] += 2 * REG_RETRO * p.beta_n / p.alpha_n ** 2
    grad[4] += -2 * REG_RETRO * p.beta_r ** 2 / p.alpha_r ** 3
    grad[5] += 2 * REG_RETRO * p.beta_r / p.alpha_r ** 2
    return value, grad


def start_and_bounds(s: Samples) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pollux's start point and bounds, with the unidentifiable parameters pinned."""
    x0 = np.array(START, dtype=np.float64)
    lo = np.array([TINY] * 6 + [1.0])
    hi = np.array([np.inf] * 6 + [GAMMA_MAX])

    def pin(i: int, value: float) -> None:
        x0[i] = lo[i] = hi[i] = value

    nodes, reps = np.asarray(s.nodes), np.asarray(s.replicas)
    if np.unique(s.atomic_bsz).size == 1:
        pin(0, float(np.mean(s.compute_s)) / 2)
    if not np.any(nodes > 1):
        pin(2, TINY)
        pin(3, TINY)
    if not np.any((nodes == 1) & (reps > 1)):
        pin(4, TINY)
        pin(5, TINY)
    if not np.any(reps > 2):
        pin(3, TINY)
        pin(5, TINY)
    return x0, lo, hi


def fit_perf_params(samples: Samples) -> FitResult:
    """Fit the throughput model to observed steps (Pollux's `fit_perf_params`)."""
    if len(samples) == 0:
        raise ValueError("fit_perf_params needs at least one observed step")
    if np.any(np.asarray(samples.compute_s) <= 0) or np.any(np.asarray(samples.step_s) <= 0):
        raise ValueError("observed compute and step times must be positive (the fit is on log times)")
    t0 = time.perf_counter()
    x0, lo, hi = start_and_bounds(samples)
    res = minimize(objective, x0, args=(samples,), jac=True, method="L-BFGS-B",
                   bounds=Bounds(lo, hi, keep_feasible=True))
    x = np.clip(res.x, lo, hi)
    if not np.any(np.asarray(samples.nodes) > 1):
        x[2] = max(x[2], x[4] * PRIOR_INTER_OVER_INTRA)
        x[3] = max(x[3], x[5] * PRIOR_INTER_OVER_INTRA)
    return FitResult(PerfParams(*(float(v) for v in x)), float(res.fun), bool(res.success),
                     int(res.nit), time.perf_counter() - t0)


def fit_observations(nodes, replicas, atomic_bsz, step_time_s, sync_time_s) -> FitResult:
    """Fit from raw observations as profiles record them: per step, its total time and the
    all-reduce part (compute = step - sync)."""
    step = np.asarray(step_time_s, dtype=np.float64)
    return fit_perf_params(Samples(np.asarray(nodes), np.asarray(replicas),
                                   np.asarray(atomic_bsz, dtype=np.float64),
                                   step - np.asarray(sync_time_s, dtype=np.float64), step))
