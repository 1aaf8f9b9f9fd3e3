"""The real runtime, hardened: rounds after a restart, policy errors contained, reads behind the
token, private state, bounded inputs, one server per state dir, the programs' own output."""
from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import httpx

from conftest import ServerProc, digits_spec

PLUGINS = Path(__file__).parent / "plugins"


def printer_spec(**over) -> dict:
    spec = {"name": "printer", "entry": str(PLUGINS / "printer.py"), "args": {}, "workers": 2,
            "gpus_per_worker": 1, "batch_size": 2, "iterations": 20, "checkpoint_every": 5}
    spec.update(over)
    return spec


def test_restarted_server_runs_a_round_at_once(runtime):
    """A job left queued in the store by a crash (accepted, never handed to the scheduler) and a
    running job: after kill -9 and a restart, the queued job starts within 5 s, and the periodic
    round fires with no event at all."""
    from dlsched.runtime.store import Store
    s = runtime.server
    long = s.submit(digits_spec(name="long", iterations=100000, workers=1))
    s.wait_state(long, "running")
    s.kill9()
    st = Store(runtime.state_dir / "dlsched.db")
    from dlsched.runtime.spec import job_spec_from_dict
    queued = st.add_job(job_spec_from_dict(digits_spec(name="orphan", workers=1)).to_dict(), time.time())
    st.close()
    s2 = ServerProc(runtime.cluster.address, runtime.state_dir, "fifo", "t", extra=["--round-s", "1"]).start()
    runtime.server = s2
    t0, wall0 = time.monotonic(), time.time()
    jobs = [long, queued]
    try:
        j = s2.wait(queued, lambda j: j["start_time"] is not None, timeout=5, what="started")
        assert time.monotonic() - t0 <= 5.0 and j["start_time"] - wall0 <= 5.0
        gpus = int(sum(n["gpus"] for n in s2.get("/nodes") if n["up"]))
        big = s2.submit(digits_spec(name="big", workers=gpus, batch_size=8 * gpus))   # waits: "long" holds a GPU
        jobs.append(big)
        time.sleep(1.0)
        r0 = s2.get("/metrics/scheduler")["rounds"]
        # nothing happens meanwhile: only the periodic round (every 1 s) moves the count. Waited
        # for, not slept for (a loaded machine runs the server's loop late). Once the periodic
        # round stopped for good here, 1 run in 3 of the suite: a wake that came due while its
        # batch was handled was stamped too early (runtime/wakes.py; test_runtime_core)
        t1 = time.monotonic()
        while s2.get("/metrics/scheduler")["rounds"] < r0 + 2 and time.monotonic() - t1 < 30:
            time.sleep(0.5)
        assert s2.get("/metrics/scheduler")["rounds"] >= r0 + 2, s2.log_tail()
        assert s2.get(f"/jobs/{big}")["state"] == "queued"
    finally:
        # whatever failed, leave nothing to the next test on this store: a queued job asking
        # for every GPU would block its jobs behind it
        for j in jobs:
            s2.post(f"/jobs/{j}/cancel")


