"""Optimus's online estimators: the speed model fitted to observed speeds, and the convergence
estimate fitted to the observed training loss.

Source: Peng et al., "Optimus: An Efficient Dynamic Resource Scheduler for Deep Learning
Clusters", EuroSys 2018 (seed 001, "Optimus performance modeling"). Called by
dlsched.policies.actions.optimus when its `speed` / `remaining` parameter is "fitted".

Speed (`fitted_iter_time`). Seconds per iteration t = 1 / f with, for w workers, p PS and the
job's global batch size M (each worker computes M / w samples per iteration: synchronous
data-parallel training with a fixed global batch, as the simulator runs it):

    synchronous PS   t(w, p) = th0 * M/w + th1 + th2 * w/p + th3 * w + th4 * p
                     (forward/backward on M/w samples; fixed per-step cost; a PS receives
                     w gradients of size S/p: its NIC / CPU time ~ w/p; per-worker and per-PS
                     overheads)
    asynchronous PS  f(w, p) = w / (th0 + th1 * w/p + th2 * w + th3 * p)   (iterations/s
                     summed over workers; used when a spec says `sync = False`; the simulator's
                     jobs are all synchronous)
    all-reduce       t(w) = th0 * M/w + th1 + th2 * (w - 1)
                     (p = 0; compute, a fixed per-step cost, and a cost per extra worker: the
                     ring's latency steps. The ring's bandwidth term 2 (w-1)/w x model / B is
                     not identifiable beside M/w and the constant - (w-1)/w = 1 - 1/w lies in
                     their span - so it is left out: with th >= 0 the fit is approximate
                     where that term dominates)

th >= 0, fitted by non-negative least squares (scipy.optimize.nnls) to the job's samples
opt._samples[job] = {(w, p): iterations/s observed}: one row per sample, b = 1 / rate (t) for
the synchronous forms, b = w / rate for the asynchronous one. With fewer samples than
unknowns the NNLS solution is one of many that fit (the paper pre-runs a few configurations
for the same reason); the policy trusts such jobs less (early_factor) until min_samples.
Early state (fewer than opt.min_samples distinct samples): the oracle's shape
opt.oracle_iter_time(spec, w, p) (for a model the speed model does not know, as a real program
on the runtime: the prior shape PRIOR_THETA) scaled by the geometric mean of observed / oracle times over
the samples there are (no sample: the oracle). Fits are cached per job in opt._fits and redone
only when the samples change (a tuple of the sample items is the cache key); each fit also
memoises its (w, p) -> t, since the allocation loop asks for the same few points many times.

Remaining iterations (`fitted_remaining`). The first call of a round records the (step, loss)
of every running DL job from the backend's job_stats ("step", "loss": dlsched.workload.loss
gives every iteration-based job a noisy curve) in opt._loss[job] (`collect_losses`), and each
call records its own job's (a step is recorded once); with at least MIN_LOSS_SAMPLES samples,

    loss(k) = 1 / (b0 * k + b1) + b2,   b >= 0,  b2 <= min observed loss

is fitted by least relative squares (`fit_loss`: a 1-D search over the floor b2, and for each
b2 the weighted non-negative least squares of the linearised form 1 / (loss - b2) = b0 k + b1).
The job converges where its excess loss is CONVERGED_FRAC of its excess at step
0 (workload/loss.py's criterion, which the job owner states): K = b1 (1/CONVERGED_FRAC - 1) / b0;
remaining = max(K - step, REMAINING_FLOOR_FRAC x step, 1). Refits happen when the samples grew
by REFIT_GROWTH (10 %, at least one sample) since the last fit (on at most MAX_FIT_SAMPLES = 64
samples evenly spread over those recorded); in between the last K is used.
Before a job has enough samples (a new or a never-run job) its total is the median of the
totals estimated for the other jobs (a population prior; 1000 iterations when no job has an
estimate yet: then every job has the same prior, so its value does not matter).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import nnls

from dlsched.workload.loss import CONVERGED_FRAC

MIN_LOSS_SAMPLES = 5
REFIT_GROWTH = 0.10
REMAINING_FLOOR_FRAC = 0.02
PRIOR_TOTAL_ITERS = 1000.0
MAX_FIT_SAMPLES = 64          # a fit uses at most this many samples, evenly spread (cost)


# -- speed --------------------------------------------------------------------------------------
def _batch(spec) -> float:
    if spec.batch_size:
        return float(spec.batch_size)
    from dlsched.workload.models import get_model
    m = get_model(spec.model)
    return float(m.default_batch if m is not None else 1)


def speed_row(kind: str, M: float, w: int, p: int) -> list[float]:
    """One design-matrix row of the speed model ("sync", "async" or "allreduce")."""
    if kind == "allreduce":
        return [M / w, 1.0, float(w - 1)]
    if kind == "async":
        return [1.0, w / p, float(w), float(p)]
    return [M / w, 1.0, w / p, float(w), float(p)]


def speed_kind(spec) -> str:
    if spec.comm != "ps":
        return "allreduce"
    return "async" if getattr(spec, "sync", True) is False else "sync"


def fit_speed(kind: str, M: float, samples: dict[tuple[int, int], float]) -> np.ndarray:
    """theta >= 0 fitted by NNLS to {(w, p): iterations/s} (see the module docstring)."""
    rows, b = [], []
    for (w, p), rate in sorted(samples.items()):
        if w <= 0 or rate <= 0 or (kind != "allreduce" and p <= 0):
            continue
        rows.append(speed_row(kind, M, w, p))
        b.append(w / rate if kind == "async" else 1.0 / rate)
    if not rows:
        raise ValueError("no usable speed sample")
    A = np.asarray(rows, dtype=float)
    scale = np.maximum(np.abs(A).max(axis=0), 1e-12)   # columns of unit size: better conditioned
    theta, _ = nnls(A / scale, np.asarray(b, dtype=float))
    return theta / scale


# The shape assumed for a job the speed model has no profile of (a real program on the runtime:
# model "mlp"): compute that scales as 1/w (th0 = 1/M), a fixed step cost of 5 % of one worker's
# step, and 1-5 % per worker, PS or w/p. Only its shape matters: the early state scales it to
# the samples, and from min_samples samples on the NNLS fit replaces it.
PRIOR_THETA = {"allreduce": (1.0, 0.05, 0.02), "sync": (1.0, 0.05, 0.05, 0.01, 0.01),
               "async": (1.0, 0.05, 0.01, 0.01)}


def prior_iter_time(spec, w: int, p: int) -> float:
    """Seconds per iteration of the prior shape (PRIOR_THETA; th0 per sample for the synchronous
    forms)."""
    kind = speed_kind(spec)
    M = _batch(spec)
    th = list(PRIOR_THETA[kind])
    if kind != "async":
        th[0] /= M
    return model_iter_time(kind, M, th, w, p)


def model_iter_time(kind: str, M: float, theta, w: int, p: int) -> float:
    """Seconds per iteration the fitted model predicts (inf when it predicts no progress)."""
    if w <= 0 or (kind != "allreduce" and p <= 0):
        return math.inf
    v = float(np.dot(speed_row(kind, M, w, p), theta))
    if kind == "async":
        v /= w                      # f = w / v  ->  t = v / w
    return v if v > 0 else math.inf


def fitted_iter_time(opt, rec, w: int, p: int, cluster) -> float:
    """Seconds per iteration of job `rec` with w workers and p PS (see the module docstring)."""
    if w <= 0:
        return math.inf
    jid = rec.job_id
    samples = opt._samples.get(jid) or {}
    key = tuple(samples.items())
    entry = opt._fits.get(jid)
    if entry is None or entry[0] != key or entry[1] is not cluster:
        spec = rec.spec
        kind = speed_kind(spec)
        M = _batch(spec)
        if len(samples) >= opt.min_samples and all(r > 0 for r in samples.values()):
            entry = (key, cluster, "fit", (kind, M, fit_speed(kind, M, samples)), {})
        else:
            logs = [math.log((1.0 / r) / t) for (sw, sp), r in samples.items()
                    if r > 0 and math.isfinite(t := opt.oracle_iter_time(spec, sw, sp, cluster)) and t > 0]
            scale = math.exp(sum(logs) / len(logs)) if logs else 1.0
            entry = (key, cluster, "scaled", scale, {})
        opt._fits[jid] = entry
    memo = entry[4]
    t = memo.get((w, p))
    if t is None:
        if entry[2] == "fit":
            kind, M, theta = entry[3]
            t = model_iter_time(kind, M, theta, w, p)
        else:
            t = entry[3] * opt.oracle_iter_time(rec.spec, w, p, cluster)
        memo[(w, p)] = t
    return t


# -- convergence --------------------------------------------------------------------------------
def _fit_given_b2(k, y, b2):
    """For each floor in the array b2: (b0, b1, relative SSE) of the weighted least squares with
    b0, b1 >= 0 on the linearised form 1 / (y - b2) = b0 k + b1, in closed form (two unknowns:
    the unconstrained solution, else the better of the two boundary ones). The weights
    (y - b2)^4 / y^2 undo the transform's amplification of relative noise."""
    b2 = np.asarray(b2, dtype=float)[:, None]
    e = y[None, :] - b2
    W = (e * e / y) ** 2
    z = 1.0 / e
    S, Sk, Skk = W.sum(1), (W * k).sum(1), (W * k * k).sum(1)
    Sz, Skz = (W * z).sum(1), (W * k * z).sum(1)
    det = S * Skk - Sk * Sk
    with np.errstate(divide="ignore", invalid="ignore"):
        b0 = np.where(det > 0, (S * Skz - Sk * Sz) / det, -1.0)
        b1 = np.where(det > 0, (Skk * Sz - Sk * Skz) / det, -1.0)
    cands = [(b0, b1)]
    cands.append((np.zeros_like(Sz), Sz / S))                                   # b0 = 0
    cands.append((np.where(Skk > 0, Skz / np.where(Skk > 0, Skk, 1.0), 0.0), np.full_like(Sz, 1e-12)))
    best_sse = np.full(len(S), np.inf)
    out0, out1 = np.zeros(len(S)), np.full(len(S), 1e-12)
    for c0, c1 in cands:
        ok = (c0 >= 0) & (c1 >= 0)
        c1 = np.maximum(c1, 1e-12)
        r = (y[None, :] - 1.0 / (np.maximum(c0, 0.0)[:, None] * k[None, :] + c1[:, None]) - b2) / y[None, :]
        sse = np.where(ok, (r * r).sum(1), np.inf)
        better = sse < best_sse
        out0, out1, best_sse = np.where(better, c0, out0), np.where(better, c1, out1), np.where(better, sse, best_sse)
    return out0, out1, best_sse


