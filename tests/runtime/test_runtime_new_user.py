"""The runtime as a new user found it (issue "The runtime as a new user found it"): what submit
refuses, where a job runs, what a suspend says and what the listing shows, on the real runtime
(the session's server and Ray cluster)."""
from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from conftest import digits_spec

PLUGINS = Path(__file__).parent / "plugins"


def _spec(tmp_path: Path, name: str, **fields) -> Path:
    import yaml
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"name": name, "batch_size": 8, "iterations": 4, **fields}))
    return p


def _own(**args) -> dict:
    return {"name": "own", "entry": str(PLUGINS / "own_loop.py"), "args": args, "workers": 1,
            "batch_size": 8, "iterations": 400}


def _cancel_live(s) -> None:
    live = [j["job_id"] for j in s.get("/jobs") if j["state"] in ("queued", "starting", "running", "suspended", "held")]
    for jid in live:
        s.post(f"/jobs/{jid}/cancel")


def test_submit_refuses_on_one_line_what_can_never_run(runtime, tmp_path):
    """Defects 3 and 4: oversized jobs and programs without main are refused at submit (exit
    2, one line naming the file and field); nothing is queued."""
    s = runtime.ensure("fifo")
    before = len(s.get("/jobs"))
    (tmp_path / "nomain.py").write_text("def train(ctx):\n    pass\n")
    (tmp_path / "broken.py").write_text("def main(ctx)\n    pass\n")
    prog = str(PLUGINS / "own_loop.py")
    cases = [
        (_spec(tmp_path, "huge", entry=prog, gpus_per_worker=100000), "field 'gpus_per_worker'", "largest node has 2"),
        (_spec(tmp_path, "wide", entry=prog, workers=10, batch_size=10), "field 'workers'", "the cluster has 8"),
        (_spec(tmp_path, "nomain", entry="nomain.py"), "field 'entry'", "defines no top-level main()"),
        (_spec(tmp_path, "broken", entry="broken.py"), "field 'entry'", "line 1: the program does not parse"),
        (_spec(tmp_path, "nomod", entry="dlsched_no_such_pkg.mod:main"), "field 'entry'", "cannot import"),
    ]
    for path, field, why in cases:
        r = s.cli("submit", str(path), check=False)
        err = r.stderr.strip()
        assert r.returncode == 2 and len(err.splitlines()) == 1, (path.name, r.stdout, r.stderr)
        assert path.name in err and field in err and why in err, err
    # the API refuses the same (a client that skips the CLI's own check)
    r = s.post("/jobs", {"spec": {"name": "huge", "entry": prog, "gpus_per_worker": 64, "batch_size": 8,
                                  "iterations": 4}})
    assert r.status_code == 422 and "largest node has 2" in r.json()["detail"]
    assert len(s.get("/jobs")) == before


def test_a_program_that_cannot_load_fails_at_once(runtime):
    """Defect 4: an import error is the same on every attempt: failed after one, not three."""
    s = runtime.ensure("fifo")
    jid = s.submit({"name": "cannot-load", "entry": str(PLUGINS / "cannot_load.py"), "workers": 1,
                    "batch_size": 8, "iterations": 4})
    j = s.wait(jid, lambda j: j["state"] == "failed", 120, "failed")
    assert j["attempts"] == 1 and "ModuleNotFoundError" in j["error"], j


def test_jobs_run_in_their_own_private_directory(runtime, tmp_path):
    """Defect 5: a relative path is the job's own (under the state dir, 0700), never the
    server's working directory; a spec's `workdir` is used as given."""
    s = runtime.ensure("fifo")
    a = s.submit(_own(steps=2, step_s=0.01) | {"iterations": 2})
    wd = tmp_path / "mine"
    wd.mkdir()
    b = s.submit(_own(steps=2, step_s=0.01) | {"iterations": 2, "workdir": str(wd)})
    for jid in (a, b):
        s.wait_state(jid, "done", 120)
    own = runtime.state_dir / "work" / a
    assert (own / "out.txt").read_text().strip() == str(own)
    assert stat.S_IMODE(os.stat(own).st_mode) == 0o700
    assert (wd / "out.txt").read_text().strip() == str(wd)
    assert not (Path(os.getcwd()) / "out.txt").exists()


