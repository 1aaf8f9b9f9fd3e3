"""Optimus's fitted estimators (policies/actions/optimus_fit.py) and the loss curves they fit
(workload/loss.py): table tests with values worked by hand."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from dlsched.policies.actions.optimus_fit import (MIN_LOSS_SAMPLES, PRIOR_TOTAL_ITERS, convergence_step,
                                                  fit_loss, fit_speed, fitted_iter_time, fitted_remaining,
                                                  model_iter_time)
from dlsched.workload.loss import (CONVERGED_FRAC, converged_step, curve, curve_params, observed_loss,
                                   true_betas)
from dlsched.workload.schema import job_from_row

M = 128.0
SHAPES = [(1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (8, 4), (3, 3)]


@pytest.mark.parametrize("kind, theta, shapes", [
    ("sync", [0.002, 0.05, 0.03, 0.004, 0.01], SHAPES),
    ("sync", [0.001, 0.0, 0.08, 0.0, 0.02], SHAPES),            # zeros stay zero (NNLS)
    ("async", [0.3, 0.05, 0.002, 0.01], SHAPES),
    ("allreduce", [0.002, 0.05, 0.003], [(1, 0), (2, 0), (3, 0), (4, 0), (8, 0)]),
])
def test_nnls_speed_fit_recovers_theta_from_exact_samples(kind, theta, shapes):
    # samples: iterations/s = 1 / t (sync, all-reduce) or w / (theta . row) (async)
    samples = {(w, p): 1.0 / model_iter_time(kind, M, theta, w, p) for w, p in shapes}
    got = fit_speed(kind, M, samples)
    assert np.allclose(got, theta, rtol=1e-6, atol=1e-9)
    for w, p in shapes:
        assert model_iter_time(kind, M, got, w, p) == pytest.approx(1.0 / samples[(w, p)], rel=1e-9)


def test_speed_model_forms_worked_by_hand():
    # sync: 0.002 x 128/4 + 0.05 + 0.03 x 4/2 + 0.004 x 4 + 0.01 x 2 = 0.064+0.05+0.06+0.016+0.02
    assert model_iter_time("sync", M, [0.002, 0.05, 0.03, 0.004, 0.01], 4, 2) == pytest.approx(0.21)
    # async: f = w / (0.3 + 0.05 x 4/2 + 0.002 x 4 + 0.01 x 2) = 4 / 0.428: t = 0.107
    assert model_iter_time("async", M, [0.3, 0.05, 0.002, 0.01], 4, 2) == pytest.approx(0.428 / 4)
    # all-reduce: 0.002 x 128/4 + 0.05 + 0.003 x (4 - 1) = 0.064 + 0.05 + 0.009
    assert model_iter_time("allreduce", M, [0.002, 0.05, 0.003], 4, 0) == pytest.approx(0.123)
    assert model_iter_time("sync", M, [0.002, 0.05, 0.03, 0.004, 0.01], 4, 0) == math.inf
    assert model_iter_time("sync", M, [0.0] * 5, 4, 2) == math.inf


def _opt(samples, oracle=lambda spec, w, p, cl: 1.0 / w + 0.1 * p, min_samples=3):
    calls = []

    def counted(spec, w, p, cl):
        calls.append((w, p))
        return oracle(spec, w, p, cl)
    return SimpleNamespace(_samples={"j": samples}, _fits={}, _conv={}, min_samples=min_samples,
                           oracle_iter_time=counted, calls=calls)


REC = SimpleNamespace(job_id="j", spec=SimpleNamespace(comm="ps", batch_size=128, model=None))


def test_early_state_scales_the_oracle_shape_to_the_samples():
    opt = _opt({})
    assert fitted_iter_time(opt, REC, 4, 2, "c") == pytest.approx(0.25 + 0.2)      # no sample: oracle
    opt = _opt({(2, 1): 1.0 / 1.2})                 # observed 1.2 s where the oracle says 0.6 s
    assert fitted_iter_time(opt, REC, 4, 2, "c") == pytest.approx(2.0 * 0.45)
    opt = _opt({(2, 1): 1.0 / 1.2, (1, 1): 1.0 / 0.55})   # ratios 2 and 0.5: geometric mean 1
    assert fitted_iter_time(opt, REC, 4, 2, "c") == pytest.approx(0.45)


def test_speed_fit_is_cached_and_redone_only_when_the_samples_change():
    theta = [0.002, 0.05, 0.03, 0.004, 0.01]
    samples = {(w, p): 1.0 / model_iter_time("sync", M, theta, w, p) for w, p in SHAPES}
    opt = _opt(samples)
    t = fitted_iter_time(opt, REC, 6, 3, "c")
    assert t == pytest.approx(model_iter_time("sync", M, theta, 6, 3), rel=1e-6)
    entry = opt._fits["j"]
    assert fitted_iter_time(opt, REC, 6, 3, "c") == t and opt._fits["j"] is entry     # cached
    assert fitted_iter_time(opt, REC, 5, 1, "c") and opt._fits["j"] is entry
    samples[(2, 1)] *= 0.5                          # a new observation at (2, 1): refit
    fitted_iter_time(opt, REC, 6, 3, "c")
    assert opt._fits["j"] is not entry
    assert opt.calls == []                          # enough samples: the oracle is never asked


# -- loss curves and the convergence fit ---------------------------------------------------------
@pytest.mark.parametrize("model, iterations", [("resnet50", 20000), ("lstm", 3000), ("nosuchmodel", 777)])
def test_true_curve_converges_exactly_at_the_job_iterations(model, iterations):
    b = true_betas(model, iterations)
    l0, floor = curve_params(model)
    assert float(curve(b, 0)) == pytest.approx(l0)
    assert converged_step(b) == pytest.approx(iterations)
    # the criterion: excess over the floor = CONVERGED_FRAC x the excess at step 0
    assert float(curve(b, iterations)) - floor == pytest.approx(CONVERGED_FRAC * (l0 - floor))


def test_resnet50_curve_worked_by_hand():
    # L0 = ln 1000 = 6.9078, floor 1: b1 = 1 / 5.9078 = 0.16927, b0 = b1 x 19 / 20000
    b0, b1, b2 = true_betas("resnet50", 20000)
    assert (b1, b2) == (pytest.approx(0.169269, rel=1e-5), 1.0)
    assert b0 == pytest.approx(0.169269 * 19 / 20000, rel=1e-5)


def test_observed_loss_is_noisy_but_deterministic_per_job_and_step():
    a = job_from_row(dict(job_id="a", submit_time_s=0, workers=1, model="resnet50", iterations=1000))
    b = job_from_row(dict(job_id="b", submit_time_s=0, workers=1, model="resnet50", iterations=1000))
    assert observed_loss(a, 10) == observed_loss(a, 10)
    assert observed_loss(a, 10) != observed_loss(b, 10)
    clean = float(curve(true_betas("resnet50", 1000), 10))
    assert observed_loss(a, 10) == pytest.approx(clean, rel=0.1) and observed_loss(a, 10) != clean
    trace = job_from_row(dict(job_id="t", submit_time_s=0, workers=1, duration_s=60))
    assert observed_loss(trace, 10) is None


@pytest.mark.parametrize("model, iterations", [("resnet50", 20000), ("lstm", 3000), ("cifar10", 500)])
def test_loss_fit_recovers_beta_and_the_convergence_step_from_exact_samples(model, iterations):
    b = true_betas(model, iterations)
    k = np.linspace(0.02, 0.5, 30) * iterations
    got = fit_loss(k, curve(b, k))
    assert np.allclose(got, b, rtol=1e-3)
    assert convergence_step(got) == pytest.approx(iterations, rel=1e-3)


def test_loss_fit_on_noisy_samples_estimates_the_convergence_step():
    spec = job_from_row(dict(job_id="n", submit_time_s=0, workers=1, model="resnet50", iterations=20000))
    k = np.linspace(200, 8000, 60)
    got = fit_loss(k, [observed_loss(spec, x) for x in k])
    assert convergence_step(got) == pytest.approx(20000, rel=0.15)


def test_fitted_remaining_collects_samples_and_falls_back_to_the_population_prior():
    b = true_betas("resnet50", 10000)
    opt = SimpleNamespace(_conv={})
    rec = SimpleNamespace(job_id="a")
    # fewer than MIN_LOSS_SAMPLES samples, nobody else fitted: the prior total
    assert fitted_remaining(opt, rec, None, {"step": 0.0, "loss": None}) == PRIOR_TOTAL_ITERS
    for i in range(1, MIN_LOSS_SAMPLES + 3):
        step = 500.0 * i
        q = fitted_remaining(opt, rec, None, {"step": step, "loss": float(curve(b, step))})
    assert len(opt._loss["a"]) == MIN_LOSS_SAMPLES + 2
    assert q == pytest.approx(10000 - step, rel=1e-3)
    fitted_remaining(opt, rec, None, {"step": step, "loss": float(curve(b, step))})
    assert len(opt._loss["a"]) == MIN_LOSS_SAMPLES + 2           # the same step is recorded once
    # a job with no samples yet: the median of the others' estimated totals
    new = fitted_remaining(opt, SimpleNamespace(job_id="b"), None, {"step": 0.0, "loss": 7.0})
    assert new == pytest.approx(10000, rel=1e-3)


def test_sim_backend_reports_step_and_loss():
    from dlsched.cluster.topology import load_cluster
    from dlsched.sim.backend import SimBackend
    job = job_from_row(dict(job_id="x", submit_time_s=0, workers=1, model="resnet50", iterations=100,
                            batch_size=64))
    be = SimBackend(load_cluster("seed001"), [job])
    be.poll()
    st = be.job_stats("x")
    assert st["step"] == 0.0 and st["loss"] == observed_loss(job, 0.0)


def test_every_running_job_gets_a_loss_sample_once_per_round():
    from dlsched.policies.actions.optimus_fit import collect_losses
    stats = {"a": {"step": 10.0, "loss": 3.0}, "b": {"step": 20.0, "loss": 2.0}}
    running = {j: SimpleNamespace(job_id=j, spec=SimpleNamespace(kind="dl")) for j in stats}
    ctx = SimpleNamespace(now=60.0, stats=stats.__getitem__, running=list(running.values()))
    opt = SimpleNamespace(_conv={})
    fitted_remaining(opt, SimpleNamespace(job_id="c"), ctx, {"step": 0.0, "loss": 5.0})
    assert opt._loss["a"] == [(10.0, 3.0)] and opt._loss["b"] == [(20.0, 2.0)] and opt._loss["c"] == []
    stats["a"]["step"] = 30.0
    collect_losses(opt, ctx)                               # same round: nothing new
    assert opt._loss["a"] == [(10.0, 3.0)]
    ctx.now = 120.0
    collect_losses(opt, ctx)
    assert opt._loss["a"] == [(10.0, 3.0), (30.0, 3.0)] and len(opt._loss["b"]) == 1
