"""Pollux's goodput model (dlsched.workload.goodput): the fit against Pollux's own fit on every
application's placements.csv, and each formula on hand-worked cases, monotonicity and limits.

What "reproduces Pollux's fit" means here. Pollux ships no fitted parameters (its simulated jobs
refit on the fly from the placements they run on), so the reference below was made by running
Pollux's own `fit_perf_params` (petuum/adaptdl branch osdi21-artifact, commit de25dcc,
`simulator/goodput.py`, with autograd 1.9.1 and scipy 1.17.1) on exactly the rows our fit sees
(`placement_samples(app)`: every placements.csv row, compute = step_time - sync_time). To
regenerate: `python benchmarks/goodput_fit.py --pollux-goodput PATH/simulator/goodput.py`
prints our predictions against a fresh run of Pollux's code.

The issue's bar, "median predicted step time within 2 %", is met against Pollux's fit (median
difference below 1e-4 on every application). Against the measurements themselves neither fit
gets there: the 7-parameter model sees only (inter-node or not, replicas, atomic batch), while
placements sharing those differ by 2-5 % (median) in the data, and compute time is not linear
in the batch for some applications (yolov3). Pollux's own fit has median errors of 4.3-6.8 %;
the test checks that ours is no worse.
"""
from __future__ import annotations

import numpy as np
import pytest

from dlsched.workload import efficiency as wl_efficiency
from dlsched.workload.goodput import (
    AppLimits, GoodputModel, GradParams, PerfParams, Samples, SpeedupFunction, app_grad_params,
    app_limits, best_batch, efficiency, fair_share_base, fit_observations, fit_perf_params, gain,
    global_batch, linear_speedup, network_time, noise_scale, placement_samples, step_time,
    sync_step_time, throughput,
)
from dlsched.workload.goodput.fit import objective, start_and_bounds
from dlsched.workload.goodput.search import CANDIDATES

# Pollux's fit_perf_params on each application's placements.csv (see the module docstring).
POLLUX_FIT = {
    "bert": (0.16918072924513117, 0.05859826394597662, 1.3518473569020457, 0.014247080614466584,
             0.28707953452786134, 0.01118441156860115, 1.900437533850211),
    "cifar10": (0.017330887909142674, 0.0007017486838810244, 0.12104495217152741,
                0.0023924778059134927, 0.03247858886450272, 3.353348388470179e-05,
                1.9980603126338585),
    "deepspeech2": (0.3040572526812855, 0.024234371845099356, 0.37778268789135044,
                    0.028500232413078655, 0.08699156493882806, 0.0018575323789515276,
                    1.431915692038869),
    "imagenet": (0.06454123299556339, 0.00447353018141196, 0.29900730781174184,
                 0.005552709738656052, 0.00015702286642754827, 1e-08, 2.4889393741342976),
    "ncf": (0.0069238966702508745, 6.322010850138529e-07, 0.01816563860764865,
            0.00042768883628253326, 0.006191508196679536, 0.00015168378918763487,
            1.2257254919291996),
    "yolov3": (0.18271996015325584, 0.025952699627604995, 0.6989579072889932,
               0.023358496175098612, 0.13895478681137796, 0.021481402134716596,
               1.1631728454637438),
}


def _rel(a, b):
    return np.abs(np.asarray(a) / np.asarray(b) - 1)


# -- the fit against Pollux's -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def fits():
    return {app: (placement_samples(app), fit_perf_params(placement_samples(app))) for app in POLLUX_FIT}


@pytest.mark.parametrize("app", sorted(POLLUX_FIT))
def test_fit_reproduces_pollux_fit_on_placements(fits, app):
    s, res = fits[app]
    assert res.success and len(s) >= 540
    ours = sync_step_time(res.params, s.nodes, s.replicas, s.atomic_bsz)
    theirs = sync_step_time(PerfParams(*POLLUX_FIT[app]), s.nodes, s.replicas, s.atomic_bsz)
    assert np.median(_rel(ours, theirs)) < 1e-4          # the bar is 2 %
    assert np.max(_rel(ours, theirs)) < 0.02
    # the well-determined parameters agree; alpha_r / beta_r of cifar10 trade off along a flat
    # valley of the objective (their predictions agree to 1.3 % at worst, checked above)
    for name in ("alpha_c", "beta_c", "alpha_n", "beta_n", "gamma"):
        assert getattr(res.params, name) == pytest.approx(getattr(PerfParams(*POLLUX_FIT[app]), name), rel=1e-2)
    # against the measurements: no worse than Pollux's own fit
    assert np.median(_rel(ours, s.step_s)) <= np.median(_rel(theirs, s.step_s)) + 1e-3
    assert np.median(_rel(ours, s.step_s)) < 0.07