def test_suspend_says_suspended_by_whom_then_resume_queues(runtime):
    """Defect 7: `suspended` (by whom, when) after suspend, `queued` while a resumed job waits."""
    s = runtime.ensure("fifo")
    _cancel_live(s)
    b = s.submit(digits_spec(name="susp", iterations=100000, args={"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.02}))
    s.wait(b, lambda j: j["state"] == "running" and j["step"] >= 5, what="step 5")
    out = s.cli("job", "suspend", b).stdout
    assert out.startswith(f"{b} suspended at step") and len(out.strip().splitlines()) == 1, out
    j = s.get(f"/jobs/{b}")
    assert j["state"] == "suspended" and j["reason"].startswith("suspended by admin at "), j
    blocker = s.submit(digits_spec(name="blocker", workers=4, gpus_per_worker=2, iterations=100000,
                                   args={"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.02}))
    s.wait_state(blocker, "running", 150)
    r = s.cli("job", "resume", b, "--json")
    assert '"state": "queued"' in r.stdout
    time.sleep(1.0)
    j = s.get(f"/jobs/{b}")
    assert j["state"] == "queued" and j["queue_position"] == 1 and j["waiting_reason"], j
    listing = s.cli("jobs", "--state", "queued").stdout
    assert b in listing and blocker not in listing and "#1:" in listing, listing
    s.post(f"/jobs/{blocker}/cancel")
    s.wait_state(b, "running", 150)
    s.post(f"/jobs/{b}/cancel")


def test_a_program_with_its_own_loop_is_stopped_at_once_and_says_what_is_lost(runtime):
    """Defect 9: no 30 s wait, the answer says the program cannot stop cleanly and how many
    steps are lost; the progress shown is the last one reported."""
    s = runtime.ensure("fifo")
    jid = s.submit(_own(steps=400, step_s=0.05))
    s.wait(jid, lambda j: j["state"] == "running" and j["step"] >= 20, 120, "step 20")
    t0 = time.monotonic()
    r = s.post(f"/jobs/{jid}/suspend").json()
    assert time.monotonic() - t0 < 10, "the suspend waited for a stop that cannot come"
    assert r["state"] == "suspended" and r["clean"] is False and r["lost_steps"] >= 20, r
    assert "never calls ctx.steps" in r["detail"] and f"{r['lost_steps']} steps" in r["detail"]
    j = s.get(f"/jobs/{jid}")
    assert j["state"] == "suspended" and j["step"] >= r["lost_steps"] and j["step"] == r["step"], j
    assert "stopped without a checkpoint" in j["reason"]
    s.post(f"/jobs/{jid}/cancel")


def test_migrate_refuses_to_move_a_job_onto_itself(runtime):
    """Defect 2: no restart when nothing would move; 409 with the reason (CLI: exit 1)."""
    s = runtime.ensure("fifo")
    _cancel_live(s)
    jid = s.submit(digits_spec(name="stay", workers=1, batch_size=32, iterations=100000,
                               args={"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.02}))
    j = s.wait(jid, lambda j: j["state"] == "running" and j["step"] >= 3, what="step 3")
    node = j["allocation"][0]["node"]
    r = s.cli("job", "migrate", jid, "--nodes", node, check=False)
    assert r.returncode == 1 and f"already on {node}" in r.stderr, r.stderr
    # every other node full: with no --nodes there is nowhere else to go
    blocker = s.submit(digits_spec(name="fill", workers=3, gpus_per_worker=2, batch_size=63, iterations=100000,
                                   args={"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.02}))
    s.wait_state(blocker, "running", 150)
    r = s.post(f"/jobs/{jid}/migrate", {})
    assert r.status_code == 409 and "no other node fits" in r.json()["detail"], r.text
    assert s.get(f"/jobs/{jid}")["attempts"] == j["attempts"]
    for x in (blocker, jid):
        s.post(f"/jobs/{x}/cancel")


def test_a_placed_job_whose_ranks_start_shows_starting(runtime):
    """Defect 8: a placed job whose ranks have not started is `starting`, with how long it has
    waited for them (eight ranks on one node: more than its warm workers, so some start cold)."""
    s = runtime.ensure("fifo")
    jid = s.submit(digits_spec(name="many-ranks", workers=8, gpus_per_worker=0.25, cpus_per_worker=0,
                               batch_size=64, iterations=30))
    seen = []
    while True:
        j = s.get(f"/jobs/{jid}")
        seen.append((j["state"], j.get("waiting_reason") or "", j.get("starting_s")))
        if j["state"] in ("running", "done"):
            break
        assert j["state"] != "failed", j
        time.sleep(0.05)
    starting = [x for x in seen if x[0] == "starting"]
    assert starting, seen
    assert all("ranks not started" in why and isinstance(t, float) for _, why, t in starting), starting
    assert not [x for x in seen if x[0] == "queued" and not x[1]], "a queued job without a reason"
    out = s.cli("jobs", "--state", "running,done,starting").stdout
    assert jid in out
    s.wait_state(jid, "done", 120)


def test_report_states_and_the_wait_until_the_first_step(runtime, tmp_path):
    """Defect 6: jobs.parquet names a cancelled job `cancelled` and a suspended one `suspended`
    (the words of `dlsched jobs`); the time from placement to the first step is `starting_s`,
    so wait_s + starting_s is the time to first progress, on both backends."""
    import pandas as pd
    s = runtime.ensure("fifo")
    _cancel_live(s)
    done = s.submit(digits_spec(name="rep-done", iterations=20))
    held = s.submit(digits_spec(name="rep-susp", iterations=100000, args={"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.02}))
    gone = s.submit(digits_spec(name="rep-cancel", iterations=100000, args={"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.02}))
    s.wait_state(done, "done", 120)
    for jid in (held, gone):
        s.wait(jid, lambda j: j["state"] == "running" and j["step"] >= 3, what="step 3")
    s.post(f"/jobs/{held}/suspend")
    s.post(f"/jobs/{gone}/cancel")
    out = tmp_path / "rep"
    s.cli("report", "--out", str(out))
    t = pd.read_parquet(out / "jobs.parquet").set_index("job_id")
    assert (t.loc[done, "state"], t.loc[held, "state"], t.loc[gone, "state"]) == ("done", "suspended", "cancelled")
    for jid in (done, held, gone):
        r = t.loc[jid]
        assert r.starting_s >= 0 and abs(r.wait_s + r.starting_s - r.ttfp_s) < 1e-6, r
    s.post(f"/jobs/{held}/cancel")
    # the listing's filters and the log's tail, on the same jobs
    assert "step " not in s.cli("logs", done, "--tail", "0").stdout
    assert "step " in s.cli("logs", done, "--tail", "1").stdout
    assert done in s.cli("jobs", "--user", "default", "--since", "1h").stdout
    assert done not in s.cli("jobs", "--user", "nobody").stdout
