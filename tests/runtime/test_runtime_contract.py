"""The policy contract on the real runtime: RayBackend declares what it can do, fills the
job_stats vocabulary from what the job really measured, and keeps the scheduler's typed event
log in its store across a restart."""
from __future__ import annotations

import json
import sqlite3

import pandas as pd

from conftest import digits_spec

from dlsched.scheduler.backend import STATS_KEYS


def test_measured_progress_and_the_typed_log_survive_a_restart(runtime):
    s = runtime.server
    jid = s.submit(digits_spec(name="contract", iterations=4000, checkpoint_every=200))
    s.wait(jid, lambda j: j["state"] == "running" and j["step"] >= 300, 120, "300 steps")
    p = s.get(f"/jobs/{jid}")["progress"]
    assert p["rate"] > 0 and 0 < p["progress"] < 1 and p["remaining"] == 4000 - p["step"]
    s.post(f"/jobs/{jid}/suspend")
    s.wait_state(jid, "suspended", 60)
    s.post(f"/jobs/{jid}/resume")
    j = s.wait_state(jid, "done", 180)
    p = j["progress"]
    assert set(p) == set(STATS_KEYS)
    assert p["step"] == 4000 and p["remaining"] == 0 and p["progress"] == 1.0 and p["rate"] == 0
    assert p["loss"] is not None and p["first_progress_s"] is not None
    assert p["suspends"] == 1 and p["resumes"] == 1
    assert p["gpu_s"] > 0 and p["switch_lost_s"] > 0          # the restart cost, measured
    log = s.get("/log")
    mine = [r for r in log if r["job_id"] == jid]
    assert [r["kind"] for r in mine] == ["arrival", "launch", "held", "released", "resume", "finish"]
    launch = mine[1]
    assert len(launch["placements"]) == 2 and all(len(tp[2]) == 1 for tp in launch["placements"])
    # the same result files as a simulation, computed from that log
    out = runtime.state_dir / "report-out"
    s.cli("report", "--out", str(out))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["jobs"] >= 1 and summary["finished"] >= 1 and summary["mean_jct_s"] > 0
    assert 0 < summary["gpu_util"] <= 1 and summary["switch_lost_s"] > 0
    jobs = pd.read_parquet(out / "jobs.parquet").set_index("job_id")
    assert jobs.loc[jid, "state"] == "done" and jobs.loc[jid, "preemptions"] == 1 and jobs.loc[jid, "resumes"] == 1
    assert (out / "report.html").stat().st_size > 1000 and (out / "timeline.parquet").exists()
    r = s.cli("report", "--out", str(out), check=False)                   # never mixes two reports
    assert r.returncode == 2 and "not empty" in r.stderr
    # kept in the store: a restarted server serves the same records, and appends after them
    n = len(log)
    s = runtime.restart(kill=True)
    again = s.get("/log")
    assert again[:n] == log
    db = sqlite3.connect(f"file:{runtime.state_dir / 'dlsched.db'}?mode=ro", uri=True)
    assert db.execute("SELECT COUNT(*) FROM schedlog WHERE job_id=?", (jid,)).fetchone()[0] == 6
    db.close()