def test_objective_gradient_matches_finite_differences():
    s = placement_samples("bert")
    for x in ([0.05, 0.002, 0.02, 0.003, 0.01, 0.001, 2.0], [0.2, 0.05, 1.0, 0.01, 0.3, 0.01, 1.2]):
        x = np.array(x)
        h = 1e-6 * x                                   # central differences
        num = [(objective(x + h * e, s)[0] - objective(x - h * e, s)[0]) / (2 * h[i])
               for i, e in enumerate(np.eye(7))]
        assert objective(x, s)[1] == pytest.approx(num, rel=1e-5, abs=1e-8)


def _synthetic(p: PerfParams) -> Samples:
    k, n, m = np.meshgrid([1, 2, 4], [1, 2, 4, 8, 16], [8, 16, 32, 64], indexing="ij")
    k, n, m = k.ravel(), n.ravel(), m.ravel().astype(float)
    ok = k <= n
    k, n, m = k[ok], n[ok], m[ok]
    return Samples(k, n, m, p.alpha_c + p.beta_c * m, sync_step_time(p, k, n, m))


def test_fit_recovers_the_parameters_of_noiseless_data():
    true = PerfParams(0.05, 0.004, 0.2, 0.01, 0.05, 0.002, 2.0)
    s = _synthetic(true)
    res = fit_perf_params(s)
    assert np.max(_rel(sync_step_time(res.params, s.nodes, s.replicas, s.atomic_bsz), s.step_s)) < 5e-3
    assert res.params.alpha_c == pytest.approx(true.alpha_c, rel=1e-3)
    assert res.params.beta_c == pytest.approx(true.beta_c, rel=1e-3)
    assert res.params.alpha_n == pytest.approx(true.alpha_n, rel=0.05)


def test_priors_pin_what_the_data_cannot_identify():
    # one atomic batch, one node, two replicas at most
    s = Samples(np.array([1, 1]), np.array([1, 2]), np.array([32.0, 32.0]),
                np.array([0.1, 0.1]), np.array([0.1, 0.12]))
    x0, lo, hi = start_and_bounds(s)
    assert x0[0] == lo[0] == hi[0] == pytest.approx(0.05)      # alpha_c = mean(T_grad) / 2
    assert lo[2] == hi[2] == lo[3] == hi[3] == 1e-8             # no multi-node rows
    assert lo[5] == hi[5] == 1e-8                               # no replicas > 2
    assert hi[4] == np.inf and hi[6] == 10.0 and lo[6] == 1.0
    res = fit_perf_params(s)
    # post-fit prior: crossing nodes is at least 1.1 x as slow as staying on one
    assert res.params.alpha_n >= 1.1 * res.params.alpha_r > 0
    assert res.params.beta_n >= 1.1 * res.params.beta_r
    assert sync_step_time(res.params, 2, 2, 32) > sync_step_time(res.params, 1, 2, 32)


def test_fit_observations_and_bad_input():
    res = fit_observations([1, 1, 1], [1, 1, 1], [8, 16, 32], [0.11, 0.2, 0.4], [0.01, 0.01, 0.01])
    assert sync_step_time(res.params, 1, 1, 16) == pytest.approx(0.2, rel=0.05)
    with pytest.raises(ValueError, match="positive"):
        fit_observations([1], [1], [8], [0.1], [0.2])
    with pytest.raises(ValueError, match="at least one"):
        fit_observations([], [], [], [], [])


# -- throughput -------------------------------------------------------------------------------------
P = PerfParams(alpha_c=0.1, beta_c=0.01, alpha_n=0.3, beta_n=0.05, alpha_r=0.1, beta_r=0.02, gamma=1.0)


def test_network_time_picks_the_bottleneck_link():
    assert network_time(P, 2, 4) == pytest.approx(0.3 + 0.05 * 2)     # inter-node
    assert network_time(P, 1, 4) == pytest.approx(0.1 + 0.02 * 2)     # intra-node
    assert network_time(P, 1, 2) == pytest.approx(0.1)                 # N - 2 = 0
    assert network_time(P, 1, 1) < 1e-7                                # no all-reduce


