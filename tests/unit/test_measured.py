"""Measured speeds (dlsched.workload.measured): Pollux's profiles as iteration times."""
import csv
import math
from pathlib import Path

import numpy as np
import pytest

import dlsched
from dlsched.cluster import load_cluster
from dlsched.core.errors import DlschedError
from dlsched.core.types import TaskPlacement
from dlsched.workload.measured import (POLLUX_APPS, accumulation, app_profile, batch_plan,
                                       measured_iter_time, measured_throughput, normalize_placement,
                                       packed_placement, trained_batch)
from dlsched.workload.schema import job_from_row
from dlsched.workload.speed import SpeedModel, SpeedParams, load_speed_config

PROFILES = Path(dlsched.__file__).parent / "data" / "pollux" / "app-profiles"


def _rows(app):
    with open(PROFILES / app / "placements.csv") as f:
        return [(tuple(int(c) for c in r["placement"]), int(r["local_bsz"]), float(r["step_time"]),
                 float(r["sync_time"])) for r in csv.DictReader(f)]


def _job(**kw):
    row = dict(job_id="j", submit_time_s=0, iterations=100)
    row.update(kw)
    return job_from_row(row)


def _pl(*nodes):
    return tuple(TaskPlacement(i, n, (i,)) for i, n in enumerate(nodes))


# -- interpolation ------------------------------------------------------------------------------

def test_exact_rows_of_placements_csv():
    # bert "11" at local batch 12 (global 24 over 2 GPUs): the row itself.
    assert measured_iter_time("bert", (1, 1), 24) == 1.4814671874046326
    for app in POLLUX_APPS:
        for placement, bsz, step, sync in _rows(app)[::7]:
            assert measured_throughput(app, placement, bsz) == (step, sync)
            n = sum(placement)
            if batch_plan(app, bsz * n, n) == (0, bsz):   # no accumulation: one measured step
                assert measured_iter_time(app, placement, bsz * n) == step


def test_linear_between_rows():
    # cifar10 on one GPU: rows at local batch 91 and 129; 128 lies between them.
    rows = {b: s for p, b, s, _ in _rows("cifar10") if p == (1,)}
    expect = rows[91] + (128 - 91) / (129 - 91) * (rows[129] - rows[91])
    assert measured_iter_time("cifar10", (1,), 128) == pytest.approx(expect, rel=1e-12)
    # linear in the batch: the midpoint is the mean of its neighbours
    t = [measured_iter_time("cifar10", (1,), b) for b in (100, 110, 120)]
    assert t[1] == pytest.approx((t[0] + t[2]) / 2, rel=1e-12)


def test_rotation_normalisation():
    assert normalize_placement((2, 1)) == (1, 2) and normalize_placement((3, 0, 1, 2)) == (1, 2, 3)
    for app in POLLUX_APPS:
        assert measured_iter_time(app, (1, 2), 96) == measured_iter_time(app, (2, 1), 96)
        assert measured_iter_time(app, (2, 3, 1), 96) == measured_iter_time(app, (1, 2, 3), 96)
    # (1, 2, 3) and (1, 3, 2) are different placements (profiled separately)
    rows = {(p, b): s for p, b, s, _ in _rows("bert")}
    assert measured_throughput("bert", (1, 3, 2), 4)[0] == rows[((1, 3, 2), 4)]
    assert measured_throughput("bert", (1, 2, 3), 4)[0] == rows[((1, 2, 3), 4)]


def test_unprofiled_placement_uses_nd_interpolation():
    for app in POLLUX_APPS:
        big = measured_iter_time(app, (4,) * 16, 64 * 16 * 4)
        assert math.isfinite(big) and big > 0
        # over the 16-node cap, and a node with more GPUs than Pollux's 4: still finite, positive
        for pl in ((4,) * 20, (8,), (8, 8), (1,) * 64):
            t = measured_iter_time(app, pl, 32 * sum(pl))
            assert math.isfinite(t) and t > 0, (app, pl)
    # At a measured configuration the N-D interpolation gives the measurement (scalability.csv).
    with open(PROFILES / "bert" / "scalability.csv") as f:
        scal = [r for r in csv.DictReader(f) if (r["num_nodes"], r["num_replicas"]) == ("16", "64")]
    assert scal
    for r in scal:
        step, sync = measured_throughput("bert", (4,) * 16, int(r["local_bsz"]))
        assert step == pytest.approx(float(r["step_time"]), rel=1e-9)
        assert sync == pytest.approx(float(r["sync_time"]), rel=1e-9)


