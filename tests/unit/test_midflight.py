"""The simulator started mid-flight (dlsched.sim.midflight): running jobs keep their placements
and their past, waiting jobs queue in submission order, and each policy's predictions follow
from the state; the format's errors name the file and the field."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlsched.core.errors import InputError
from dlsched.sim.midflight import load_state, simulate_state

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / "examples" / "whatif" / "state.yaml"


def starts(policy):
    pred = simulate_state(load_state(STATE), policy)
    return pred, {j: (v["start_s"], v["finish_s"]) for j, v in pred.jobs.items()}


def test_fifo_from_the_example_state():
    # a (4 GPUs on node 0) has 300 s left, b (node 1) 1000 s; c needs a 4-GPU node: a's, at 300.
    # d (2 GPUs) fits now on a 2-GPU node but strict FIFO keeps it behind c; e (2 x 2 GPUs)
    # after d, whose node frees at 400.
    pred, s = starts("fifo")
    assert s == {"a": (-500.0, 300.0), "b": (-400.0, 1000.0), "c": (300.0, 500.0), "d": (300.0, 400.0),
                 "e": (400.0, 500.0)}
    # waits from submission: a 100, b 0, c 400, d 350, e 410
    assert pred.mean_wait_s == pytest.approx((100 + 0 + 400 + 350 + 410) / 5)
    assert pred.makespan_s == 1000.0


def test_sjf_starts_the_short_job_that_fits_now():
    _, s = starts("sjf")
    assert s["d"] == (0.0, 100.0) and s["c"] == (300.0, 500.0)


def test_same_state_same_prediction():
    a = simulate_state(load_state(STATE), "tiresias").to_dict()
    b = simulate_state(load_state(STATE), "tiresias").to_dict()
    assert a == b


def test_a_running_job_keeps_its_gpus(tmp_path):
    doc = {"schema": "dlsched-state", "version": 1, "cluster": "seed002", "jobs": [
        {"job_id": "r", "submit_time_s": -10, "workers": 1, "gpus_per_worker": 2, "duration_s": 50,
         "state": "running", "started_s": -5, "placement": [{"task": 0, "node": 2, "gpus": [0, 1]}]},
        {"job_id": "w", "submit_time_s": -1, "workers": 1, "gpus_per_worker": 4, "duration_s": 10}]}
    pred = simulate_state(load_state(doc), "fifo")
    assert pred.jobs["r"]["finish_s"] == 50.0 and pred.jobs["w"]["start_s"] == 0.0


@pytest.mark.parametrize("job,field,text", [
    ({"submit_time_s": 5}, "jobs[0].submit_time_s", "must be <= 0"),
    ({"state": "sleeping"}, "jobs[0].state", "must be one of running, waiting"),
    ({"state": "running", "started_s": -1, "placement": [{"task": 0, "node": "n9", "gpus": [0]}]},
     "jobs[0].placement[0].node", "unknown node 'n9'"),
    ({"state": "running", "started_s": -1, "placement": [{"task": 0, "node": 0, "gpus": [7]}]},
     "jobs[0].placement[0].gpus", "GPU ids"),
    ({"state": "running", "started_s": -1, "placement": []}, "jobs[0].placement", "each of the job's 1 tasks"),
    ({"workers": "two"}, "jobs[0].workers", "number"),
])
def test_bad_state_names_the_field(job, field, text):
    row = {"job_id": "x", "submit_time_s": -1, "workers": 1, "gpus_per_worker": 1, "duration_s": 5, **job}
    with pytest.raises(InputError) as e:
        load_state({"schema": "dlsched-state", "version": 1, "cluster": "seed002", "jobs": [row]})
    assert f"field '{field}'" in str(e.value) and text in str(e.value)


def test_cli_whatif_from_a_state_file(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "dlsched.cli.main", "whatif", *args],
                              capture_output=True, text=True, timeout=120)
    r = run("--state", str(STATE), "-p", "fifo,sjf", "--json")
    assert r.returncode == 0, r.stderr
    ans = json.loads(r.stdout)
    assert ans["policies"]["fifo"]["jobs"]["d"]["start_s"] == 300.0
    assert ans["policies"]["sjf"]["jobs"]["d"]["start_s"] == 0.0
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: dlsched-state\nversion: 1\ncluster: seed002\njobs: [{job_id: x, submit_time_s: 3, duration_s: 1}]\n")
    r = run("--state", str(bad))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "field 'jobs[0].submit_time_s'" in r.stderr
    r = run("--state", str(STATE), "-p", "nope")
    assert r.returncode == 2 and "unknown policy 'nope'" in r.stderr
    r = run("--state", str(STATE), "--horizon", "6x")
    assert r.returncode == 2 and "--horizon" in r.stderr
