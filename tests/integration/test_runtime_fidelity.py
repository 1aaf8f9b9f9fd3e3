"""runtime-fidelity end to end, small: 4 jobs under fifo-gang and tiresias on an embedded Ray
cluster (2 nodes x 2 virtual GPUs) through real `dlsched server`s, the calibration read from
their stores, the same jobs in the calibrated simulator, the table and the experiment's files.
The full experiment (16 jobs, five policies) is run by hand: `dlsched experiment
runtime-fidelity`. The first tests need no Ray: the calibration's arithmetic and the calibrated
speed model."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from dlsched.core.types import Role, TaskPlacement
from dlsched.runtime.calibration import SCHEMA, VERSION, merge_calibrations
from dlsched.workload.calibrated import CalibratedSpeedModel, load_calibration

ROOT = Path(__file__).resolve().parents[2]
NODES = [{"name": f"n{i}", "rack": f"r{i // 2}", "gpu_type": "fake-gpu", "gpus": 2, "cpus": 2.0} for i in range(4)]


def _program():
    spec = importlib.util.spec_from_file_location("timed_steps", ROOT / "examples" / "timed_steps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cal(cells: dict, start=(0.2, 0.4), restart=(0.5,), finish=(0.05,)) -> dict:
    from dlsched.runtime.calibration import _cluster_dict, _simulator, _summary
    switch = {"start": {**_summary(list(start)), "by_workers": {}},
              "restart": {**_summary(list(restart)), "by_kind": {"resume": _summary(list(restart))}},
              "stop": _summary([]), "finish": _summary(list(finish))}
    models = {"m": {"fake-gpu": {str(w): {"steps": 10, "intervals": 9, "wall_s": 9 * t, "step_s": t, "iter_s": t}
                                 for w, t in cells.items()}}}
    return {"schema": SCHEMA, "version": VERSION, "created": "", "cluster": _cluster_dict(NODES),
            "source": {"stores": 1, "policies": ["x"], "jobs": 1, "runs": 1},
            "models": models, "switch": switch, "simulator": _simulator(switch)}


def test_program_targets_follow_the_documented_rule():
    p = _program()
    args = {"step_s": {"fake-gpu": 0.4, "default": 1.0}, "serial": 0.25, "comm_s": 0.01}
    assert p.target_step_s(args, "fake-gpu", 1) == pytest.approx(0.4)
    assert p.target_step_s(args, "fake-gpu", 4) == pytest.approx(0.4 * (0.25 + 0.75 / 4) + 0.03)
    assert p.target_step_s(args, "other", 2) == pytest.approx(1.0 * (0.25 + 0.375) + 0.01)
    assert p.gpu_type() == ""                  # outside a rank worker: no Ray started


def test_calibration_merges_exactly_and_sets_the_simulator_delays():
    a, b = _cal({1: 0.3, 2: 0.2}), _cal({1: 0.5, 4: 0.1}, start=(1.0,), restart=(), finish=(0.1,))
    m = merge_calibrations([a, b])
    cell = m["models"]["m"]["fake-gpu"]
    assert cell["1"]["iter_s"] == pytest.approx(0.4) and cell["1"]["steps"] == 20
    assert set(cell) == {"1", "2", "4"}
    assert m["switch"]["start"]["n"] == 3 and m["switch"]["start"]["mean_s"] == pytest.approx(1.6 / 3)
    assert m["simulator"]["start_delay_s"] == pytest.approx(1.6 / 3 + 0.075)
    assert m["simulator"]["restart_delay_s"] == pytest.approx(0.5)
    assert m["source"]["stores"] == 2 and m["cluster"]["nodes"][0]["gpu_type"] == "fake-gpu"
    with pytest.raises(ValueError):
        load_calibration({**m, "version": 99})


def test_calibrated_speed_model_interpolates_and_extrapolates():
    cal = load_calibration(_cal({1: 0.4, 2: 0.25, 4: 0.175}))
    assert cal.iter_time("m", {"fake-gpu"}, 2) == pytest.approx(0.25)
    # 3 workers: linear in 1/w between 2 and 4
    assert cal.iter_time("m", {"fake-gpu"}, 3) == pytest.approx(0.25 + (1 / 3 - 1 / 2) / (1 / 4 - 1 / 2) * (0.175 - 0.25))
    # 8 workers: the a + b/w + c w fit (these points are exactly 0.1 + 0.3 / w)
    assert cal.iter_time("m", {"fake-gpu"}, 8) == pytest.approx(0.1 + 0.3 / 8, rel=1e-3)
    assert cal.iter_time("m", {"T4"}, 1) == pytest.approx(0.4)      # an unmeasured type: the mean
    cl = cal.cluster()
    assert cl.num_nodes == 4 and cl.total_gpus == 8
    from dlsched.core.types import JobSpec, TaskSpec
    job = JobSpec(job_id="j1", submit_time_s=0.0, kind="dl", model="m", comm="allreduce", batch_size=64,
                  iterations=10.0, tasks=tuple(TaskSpec(i, Role.WORKER, (1.0, 0.5, 0, 0, 0)) for i in range(2)))
    sm = CalibratedSpeedModel(cl, cal)
    prof = sm.profile(job, (TaskPlacement(0, 0, (0,)), TaskPlacement(1, 2, (0,))))
    assert prof.iter_time({}) == pytest.approx(0.25) and not prof.link_bytes


@pytest.fixture(scope="module")
def small():
    pytest.importorskip("ray")
    from dlsched.experiments import runtime_fidelity as rf
    jobs = rf.workload(jobs=4, seed=3, mean_gap_s=1.0, iterations=(12, 24))
    return rf.run(policies=("fifo-gang", "tiresias"), jobs=jobs, log=lambda m: None, nodes=2)


def test_small_fidelity_run_end_to_end(small, tmp_path):
    from dlsched.experiments import runtime_fidelity as rf
    from dlsched.experiments.base import write_outputs
    real, sim = small.results["real"], small.results["simulated"]
    assert set(real) == set(sim) == {"fifo-gang", "tiresias"}
    for p in real:
        assert real[p][0].summary["finished"] == 4 and sim[p][0].summary["finished"] == 4
        # a sanity bound only: the full experiment holds 10 %; 4 jobs of a few seconds are at the
        # mercy of one event's order and of the machine's load
        for key in ("mean_jct_s", "makespan_s"):
            assert abs(small.extra["deviations"][p][key]) < 0.5, (p, key, small.published)
    cal = small.extra["calibration"]
    assert cal["schema"] == SCHEMA and cal["source"]["stores"] == 2 and cal["source"]["jobs"] == 8
    assert cal["switch"]["start"]["n"] == 8 and cal["switch"]["finish"]["n"] == 8
    prog = _program()
    for model, per_type in cal["models"].items():
        for w, cell in per_type["fake-gpu"].items():
            target = prog.target_step_s(rf.MODELS[model], "fake-gpu", int(w))
            assert cell["step_s"] == pytest.approx(target, rel=0.05), (model, w, cell)
            assert target <= cell["iter_s"] < target * 1.25 + 0.02, (model, w, cell)
    write_outputs(small, tmp_path)
    written = json.loads((tmp_path / "calibration.json").read_text())
    assert written["models"] == json.loads(json.dumps(cal["models"]))
    assert load_calibration(tmp_path / "calibration.json").start_delay_s == pytest.approx(cal["simulator"]["start_delay_s"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {r["group"] for r in summary["rows"]} == {"real", "simulated"}
    assert any(p["figure"] == "ranking by mean JCT" for p in summary["published"])
    assert (tmp_path / "real" / "report.html").exists() and (tmp_path / "report.html").exists()