def _pollux_nd(app):
    """Pollux's N-D interpolator, built as its simulator builds it (pandas + scipy)."""
    import pandas as pd
    from scipy.interpolate import LinearNDInterpolator
    pl = pd.read_csv(PROFILES / app / "placements.csv")
    pl["num_nodes"] = pl.placement.apply(lambda p: len(str(p)))
    pl["num_replicas"] = pl.placement.apply(lambda p: sum(map(int, str(p))))
    xs, ys = ["num_nodes", "num_replicas", "local_bsz"], ["step_time", "sync_time"]
    df = pl.groupby(xs)[xs + ys].mean()
    df = pd.concat([df, pd.read_csv(PROFILES / app / "scalability.csv")], ignore_index=True)
    return LinearNDInterpolator(df[xs].values, df[ys].values)


@pytest.mark.parametrize("app", POLLUX_APPS)
def test_nd_matches_scipy_linear_nd_interpolator(app):
    """Our N-D values are LinearNDInterpolator's; where its interpolant jumps (a face between
    disagreeing simplices of the degenerate triangulation) ours is one of the one-sided values."""
    pytest.importorskip("scipy.interpolate")
    f = _pollux_nd(app)
    prof = app_profile(app)
    rng = np.random.default_rng(7)
    lo, hi = prof.nd_bsz[0], prof.nd_bsz[-1]
    n_same = n_tie = 0
    for _ in range(300):
        n = int(rng.integers(5, 17))
        q = np.array([n, int(rng.integers(n, 4 * n + 1)), float(rng.integers(lo, hi + 1))])
        ref = f([q])[0]
        ours = prof.linear_nd([q])[0]
        assert np.isnan(ref).all() == np.isnan(ours).all()
        if np.isnan(ref).all():
            continue
        if np.allclose(ours, ref, rtol=1e-9):
            n_same += 1
            continue
        eps = 1e-7
        sides = [f([q + d])[0] for d in eps * np.vstack([np.eye(3), -np.eye(3), [[1, 1, 0], [-1, -1, 0]]])]
        assert any(np.allclose(ours, s, rtol=1e-5) for s in sides), (q, ours, ref)
        n_tie += 1
    assert n_same > 10 * max(n_tie, 1) / 2   # ties are rare


def test_accumulation_when_local_batch_exceeds_the_max():
    # bert: max local batch 12; 48 on one GPU = 4 micro-steps of 12, one all-reduce.
    step, sync = measured_throughput("bert", (1,), 12)
    assert accumulation("bert", 48) == (3, 12)
    assert measured_iter_time("bert", (1,), 48) == pytest.approx(step + 3 * (step - sync), rel=1e-12)
    # 50 samples: 4 extra micro-steps of ceil(50 / 5) = 10
    assert accumulation("bert", 50) == (4, 10)
    # yolov3: Pollux's max local batch is 8 although 16 is profiled
    assert app_profile("yolov3").max_local_bsz == 8
    s8, y8 = measured_throughput("yolov3", (2, 2), 8)
    assert measured_iter_time("yolov3", (2, 2), 64) == pytest.approx(s8 + (s8 - y8), rel=1e-12)
    # at the max: no accumulation
    assert accumulation("cifar10", 1024) == (0, 1024)


def test_pollux_job_batch_plan():
    # cifar10: initial batch 128 (its smallest validation profile), largest 4096.
    prof = app_profile("cifar10")
    assert (prof.init_batch_size, prof.max_batch_size) == (128, 4096)
    # one GPU above the initial batch: Pollux's jobs accumulate at least once,
    # 363 -> 2 micro-steps of ceil(363 / 2) = 182
    assert batch_plan("cifar10", 363, 1) == (1, 182)
    step, sync = measured_throughput("cifar10", (1,), 182)
    assert measured_iter_time("cifar10", (1,), 363) == pytest.approx(step + (step - sync), rel=1e-12)
    # at the initial batch: no accumulation
    assert batch_plan("cifar10", 128, 1) == (0, 128)
    # 6 GPUs x ceil(2048 / 6) = 342 -> trains 2052 (rounded up to whole per-GPU batches)
    assert batch_plan("cifar10", 2048, 6) == (0, 342)
    assert trained_batch("cifar10", 2048, 6) == 2052
    # clamped to the largest profiled batch: 5 GPUs x ceil(4096 / 5) = 820 would be 4100;
    # floor(4096 / 5) = 819 -> 4095
    assert trained_batch("cifar10", 4096, 5) == 4095


def test_local_batch_is_clamped_into_the_profiled_range():
    small = measured_iter_time("cifar10", (1,), 16)        # below the smallest row (32)
    assert small == measured_iter_time("cifar10", (1,), 32)
    # ncf's (4,4,4,4) rows stop at 2051, below the app's max local batch (32768): clamped
    rows = {b: s for p, b, s, _ in _rows("ncf") if p == (4, 4, 4, 4)}
    assert max(rows) == 2051
    assert measured_throughput("ncf", (4, 4, 4, 4), 4096)[0] == rows[2051]


