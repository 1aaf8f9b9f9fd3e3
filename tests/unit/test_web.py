"""The web view without a browser or Ray: session cookies (dlsched.web.auth), placement intervals
from a typed log (dlsched.web.placements), and `dlsched view`'s app on a small simulated run:
login, logout, what a request without a session gets, and the data the pages read."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from dlsched.cli.main import main
from dlsched.web import placements
from dlsched.web.auth import Sessions
from dlsched.web.replay import Run, make_view_app

TOKEN = "t" * 43


def test_sessions_sign_expire_and_revoke():
    s = Sessions(TOKEN, 8470, lifetime_s=100)
    v = s.issue(now=1000)
    assert TOKEN not in v and s.valid(v, now=1050) and not s.valid(v, now=1101)
    exp, nonce, sig = v.split(".")
    assert not s.valid(f"{int(exp) + 10**6}.{nonce}.{sig}", now=1050)       # a longer life is not signed
    assert not Sessions("other" * 9, 8470).valid(v, now=1050)                # another token, another key
    assert not Sessions(TOKEN, 8470, lifetime_s=100).valid(v, now=1050)     # a restarted server: new salt
    for bad in (None, "", "x", "1.2", "a.b.c", "9" * 300, f"{exp}.{nonce}.{sig}é"):
        assert not s.valid(bad, now=1050)
    s.revoke(v, now=1050)
    assert not s.valid(v, now=1050) and s.valid(s.issue(now=1000), now=1050)


def test_sessions_open_reads_only_and_the_token_everything():
    s = Sessions(TOKEN, 8470)
    v = s.issue()
    assert s.authorized("GET", None, v) and s.authorized("HEAD", None, v)
    assert not s.authorized("POST", None, v)
    assert s.authorized("POST", TOKEN, None)
    assert not s.authorized("GET", "wrong", None) and not s.authorized("GET", None, None)
    assert not s.token_ok(TOKEN + "x") and not s.token_ok("x" * 10_000) and s.token_ok(f" {TOKEN}\n")
    assert Sessions(TOKEN, 8470).cookie != Sessions(TOKEN, 8471).cookie      # cookies are not per port


def test_intervals_follow_launch_migrate_suspend_and_task_finish():
    rows = [
        {"time_s": 1, "kind": "launch", "job_id": "a", "detail": "", "placements": [[0, 0, [0]], [1, 1, [0, 1]]]},
        {"time_s": 2, "kind": "migrate", "job_id": "a", "detail": "", "placements": "[[0, 1, [1]]]"},
        {"time_s": 3, "kind": "resume", "job_id": "b", "detail": "", "placements": [[0, 0, [0]]]},
        {"time_s": 4, "kind": "suspend", "job_id": "a", "detail": "", "placements": []},
        {"time_s": 5, "kind": "launch", "job_id": "c", "detail": "", "placements": [[0, 7, []], [1, 0, [1]]]},
        {"time_s": 6, "kind": "task_finish", "job_id": "c", "detail": "1", "placements": []},
    ]
    ivs = placements.intervals(rows, ["n0", "n1"], offset=100)
    got = [(i["job_id"], i["task"], i["node"], i["gpus"], i["start"], i["end"]) for i in ivs]
    assert got == [("a", 0, "n0", [0], 101, 102), ("a", 1, "n1", [0, 1], 101, 102), ("a", 0, "n1", [1], 102, 104),
                   ("b", 0, "n0", [0], 103, None), ("c", 0, "node 7", [], 105, None), ("c", 1, "n0", [1], 105, 106)]
    now = placements.at(ivs, 103.5)
    assert placements.gpu_load(now, [("n0", 2), ("n1", 2)]) == {"n0": [1, 0], "n1": [0, 1]}
    assert placements.allocations(now) == {"a": [{"rank": 0, "node": "n1", "gpu_ids": [1]}],
                                           "b": [{"rank": 0, "node": "n0", "gpu_ids": [0]}]}
    keep, cut = placements.select(ivs, since=104.5, limit=1)
    assert cut and [(i["job_id"], i["task"]) for i in keep] == [("c", 1)]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("view") / "run"
    assert main(["simulate", "-c", "seed002", "-w", "sample", "-p", "fifo", "--out", str(out)]) == 0
    return out


@pytest.fixture
def client(run_dir):
    sessions = Sessions(TOKEN, 8471)
    c = TestClient(make_view_app(Run(run_dir), sessions), base_url="http://127.0.0.1:8471")
    c.cookie_name = sessions.cookie
    return c


def test_view_needs_a_session_and_refuses_a_wrong_token(client):
    r = client.get("/")
    assert r.status_code == 200 and 'name="token"' in r.text and "app.js" not in r.text
    assert "script-src 'self'" in r.headers["content-security-policy"] and r.headers["cache-control"] == "no-store"
    for path in ("/jobs", "/nodes", "/timeline", "/allocations", "/web/config", "/jobs/job-00/events"):
        assert client.get(path).status_code == 401, path
    r = client.post("/login", data={"token": "wrong"}, follow_redirects=False)
    assert r.status_code == 401 and "not the token" in r.text and "set-cookie" not in r.headers
    assert client.get("/login", params={"token": "wrong"}, follow_redirects=False).status_code == 401
    assert client.post("/login", content=b"token=" + b"x" * 5000,
                       headers={"content-type": "application/x-www-form-urlencoded"}).status_code == 413
    client.cookies.set(client.cookie_name, "1.2.3")
    assert client.get("/jobs").status_code == 401


def test_view_login_cookie_data_and_logout(client):
    r = client.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(client.cookie_name + "=") and TOKEN not in cookie
    assert all(f in cookie for f in ("HttpOnly", "SameSite=strict", "Path=/", "Max-Age="))
    assert "app.js" in client.get("/").text
    cfg = client.get("/web/config").json()
    assert cfg["mode"] == "replay" and cfg["title"] == "fifo on seed002 / sample" and cfg["t_max"] > cfg["t_min"]

    jobs = client.get("/jobs").json()
    assert len(jobs) == 60 and jobs[0]["job_id"] == "job-00" and jobs[0]["state"] == "done"
    t = 5000.0
    nodes = client.get("/nodes", params={"t": t}).json()
    allocs = client.get("/allocations", params={"t": t}).json()
    assert [n["name"] for n in nodes] == ["v100x4-0", "v100x4-1", "v100x2-0", "v100x2-1"]
    held = {(r["node"], g) for ranks in allocs.values() for r in ranks for g in r["gpu_ids"]}
    assert held == {(n["name"], g) for n in nodes for g, k in enumerate(n["gpu_load"]) if k}
    tl = client.get("/timeline").json()
    assert not tl["truncated"] and {i["job_id"] for i in tl["intervals"]} == {j["job_id"] for j in jobs}
    j = allocs and next(iter(allocs))
    assert client.get(f"/timeline?job_id={j}").json()["intervals"][0]["job_id"] == j
    assert client.get(f"/jobs/{j}/stats").json()[0]["rate"] > 0
    assert [e["kind"] for e in client.get(f"/jobs/{j}/events").json()][0] == "arrival"
    assert client.get("/jobs/nope").status_code == 404

    assert client.post("/logout", follow_redirects=False).status_code == 303
    assert client.get("/jobs").status_code == 401


def test_view_link_login_and_static_files(client):
    r = client.get("/login", params={"token": TOKEN}, follow_redirects=False)
    assert r.status_code == 303 and "HttpOnly" in r.headers["set-cookie"]
    for f in ("app.js", "app.css", "vendor/chart.umd.min.js", "vendor/chart.js-LICENSE.md"):
        assert client.get(f"/web/static/{f}").status_code == 200, f


def test_view_refuses_what_is_not_a_run(tmp_path, run_dir, capsys):
    assert main(["view", str(tmp_path / "nothing")]) == 2
    assert "not a folder" in capsys.readouterr().err
    cmp = tmp_path / "cmp"
    (cmp / "fifo").mkdir(parents=True)
    for f in run_dir.iterdir():
        (cmp / "fifo" / f.name).write_bytes(f.read_bytes())
    assert main(["view", str(cmp)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"dlsched view {cmp / 'fifo'}" in err
    (cmp / "fifo" / "log.parquet").unlink()
    assert main(["view", str(cmp / "fifo")]) == 2
    assert "no log.parquet" in capsys.readouterr().err
