"""seed000-batch-size without Ray: the step and epoch figures from step records, the speed
model's fit, the simulator's prediction through its own code path (SpeedParams.models), and the
checks. The real runs take minutes: `dlsched experiment seed000-batch-size` (README)."""
from __future__ import annotations

import pytest

from dlsched.core.types import GPU, Role, TaskPlacement
from dlsched.experiments import EXPERIMENTS
from dlsched.experiments import seed000_batch_size as bs
from dlsched.runtime.spec import job_spec_from_dict
from dlsched.workload.models import ModelProfile
from dlsched.workload.speed import SpeedModel, SpeedParams

TRUE = {"overhead_s": 0.001, "sample_s": 0.00005, "dist_sample_s": 0.0001, "exchange_s": 0.008}


def step_s(mode: str, batch: int, workers: int, p=TRUE) -> float:
    if mode == "alone":
        return p["overhead_s"] + batch * p["sample_s"]
    return p["overhead_s"] + batch / workers * p["dist_sample_s"] + p["exchange_s"]


def points(example: str, p=TRUE, noise: dict | None = None) -> list[dict]:
    out = []
    for mode in bs.MODES:
        for b in bs.BATCHES:
            w, ps = bs.shape(example, mode)
            t = step_s(mode, b, w, p) * (noise or {}).get((mode, b), 1.0)
            out.append({"example": example, "mode": mode, "batch": b, "workers": w, "ps": ps, "runs": 2,
                        "done": 2, "epochs_agree": True,
                        **bs.epoch_figures([t, t * 1.5, t, t], bs.steps_per_epoch(example, b))})
    return out


def test_registered_and_plan():
    assert "seed000-batch-size" in EXPERIMENTS
    runs = bs.plan(2)
    assert len(runs) == 2 * len(bs.EXAMPLES) * len(bs.MODES) * len(bs.BATCHES)
    assert runs[len(runs) // 2:] == runs[:len(runs) // 2][::-1]


@pytest.mark.parametrize("example", list(bs.EXAMPLES))
@pytest.mark.parametrize("mode", bs.MODES)
def test_job_spec_is_a_valid_runtime_spec(example, mode):
    spec = job_spec_from_dict(bs.job_spec(example, mode, 32))
    w, ps = bs.shape(example, mode)
    assert (spec.workers, spec.ps, spec.batch_size) == (w, ps, 32)
    assert spec.iterations == bs.WARM_STEPS + bs.MEASURED_STEPS
    assert spec.args["hidden"] == bs.HIDDEN


def test_step_intervals_and_epochs():
    recs = [{"step": s, "epoch": s // 4, "time": 100.0 + 0.5 * s + (0.25 if s >= 8 else 0.0), "step_s": 0.4}
            for s in range(12)]
    iv = bs.step_intervals(recs, warm=2)
    assert len(iv) == 9                             # steps 3..11, each from the previous record
    assert sorted(set(round(x, 6) for x in iv)) == [0.5, 0.75]
    assert bs.check_epochs(recs, 4) and not bs.check_epochs(recs, 5)
    fig = bs.epoch_figures(iv, 4)
    assert fig["step_s"] == pytest.approx(0.5)      # the lower quartile leaves the slow step out
    assert fig["epoch_s"] == pytest.approx(2.0)
    assert fig["epoch_median_s"] == pytest.approx(2.0) and fig["steps"] == 9


@pytest.mark.parametrize("example", list(bs.EXAMPLES))
def test_fit_recovers_the_speed_model(example):
    fit = bs.fit_speed(points(example))
    for k, v in TRUE.items():
        assert fit[k] == pytest.approx(v, rel=1e-6)
    assert fit["contention"] == pytest.approx(2.0)


@pytest.mark.parametrize("example", list(bs.EXAMPLES))
def test_simulator_predicts_the_epoch_time(example):
    pts = points(example)
    fit = bs.fit_speed(pts)
    sims = bs.predict(example, fit, pts)
    assert set(sims) == {(m, b) for m in bs.MODES for b in bs.BATCHES}
    for p in pts:
        assert sims[(p["mode"], p["batch"])] == pytest.approx(p["epoch_s"], rel=1e-6)


def test_calibrated_nic_carries_the_exchange():
    models, cl = bs.calibrated("ps", TRUE)
    job = bs.sim_job("ps", "distributed", 64, 10)
    assert job.comm == "ps" and job.num_ps == 1 and job.num_workers == 2
    pl = tuple(TaskPlacement(t.index, i, (0,) if t.demand[GPU] else ()) for i, t in enumerate(job.tasks))
    prof = SpeedModel(cl, SpeedParams(models=models, measured=False)).profile(job, pl)
    # the PS's NIC carries both workers' push and pull: the exchange takes the fitted time
    shares = {link: float(cl.nodes[link].nic_gbps) * 1e9 / 8 for link in prof.link_bytes}
    assert prof.iter_time(shares) == pytest.approx(step_s("distributed", 64, 2), rel=1e-6)
    assert [t.role for t in job.tasks] == [Role.WORKER, Role.WORKER, Role.PS]


def test_speed_params_models_come_before_the_zoo():
    own = ModelProfile("alexnet", param_mb=1.0, ms_per_sample=7.0)
    params = SpeedParams(models={"alexnet": own})
    assert params.model("AlexNet") is own
    assert SpeedParams().model("alexnet") is not own and SpeedParams().model("alexnet").param_mb == 244.0


def test_checks_pass_on_the_seed_shape_and_fail_without_it():
    pts = {e: points(e) for e in bs.EXAMPLES}
    fits = {e: bs.fit_speed(pts[e]) for e in bs.EXAMPLES}
    sims = {e: bs.predict(e, fits[e], pts[e]) for e in bs.EXAMPLES}
    res = bs.compare([p for e in bs.EXAMPLES for p in pts[e]], sims, fits)
    assert res.ok, [c for c in res.checks if not c.ok]
    assert any(r["seed 000 (AlexNet, s/epoch)"] == "330 s" for r in res.published)
    # a distributed point far off the line: the 20 % check and the fall both fail for it
    bad = points("ps", noise={("distributed", 128): 3.0})
    fit = bs.fit_speed(bad)
    res = bs.compare(bad, {"ps": bs.predict("ps", fit, bad)}, {"ps": fit})
    failed = {c.text.split(":")[1].strip()[:30] for c in res.checks if not c.ok}
    assert not res.ok
    assert any("within 20%" in c.text for c in res.checks if not c.ok)
    assert any("falls at every doubling" in c.text for c in res.checks if not c.ok), failed
