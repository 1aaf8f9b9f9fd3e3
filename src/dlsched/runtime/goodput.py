"""Goodput fitted from what the runtime measures: an adaptive job's model for the pollux policy.

A job opts in with `max_batch_size` in its spec (the largest global batch a policy may give it;
its `batch_size` is the initial batch M0) and averages its gradients with
`ctx.allreduce_gradients(model)` (dlsched.runtime.sdk). Each step's record then holds, besides
`step_s` (the whole step, measured by `ctx.steps`): `sync_s` (the all-reduce), `local_bsz`,
`replicas`, `nodes` and, with 2 or more replicas, `grad_sqr` and `grad_var` (the gradient
statistics at M0). From the job's stored records:

- throughput: one sample per shape (nodes, replicas, local batch) seen, its median step time
  (T_sync) and median step minus sync time (T_grad, at least 1 % of the step), fitted by
  `dlsched.workload.goodput.fit_perf_params` (Pollux's priors pin what the shapes seen cannot
  identify: one shape fits a single replica's compute only);
- statistical efficiency: the mean grad_sqr and grad_var of the last GRAD_WINDOW records that
  have them (one step's estimates are unbiased but noisy, and grad_sqr may be negative), with
  grad_sqr at least GRAD_FLOOR x grad_var; none yet (a job that ran on 1 replica only): no
  noise (grad_var = 0, E(M) = M0 / M), so the job keeps M0 until its noise is measured, as
  AdaptDL keeps its initial batch until it has a noise estimate (taking E = 1 instead made the
  first restart jump to max_batch_size, whose measured goodput was then below M0's);
- limits: M0 = the spec's batch_size, M_max = its max_batch_size, local batch in [1, M_max]
  (the runtime searches without accumulation: `best_batch(..., accumulation=False)`).

The model is refitted when the job has new records (at most once per `refit_s` per job: a fit
takes milliseconds, a round asks for every adaptive job).
"""
from __future__ import annotations

import json
import statistics
import time

import numpy as np

GRAD_WINDOW = 50
GRAD_FLOOR = 1e-3
MIN_SYNC_SHARE = 0.01


def max_batch_of(spec) -> int | None:
    """The scheduler JobSpec's max_batch_size (a runtime job's, kept in `extra`), or None."""
    if not spec.extra:
        return None
    try:
        v = json.loads(spec.extra).get("max_batch_size")
    except (ValueError, AttributeError):
        return None
    return int(v) if v else None


def samples_of(records: list[dict]):
    """The throughput fit's Samples from step records (one per shape seen), or None."""
    from dlsched.workload.goodput import Samples
    shapes: dict[tuple, list] = {}
    for r in records:
        if r.get("sync_s") is None or r.get("replicas") is None or not r.get("step_s"):
            continue
        key = (int(r["nodes"]), int(r["replicas"]), int(r["local_bsz"]))
        shapes.setdefault(key, []).append((float(r["step_s"]), float(r["sync_s"])))
    if not shapes:
        return None
    keys = sorted(shapes)
    step = np.array([statistics.median(s for s, _ in shapes[k]) for k in keys])
    comp = np.array([statistics.median(max(s - y, MIN_SYNC_SHARE * s) for s, y in shapes[k])
                     for k in keys])
    return Samples(np.array([k[0] for k in keys]), np.array([k[1] for k in keys]),
                   np.array([float(k[2]) for k in keys]), comp, step)


def grad_of(records: list[dict]):
    """GradParams from the last GRAD_WINDOW records with gradient statistics (see above)."""
    from dlsched.workload.goodput import GradParams
    got = [r for r in records if r.get("grad_var") is not None and r.get("grad_sqr") is not None]
    if not got:
        return GradParams(1.0, 0.0)
    got = got[-GRAD_WINDOW:]
    var = max(float(np.mean([r["grad_var"] for r in got])), 0.0)
    sqr = max(float(np.mean([r["grad_sqr"] for r in got])), GRAD_FLOOR * var, 1e-30)
    return GradParams(sqr, var)


def fit_records(records: list[dict], init_batch: int, max_batch: int):
    """(GoodputModel, AppLimits) of a job from its step records, or None before any record
    with a measured all-reduce."""
    from dlsched.workload.goodput import AppLimits, GoodputModel, fit_perf_params
    s = samples_of(records)
    if s is None:
        return None
    lim = AppLimits(int(init_batch), int(max_batch), 1, int(max_batch))
    return GoodputModel(fit_perf_params(s).params, grad_of(records), int(init_batch)), lim


class MeasuredGoodput:
    """The backend's fitted models, one per adaptive job, refreshed from the store."""

    def __init__(self, store, refit_s: float = 5.0) -> None:
        self.store, self.refit_s = store, float(refit_s)
        self._fits: dict[str, tuple[float, int, object]] = {}   # job -> (when, records, fit)

    def __call__(self, job_id: str, init_batch: int, max_batch: int):
        """The job's (GoodputModel, AppLimits), or None before it measured a step."""
        now = time.monotonic()
        hit = self._fits.get(job_id)
        if hit is not None and now - hit[0] < self.refit_s:
            return hit[2]
        recs = self.store.stats(job_id)
        if hit is not None and hit[1] == len(recs):
            self._fits[job_id] = (now, hit[1], hit[2])
            return hit[2]
        fit = fit_records(recs, init_batch, max_batch)
        self._fits[job_id] = (now, len(recs), fit)
        return fit