def fit_loss(steps, losses) -> tuple[float, float, float]:
    """(b0, b1, b2) >= 0 of loss(k) = 1 / (b0 k + b1) + b2 fitted to the samples by least
    relative squares: the floor b2 by three successively finer grids over [0, min loss), and
    (b0, b1) for each b2 in closed form (`_fit_given_b2`). Vectorised: well under a
    millisecond for hundreds of samples (scipy's curve_fit took 40 ms, too slow for a fit per
    job per round)."""
    k = np.asarray(steps, dtype=float)
    y = np.asarray(losses, dtype=float)
    if np.any(y <= 0):
        raise ValueError("losses must be > 0")
    lo, hi = 0.0, float(y.min()) * (1.0 - 1e-9)
    best = 0.0
    for _ in range(4):
        grid = np.linspace(lo, hi, 21)
        b0, b1, sse = _fit_given_b2(k, y, grid)
        i = int(np.argmin(sse))
        best = float(grid[i])
        step = grid[1] - grid[0]
        lo, hi = max(best - step, 0.0), min(best + step, float(y.min()) * (1.0 - 1e-9))
    b0, b1, _ = _fit_given_b2(k, y, [best])
    return float(b0[0]), float(b1[0]), best


def convergence_step(betas) -> float:
    """Step where the fitted curve meets the convergence criterion (workload/loss.py)."""
    b0, b1, _ = betas
    return b1 * (1.0 / CONVERGED_FRAC - 1.0) / b0 if b0 > 0 else math.inf


