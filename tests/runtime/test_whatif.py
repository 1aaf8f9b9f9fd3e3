"""What if from the live cluster: the server's state as a simulator state document (GET /state),
each policy run from it (GET /whatif, `dlsched whatif`, `dlsched jobs`' predicted start), and
the history exported as a workload (`dlsched export`). The check that matters: on the embedded
runtime, fifo's predicted start of a queued job is within 20 % (or 30 s) of when it really
starts."""
from __future__ import annotations

import time

from conftest import EXAMPLES


def timed(name: str, workers: int, steps: int) -> dict:
    return {"name": name, "entry": str(EXAMPLES / "timed_steps.py"),
            "args": {"step_s": {"default": 0.1}, "serial": 1.0}, "workers": workers, "gpus_per_worker": 1,
            "batch_size": 16 * workers, "iterations": steps, "checkpoint_every": 50}


def test_fifo_predicts_when_a_queued_job_starts(runtime, tmp_path):
    s = runtime.server
    if s.policy != "fifo":
        s = runtime.restart("fifo")
    gpus = int(sum(n["free_gpus"] for n in s.get("/nodes") if n["up"]))
    big = s.submit(timed("wi-big", gpus, 150))                 # about 15 s of 0.1 s steps
    s.wait(big, lambda j: j["state"] == "running" and j["step"] >= 20, timeout=120, what="step 20")
    small = s.submit(timed("wi-big", 2, 12))                   # the same program: its speed is known
    s.wait(small, lambda j: True)
    pred = None
    for _ in range(50):
        jobs = {j["job_id"]: j for j in s.get("/jobs")}
        if jobs[small]["queue_position"] == 1:
            asked = time.time()
            ans = s.get("/whatif", params={"policies": "fifo,sjf", "horizon": "1h"})
            pred = ans["policies"]["fifo"]["jobs"][small]["start_time"]
            break
        time.sleep(0.2)
    assert pred is not None, "the job never queued"
    assert ans["policies"]["fifo"]["jobs"][big]["start_s"] < 0          # running: started in the past
    # the state document is a valid simulator input
    from dlsched.sim.midflight import load_state
    st = load_state(s.get("/state"))
    assert {j.job_id for j in st.jobs} >= {big, small} and [r.job_id for r in st.running] == [big]
    out = s.cli("jobs").stdout
    assert "predicted_start" in out and "(in " in out
    j = s.wait_state(small, "running", timeout=180)
    real = j["start_time"]
    err = abs(pred - real)
    assert err <= max(30.0, 0.2 * (real - asked)), (pred, real, asked)
    s.wait_state(small, "done", timeout=120)
    # the history as a workload: both jobs, with measured run times, replayable
    path = tmp_path / "history.csv"
    r = s.cli("export", "--out", str(path))
    assert "jobs written" in r.stdout
    from dlsched.workload.io import load_workload
    mine = {w.job_id: w for w in load_workload(path) if w.job_id in (big, small)}
    assert set(mine) == {big, small}
    assert 12 < mine[big].duration_s < 120 and mine[small].submit_time_s > mine[big].submit_time_s
    bad = s.cli("export", "--out", str(tmp_path / "h.txt"), check=False)
    assert bad.returncode == 2 and "cannot tell the format" in bad.stderr
