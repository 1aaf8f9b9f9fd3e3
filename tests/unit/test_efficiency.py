"""Statistical efficiency (dlsched.workload.efficiency): Pollux's gain and iterations to target."""
import csv
from pathlib import Path

import pytest

import dlsched
from dlsched.core.errors import DlschedError
from dlsched.workload.efficiency import gain, iterations_to_target, progress_after

PROFILES = Path(dlsched.__file__).parent / "data" / "pollux" / "app-profiles"


def _row(app, bsz, epoch):
    with open(PROFILES / app / f"validation-{bsz}.csv") as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)][epoch]


def test_gain_at_a_profiled_batch_worked_by_hand():
    # cifar10, batch 256 = 2 x the initial 128, epoch 0: grad_sqr 17.379, grad_var 13.938
    # gain = (13.938 + 17.379) / (13.938 / 2 + 17.379) = 31.317 / 24.348 = 1.2862
    r = _row("cifar10", 256, 0)
    assert (round(r["grad_sqr"], 3), round(r["grad_var"], 3)) == (17.379, 13.938)
    assert gain("cifar10", 256, 0) == pytest.approx(1.2862, abs=1e-4)


def test_gain_bounds_and_interpolation():
    for e in (0, 10, 99):
        assert gain("cifar10", 128, e) == pytest.approx(1.0)          # the initial batch: 1
        for b in (256, 1000, 4096):
            assert 1.0 <= gain("cifar10", b, e) <= b / 128 + 1e-12     # never superlinear
    # between two profiled batches the grad stats are linear: at 192 (halfway 128..256)
    lo, hi = _row("cifar10", 128, 3), _row("cifar10", 256, 3)
    sqr, var = (lo["grad_sqr"] + hi["grad_sqr"]) / 2, (lo["grad_var"] + hi["grad_var"]) / 2
    s = 192 / 128
    assert gain("cifar10", 192, 3) == pytest.approx((var + sqr) / (var / s + sqr), rel=1e-12)


def test_iterations_to_target():
    # at the initial batch every iteration is worth one: the target progress itself
    assert iterations_to_target("cifar10", 128) == pytest.approx(progress_after("cifar10", 100))
    # a bigger batch needs fewer iterations but more samples
    its = [iterations_to_target("cifar10", b) for b in (128, 512, 2048, 4096)]
    assert its == sorted(its, reverse=True)
    samples = [i * b for i, b in zip(its, (128, 512, 2048, 4096))]
    assert samples == sorted(samples)
    assert progress_after("cifar10", 0) == 0.0


def test_unknown_application():
    with pytest.raises(DlschedError, match="unknown Pollux application"):
        iterations_to_target("mnist", 64)