def record_loss(opt, job_id: str, stats) -> list:
    """Append the job's (step, loss) now to opt._loss[job_id] (once per distinct step)."""
    samples = opt.__dict__.setdefault("_loss", {}).setdefault(job_id, [])
    if stats is not None and stats.get("loss") is not None and (stats.get("step") or 0.0) > 0:
        step = float(stats["step"])
        if not samples or step > samples[-1][0]:
            samples.append((step, float(stats["loss"])))
    return samples


def collect_losses(opt, ctx) -> None:
    """Once per round (the first call at a new ctx.now): record every running DL job's (step,
    loss), so that a running job the round's allocation never asks about still gets its sample."""
    if ctx is None or ctx.stats is None or opt.__dict__.get("_loss_t") == ctx.now:
        return
    opt._loss_t = ctx.now
    for r in ctx.running:
        if r.spec.kind == "dl":
            record_loss(opt, r.job_id, ctx.stats(r.job_id))


def fitted_remaining(opt, rec, ctx, stats) -> float:
    """Iterations job `rec` still needs, from its loss curve (see the module docstring)."""
    jid = rec.job_id
    collect_losses(opt, ctx)
    samples = record_loss(opt, jid, stats)
    step = float(stats.get("step") or 0.0) if stats else 0.0
    conv = opt._conv
    entry = conv.get(jid)
    n = len(samples)
    if n >= MIN_LOSS_SAMPLES and (entry is None or n >= entry[0] + max(1, int(REFIT_GROWTH * entry[0]))):
        idx = np.unique(np.linspace(0, n - 1, min(n, MAX_FIT_SAMPLES)).round().astype(int))
        ks, ls = zip(*(samples[i] for i in idx))
        betas = fit_loss(ks, ls)
        entry = conv[jid] = (n, betas, convergence_step(betas))
    if entry is not None and math.isfinite(entry[2]):
        total = entry[2]
    else:
        others = [e[2] for j, e in conv.items() if j != jid and math.isfinite(e[2])]
        total = float(np.median(others)) if others else PRIOR_TOTAL_ITERS
    return max(total - step, REMAINING_FLOOR_FRAC * step, 1.0)