def test_errors_and_helpers():
    with pytest.raises(DlschedError, match="resnet50"):
        measured_iter_time("resnet50", (1,), 64)
    with pytest.raises(ValueError):
        measured_iter_time("bert", (0, 0), 64)
    assert packed_placement(10, 4) == (4, 4, 2) and packed_placement(8, 4) == (4, 4)
    assert measured_iter_time("BERT", (1,), 12) == measured_iter_time("bert", (1,), 12)


# -- the speed model ----------------------------------------------------------------------------

def test_profile_uses_measurements_on_t4_and_keeps_traffic():
    cl = load_cluster("pollux")
    job = _job(model="cifar10", workers=3, batch_size=384)
    prof = SpeedModel(cl).profile(job, _pl(0, 0, 1))
    assert prof.measured and prof.link_bytes == {}           # no max-min link sharing
    assert prof.iter_time({}) == measured_iter_time("cifar10", (2, 1), 384)
    analytic = SpeedModel(cl, SpeedParams(measured=False)).profile(job, _pl(0, 0, 1))
    assert not analytic.measured and analytic.link_bytes
    assert prof.nic_bytes == analytic.nic_bytes > 0          # traffic accounting kept
    assert prof.cross_rack_bytes == analytic.cross_rack_bytes
    # the order of the nodes is the order of the tasks: (1, 2) here, the same rotation class
    assert SpeedModel(cl).profile(job, _pl(0, 1, 1)).iter_time({}) == measured_iter_time("cifar10", (1, 2), 384)


def test_measurements_only_for_t4_allreduce_pollux_apps():
    t4 = SpeedModel(load_cluster("pollux"))
    v100 = SpeedModel(load_cluster("seed002"))
    job = _job(model="bert", workers=2, batch_size=24)
    assert t4.profile(job, _pl(0, 1)).measured
    assert not v100.profile(job, _pl(0, 1)).measured           # measured on T4s only
    assert not t4.profile(_job(model="resnet50", workers=2), _pl(0, 1)).measured
    ps = _job(model="bert", workers=2, ps=1, comm="ps", batch_size=24)
    pl = (TaskPlacement(0, 0, (0,)), TaskPlacement(1, 1, (0,)), TaskPlacement(2, 2, ()))
    assert not t4.profile(ps, pl).measured
    assert t4.profile(_job(model="ncf", workers=1, comm="none", batch_size=256), _pl(0)).measured


def test_single_gpu_job_takes_n_times_the_measured_step():
    n = 1000
    job = _job(model="cifar10", workers=1, batch_size=128, iterations=n)
    r = dlsched.simulate("pollux", [job], "fifo")
    assert r.jobs.jct_s[0] == pytest.approx(n * measured_iter_time("cifar10", (1,), 128), rel=1e-12)


def test_duration_jobs_ideal_is_the_packed_measured_time():
    cl = load_cluster("pollux")
    job = job_from_row(dict(job_id="d", submit_time_s=0, model="bert", workers=2, batch_size=24,
                            duration_s=1000.0))
    sm = SpeedModel(cl)
    packed = sm.profile(job, _pl(0, 0))
    spread = sm.profile(job, _pl(0, 1))
    assert not packed.iteration_based
    assert packed.ideal_iter_s == measured_iter_time("bert", (2,), 24) == packed.iter_time({})
    assert packed.rate({}) == pytest.approx(1.0)
    assert spread.rate({}) == pytest.approx(measured_iter_time("bert", (2,), 24)
                                            / measured_iter_time("bert", (1, 1), 24))


def test_pollux_workload_runs_measured_by_default():
    res = dlsched.simulate("pollux", "pollux-6", "fifo")
    off = dlsched.simulate("pollux", "pollux-6", "fifo", speed=SpeedParams(measured=False))
    assert res.summary["finished"] == off.summary["finished"] == 160
    assert res.summary["mean_jct_s"] != pytest.approx(off.summary["mean_jct_s"], rel=1e-3)
    assert res.summary["nic_bytes"] > 0                      # traffic still counted
    j = res.jobs.set_index("job_id")
    o = off.jobs.set_index("job_id")
    assert (j.jct_s - o.loc[j.index, "jct_s"]).abs().max() > 1.0


def test_speed_config_switch(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("measured: false\n")
    assert load_speed_config(f).measured is False
    f.write_text("overlap: 0.3\n")
    assert load_speed_config(f).measured is True
    from dlsched.core.errors import ConfigError
    f.write_text("measured: maybe\n")
    with pytest.raises(ConfigError, match="measured"):
        load_speed_config(f)