def test_policy_error_holds_the_job_and_scheduling_goes_on(runtime, tmp_path):
    """A policy that raises on one job: that job is held with the reason (API and `dlsched jobs`),
    the others run; an error about no job keeps the previous plan and says so."""
    env = {"DLSCHED_PLUGINS": "dlsched_test_faulty",
           "PYTHONPATH": os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")])}
    sd = tmp_path / "faulty"
    sd.mkdir()
    s = ServerProc(runtime.cluster.address, sd, "fifo-faulty", "faulty", env=env).start()
    try:
        bad = s.submit(printer_spec(name="bad", model="explode"))
        good = s.submit(printer_spec(name="good", workers=1))
        j = s.wait_state(bad, "held", timeout=60)
        assert "policy fifo-faulty failed on this job" in j["reason"] and "ValueError" in j["reason"]
        s.wait_state(good, "done", timeout=120)
        assert any(e["kind"] == "policy_error" for e in s.get(f"/jobs/{bad}/events"))
        out = s.cli("jobs", env=env).stdout
        assert "held" in out and "policy fifo-faulty failed" in out
        assert s.proc.poll() is None                            # the server lives on
        boom = s.submit(printer_spec(name="boom", model="boom", workers=1))
        t0 = time.monotonic()
        while not any(e["job_id"] is None for e in s.get("/metrics/scheduler")["round_errors"]):
            assert time.monotonic() - t0 < 30, s.log_tail()
            time.sleep(0.3)
        assert "not attributable to one job" in s.log_tail(20000)
        assert s.get(f"/jobs/{boom}")["state"] == "queued"       # previous plan: nothing changed
        s.post(f"/jobs/{boom}/cancel")
        nxt = s.submit(printer_spec(name="next", workers=1))
        s.wait_state(nxt, "done", timeout=120)                   # and scheduling goes on
    finally:
        s.stop()


def test_a_cold_start_does_not_hold_the_scheduler(runtime, tmp_path):
    """No warm workers: every rank starts in a new process that imports torch, seconds late. The
    scheduler thread does not wait for it: a command sent while a job's ranks are starting is
    answered before they have started (it used to wait behind the whole start), and the job then
    runs to its end."""
    sd = tmp_path / "cold"
    sd.mkdir()
    s = ServerProc(runtime.cluster.address, sd, "fifo", "cold", warm=0, extra=["--cleanup-on-exit"]).start()
    try:
        a = s.submit(digits_spec(name="a", iterations=20, workers=2))
        t0 = time.monotonic()
        while s.get(f"/jobs/{a}")["attempts"] < 1:       # the start is issued
            assert time.monotonic() - t0 < 30, s.log_tail()
            time.sleep(0.02)
        gpus = int(sum(n["gpus"] for n in s.get("/nodes") if n["up"]))
        b = s.submit(digits_spec(name="b", workers=gpus, batch_size=8 * gpus))   # waits: "a" holds 2
        r = s.post(f"/jobs/{b}/cancel")                 # through the scheduler thread's queue
        assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
        ja = s.get(f"/jobs/{a}")
        assert ja["state"] != "running" and ja["start_time"] is None, ja     # still starting
        s.wait_state(a, "done", timeout=180)
        kinds = [e["kind"] for e in s.get(f"/jobs/{a}/events")]
        assert kinds.count("started") == 1 and "start_failed" not in kinds, kinds
    finally:
        s.stop()


def test_every_read_needs_the_token(runtime):
    s = runtime.server
    j = s.submit(digits_spec(name="secret", iterations=10, workers=1))
    for path in ("/jobs", f"/jobs/{j}", f"/jobs/{j}/stats", f"/jobs/{j}/events", f"/jobs/{j}/output",
                 "/nodes", "/allocations", "/timeline", "/metrics", "/metrics/scheduler"):
        r = httpx.get(s.url + path, timeout=30)
        assert r.status_code == 401, (path, r.status_code)
        r = httpx.get(s.url + path, timeout=30, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401, path
        assert httpx.get(s.url + path, timeout=30, headers={"Authorization": f"Bearer {s.token}"}).status_code == 200
    assert httpx.get(s.url + "/health", timeout=30).status_code == 200
    s.wait_state(j, "done")


def test_state_dir_and_its_files_are_private(runtime):
    s = runtime.server
    j = s.submit(digits_spec(name="private", iterations=30, workers=1))
    s.wait_state(j, "done")
    sd = runtime.state_dir
    assert stat.S_IMODE(sd.stat().st_mode) == 0o700
    files = [p for p in sd.rglob("*") if p.is_file() and not p.name.startswith("server-")]
    names = {p.name for p in files}
    assert {"dlsched.db", "token", "server.lock"} <= names and any(p.suffix == ".pt" for p in files)
    assert any(p.name.startswith("rank-") for p in files)
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, f"{p} is {oct(p.stat().st_mode)}"


def test_oversized_and_malicious_inputs_are_refused_at_once(runtime, tmp_path):
    s = runtime.server
    t0 = time.monotonic()
    try:
        r = httpx.post(s.url + "/jobs", content=b"x" * (3 * 1024 ** 2), timeout=30,
                       headers={"Authorization": f"Bearer {s.token}", "content-type": "application/json"})
        assert r.status_code == 413
    except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
        pass     # refused before the body was read: the server answered 413 and closed while we sent
    big = digits_spec(args={"blob": "y" * (1024 ** 2 + 10)})
    r = s.post("/jobs", {"spec": big})
    assert r.status_code == 413 and "limit" in r.json()["detail"]
    assert time.monotonic() - t0 < 10
    n_jobs = len(s.get("/jobs"))
    # the CLI: a spec file over 1 MiB and an alias bomb, one line each, exit 2, nothing sent
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: huge\nentry: x.py\nbatch_size: 1\niterations: 1\nargs: {blob: '" + "z" * (1024 ** 2) + "'}\n")
    bomb = tmp_path / "bomb.yaml"
    lines = ["name: bomb", "entry: x.py", "batch_size: 1", "iterations: 1", 'l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    bomb.write_text("\n".join(lines) + "\n")
    for f, what in ((huge, "limit is 1048576"), (bomb, "expands to more than")):
        t0 = time.monotonic()
        r = s.cli("submit", str(f), check=False)
        assert r.returncode == 2 and what in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and str(f) in r.stderr
        assert time.monotonic() - t0 < 30
    assert len(s.get("/jobs")) == n_jobs


def test_a_second_server_on_the_state_dir_is_refused(runtime):
    s = runtime.server
    other = ServerProc(runtime.cluster.address, runtime.state_dir, "fifo", "t")
    r = subprocess.run(other.cmd(), capture_output=True, text=True, timeout=120,
                       env={**os.environ, "DLSCHED_STATE_DIR": str(runtime.state_dir)})
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"pid {s.proc.pid}" in r.stderr and s.url in r.stderr and "in use by another server" in r.stderr
    assert "Traceback" not in r.stderr
    assert s.get("/health")["pid"] == s.proc.pid


def test_program_output_per_rank_and_the_rank_that_failed(runtime):
    s = runtime.server
    ok = s.submit(printer_spec(name="talk", iterations=12))
    s.wait_state(ok, "done")
    out = s.cli("logs", ok, "--output").stdout
    assert "hello from rank 0 of 2" in out and "hello from rank 1 of 2" in out
    assert "rank 1 warning at step 10" in out                  # stderr too
    r1 = s.get(f"/jobs/{ok}/output", params={"rank": 1})
    assert r1["ranks"] == [0, 1] and "rank 1 step 5" in r1["text"] and "rank 0" not in r1["text"].split("===")[-1]
    bad = s.submit(printer_spec(name="crash", iterations=50, args={"fail_rank": 1, "fail_step": 3}))
    j = s.wait(bad, lambda j: j["state"] == "failed", timeout=180, what="failed")
    assert j["failed_rank"] == 1 and j["reason"].startswith("rank 1 on n")
    assert "failed first: ValueError: rank 1 cannot go on at step 3" in j["error"]
    assert "Traceback (most recent call last)" in j["error"] and "printer.py" in j["error"]
    out = s.cli("logs", bad, "--output", "--rank", "1").stdout
    assert "ValueError: rank 1 cannot go on at step 3" in out
