"""Pollux's throughput model: seconds per step of data-parallel SGD with all-reduce.

Source: Pollux (Qiao et al., OSDI'21), section 3.2, as coded in petuum/adaptdl branch
osdi21-artifact, `simulator/goodput.py` (`PerfParams`, `_predict_accum_time`,
`_predict_network_time`, `_predict_log_optim_time`, `GoodputFunction.throughput`). The code
here is ours; the formulas are Pollux's.

A job runs N replicas (GPUs) on K nodes; each replica computes gradients on an atomic batch of
m samples, s extra times without synchronising (gradient accumulation), then once more with the
all-reduce. The global batch is M = N * m * (s + 1). With the 7 parameters

    T_grad(m)   = alpha_c + beta_c * m                                 (forward + backward)
    T_net(K, N) = alpha_n + beta_n * max(N - 2, 0)    if K > 1         (inter-node ring)
                = alpha_r + beta_r * max(N - 2, 0)    if K = 1 < N     (intra-node ring)
                = ~0 (1e-8 s)                         if N = 1
    T_sync      = (T_grad^gamma + T_net^gamma)^(1/gamma)      gamma in [1, 10]
    T_step      = s * T_grad + T_sync
    throughput  = M / T_step    samples per second

gamma is the overlap of compute and communication: gamma = 1 adds them (no overlap), a large
gamma tends to max(T_grad, T_net) (perfect overlap). Like Pollux, "max(N - 2, 0)" is
max(N - 2, 1e-8) and the N = 1 network time is 1e-8 + 1e-16, so every quantity stays positive
and its logarithm finite (the fit works on log times).

`T_sync` is what Pollux's profiles call `step_time` (one synchronising step), and `T_grad` is
`step_time - sync_time` (the compute part of the step): `fit.py` fits both.

Everything here is numpy and vectorised: nodes, replicas, atomic batch and accumulation steps
broadcast against each other.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

# Pollux's stand-in for zero: the network time of a single replica and the retrogression term
# at N <= 2 (`_predict_network_time`), and the lower bound of every fitted alpha / beta.
TINY = 1e-8


class PerfParams(NamedTuple):
    """The 7 parameters of the throughput model (seconds; seconds per sample for beta_c)."""

    alpha_c: float   # constant compute time per micro-step
    beta_c: float    # compute time per sample of the atomic batch
    alpha_n: float   # constant all-reduce time across nodes
    beta_n: float    # extra inter-node all-reduce time per replica beyond 2
    alpha_r: float   # constant all-reduce time within one node
    beta_r: float    # extra intra-node all-reduce time per replica beyond 2
    gamma: float     # compute/communication overlap, 1 (none) .. 10 (~max)


def compute_time(params: PerfParams, atomic_bsz) -> np.ndarray:
    """T_grad: seconds of forward and backward passes on `atomic_bsz` samples per replica."""
    return params.alpha_c + params.beta_c * np.asarray(atomic_bsz, dtype=np.float64)


def _network_masks(nodes, replicas) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inter-node, intra-node, retrogression count): the link that bottlenecks the ring
    all-reduce (nodes > 1 first, then replicas > 1) and max(N - 2, 1e-8)."""
    k = np.asarray(nodes)
    n = np.asarray(replicas, dtype=np.float64)
    inter = k > 1
    intra = ~inter & (n > 1)
    return inter, intra, np.maximum(n - 2.0, TINY)


def network_time(params: PerfParams, nodes, replicas) -> np.ndarray:
    """T_net: seconds of the gradient all-reduce of `replicas` replicas on `nodes` nodes."""
    inter, intra, extra = _network_masks(nodes, replicas)
    alpha = np.where(inter, params.alpha_n, np.where(intra, params.alpha_r, TINY))
    beta = np.where(inter, params.beta_n, np.where(intra, params.beta_r, TINY))
    return alpha + beta * extra


def log_sync_time(params: PerfParams, t_grad, t_net) -> np.ndarray:
    """log T_sync = log(T_grad^gamma + T_net^gamma) / gamma, computed in log space so that
    gamma = 10 with millisecond times cannot underflow."""
    g = params.gamma
    return np.logaddexp(g * np.log(t_grad), g * np.log(t_net)) / g


def step_time(params: PerfParams, nodes, replicas, atomic_bsz, accum_steps=0) -> np.ndarray:
    """T_step: seconds per optimiser step (s accumulation micro-steps, then one synchronising
    step), vectorised over its arguments."""
    t_grad = compute_time(params, atomic_bsz)
    t_net = network_time(params, nodes, replicas)
    s = np.asarray(accum_steps, dtype=np.float64)
    return s * t_grad + np.exp(log_sync_time(params, t_grad, t_net))


def sync_step_time(params: PerfParams, nodes, replicas, atomic_bsz) -> np.ndarray:
    """T_sync: seconds of one synchronising step (what placements.csv calls step_time)."""
    return step_time(params, nodes, replicas, atomic_bsz, 0)


def batch_size(replicas, atomic_bsz, accum_steps=0) -> np.ndarray:
    """M = N * m * (s + 1): samples per optimiser step."""
    return (np.asarray(replicas) * np.asarray(atomic_bsz)
            * (np.asarray(accum_steps) + 1))


def throughput(params: PerfParams, nodes, replicas, atomic_bsz, accum_steps=0) -> np.ndarray:
    """Samples per second: M / T_step."""
    return (batch_size(replicas, atomic_bsz, accum_steps)
            / step_time(params, nodes, replicas, atomic_bsz, accum_steps))