def test_step_time_by_hand():
    # gamma = 1: no overlap, T = s*T_grad + T_grad + T_net; m = 10 -> T_grad = 0.2
    assert step_time(P, 2, 4, 10) == pytest.approx(0.2 + 0.4)
    assert step_time(P, 2, 4, 10, 2) == pytest.approx(2 * 0.2 + 0.6)
    assert throughput(P, 2, 4, 10, 2) == pytest.approx(4 * 10 * 3 / 1.0)
    # gamma = 2: T_sync = sqrt(0.2^2 + 0.4^2)
    p2 = P._replace(gamma=2.0)
    assert step_time(p2, 2, 4, 10) == pytest.approx(np.hypot(0.2, 0.4))
    # gamma -> large: ~max(T_grad, T_net), never below it
    p10 = P._replace(gamma=10.0)
    assert 0.4 <= step_time(p10, 2, 4, 10) <= 0.4 * 2 ** 0.1 + 1e-12
    assert step_time(P, 1, 1, 10) == pytest.approx(0.2)                # a single GPU: compute only


def test_throughput_monotonicity():
    m = np.arange(1, 200)
    t = throughput(P, 1, 1, m)
    assert np.all(np.diff(t) > 0) and t[-1] < 1 / P.beta_c             # saturates at 1 / beta_c
    n = np.arange(2, 64)
    assert np.all(np.diff(step_time(P, 2, n, 32)) > 0)                 # retrogression
    assert np.all(step_time(P, 2, n, 32) > step_time(P, 1, n, 32))     # crossing nodes costs


# -- statistical efficiency -------------------------------------------------------------------------
def test_efficiency_by_hand():
    g = GradParams(sqr=1.0, var=3.0)
    # M0 = 10, M = 20: r = 2, gain = 4 / (1.5 + 1) = 1.6, E = 0.8; phi = 30: (30+10)/(30+20) = 0.8
    assert gain(g, 20, 10) == pytest.approx(1.6)
    assert efficiency(g, 20, 10) == pytest.approx(0.8)
    assert noise_scale(g, 10) == pytest.approx(30.0)
    phi = noise_scale(g, 10)
    m = np.array([10, 40, 160, 1000])
    assert efficiency(g, m, 10) == pytest.approx((phi + 10) / (phi + m))
    assert efficiency(g, 10, 10) == pytest.approx(1.0)


def test_efficiency_limits_and_monotonicity():
    m = np.geomspace(8, 8192, 40)
    e = efficiency(GradParams(0.5, 2.0), m, 8)
    assert np.all(np.diff(e) < 0) and np.all(e <= 1 + 1e-12)
    g = gain(GradParams(0.5, 2.0), m, 8)
    assert np.all(np.diff(g) > 0) and np.all((g >= 1 - 1e-12) & (g <= m / 8 + 1e-9))
    assert efficiency(GradParams(1.0, 0.0), 80, 8) == pytest.approx(0.1)     # no noise: M0 / M
    assert efficiency(GradParams(0.0, 1.0), 80, 8) == pytest.approx(1.0)     # noise only
    assert efficiency(GradParams(0.0, 0.0), 80, 8) == pytest.approx(0.1)     # Pollux: gain 1
    assert noise_scale(GradParams(0.0, 1.0), 8) == np.inf


def test_app_grad_params_agree_with_the_simulated_gain():
    lim = app_limits("cifar10")
    for batch, epoch in ((lim.init_batch_size, 0), (1000, 10), (lim.max_batch_size, 50)):
        g = app_grad_params("cifar10", batch, epoch)
        assert g.sqr > 0 and g.var > 0
        assert float(gain(g, batch, lim.init_batch_size)) == pytest.approx(
            wl_efficiency.gain("cifar10", batch, epoch))


# -- goodput and the batch search -------------------------------------------------------------------
LIM = AppLimits(init_batch_size=32, max_batch_size=1024, min_local_bsz=8, max_local_bsz=64)
MODEL = GoodputModel(P._replace(gamma=2.0), GradParams(1.0, 10.0), 32)


def test_goodput_is_throughput_times_efficiency():
    assert MODEL(2, 4, 16, 1) == pytest.approx(throughput(MODEL.perf, 2, 4, 16, 1) * MODEL.efficiency(128))
    with pytest.raises(ValueError, match="initial batch"):
        MODEL(1, 1, 16)


def _brute(model, k, n, lim):
    """Pollux's candidate set, enumerated one by one (the search's rule, unvectorised)."""
    best = (0.0, None, None)
    for b in np.geomspace(max(lim.init_batch_size, lim.min_local_bsz * n), lim.max_batch_size, CANDIDATES):
        local = b / n
        s = int(np.ceil(local / lim.max_local_bsz - 1e-8)) - 1
        if n == 1 and local > lim.init_batch_size + 1e-8:
            s = max(s, 1)
        m = int(np.ceil(local / (s + 1) - 1e-8))
        g = float(model(k, n, m, s)) if lim.min_local_bsz <= m <= lim.max_local_bsz else 0.0
        if g > best[0]:
            best = (g, m, s)
    return best


@pytest.mark.parametrize("k,n", [(1, 1), (1, 2), (1, 4), (2, 4), (4, 16), (8, 32)])
def test_search_matches_enumeration(k, n):
    res = best_batch(MODEL, k, n, LIM)
    assert (res.goodput, res.atomic_bsz, res.accum_steps) == pytest.approx(_brute(MODEL, k, n, LIM))
    assert LIM.min_local_bsz <= res.atomic_bsz <= LIM.max_local_bsz
    assert global_batch(res, n) >= LIM.init_batch_size


def test_search_rules():
    k, n = np.array([1, 1, 2, 4]), np.array([1, 4, 8, 16])
    res = best_batch(MODEL, k, n, LIM)
    assert res.goodput.shape == (4,)
    for i in range(4):
        one = best_batch(MODEL, int(k[i]), int(n[i]), LIM)
        assert one.goodput == pytest.approx(res.goodput[i]) and one.atomic_bsz == res.atomic_bsz[i]
    # a single replica beyond M0 accumulates at least once
    noiseless_big = GoodputModel(MODEL.perf, GradParams(0.0, 1.0), 32)     # E = 1: big batches win
    r1 = best_batch(noiseless_big, 1, 1, LIM)
    assert r1.accum_steps >= 1 and global_batch(r1, 1) > 32
    # without accumulation, a local batch above m_max is invalid, so s = 0
    r0 = best_batch(noiseless_big, 1, 4, LIM, accumulation=False)
    assert r0.accum_steps == 0 and r0.atomic_bsz <= LIM.max_local_bsz
    # with no gradient noise the efficiency is M0 / M: the smallest batch is best
    greedy = GoodputModel(MODEL.perf, GradParams(1.0, 0.0), 32)
    r2 = best_batch(greedy, 1, 2, LIM)
    assert global_batch(r2, 2) == 32
    with pytest.raises(ValueError):
        best_batch(MODEL, 2, 1, LIM)
    with pytest.raises(ValueError):
        best_batch(MODEL, 1, 1, max_batch_size=16)


# -- speedup ----------------------------------------------------------------------------------------
def test_speedup_conventions():
    sp = SpeedupFunction(MODEL, LIM)
    assert sp(1, 1) == pytest.approx(1.0) and sp(0, 0) == 0.0
    got = sp(np.array([0, 1, 1, 2, 4]), np.array([0, 1, 4, 8, 40]))      # 40: past the memo
    for k, n, v in zip([0, 1, 1, 2, 4], [0, 1, 4, 8, 40], got):
        assert sp(k, n) == pytest.approx(v)
    assert got[2] == pytest.approx(best_batch(MODEL, 1, 4, LIM).goodput / best_batch(MODEL, 1, 1, LIM).goodput)
    assert sp(1, 4) > 1 and sp(2, 4) < sp(1, 4)                            # crossing nodes costs
    fair = SpeedupFunction(MODEL, LIM, base=(1, 4))
    assert fair(1, 4) == pytest.approx(1.0) and fair(2, 8) == pytest.approx(sp(2, 8) / sp(1, 4))
    for bad in ((2, 1), (1, 0), (0, 1), (-1, 2)):
        with pytest.raises(ValueError):
            sp(*bad)
    assert linear_speedup(2, 6) == 6.0 and list(linear_speedup(np.array([1]), np.array([3]))) == [3.0]


def test_fair_share_base_as_pollux():
    # 16 nodes x 4 GPUs: share 1/64 -> ceil(16/64) = 1 node; ceil(64 / jobs) replicas
    assert fair_share_base(64, 16, 10) == (1, 7)
    assert fair_share_base(64, 16, 100) == (1, 1)
    assert fair_share_base(64, 16, 1) == (1, 64)
    with pytest.raises(ValueError):
        fair_share_base(0, 1, 1)


@pytest.mark.parametrize("app", ["cifar10", "yolov3"])
def test_speedup_on_a_fitted_application(fits, app):
    s, res = fits[app]
    lim = app_limits(app)
    model = GoodputModel(res.params, app_grad_params(app, lim.init_batch_size, 1), lim.init_batch_size)
    sp = SpeedupFunction(model, lim)
    one_node = sp(np.ones(4, int), np.array([1, 2, 3, 4]))
    assert one_node[0] == pytest.approx(1.0) and np.all(one_node[1:] > 1)
    assert np.all(one_node <= np.array([1, 2, 3, 4]) * 1.5)   # no wildly superlinear speedup
