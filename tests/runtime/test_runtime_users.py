"""Users who can touch only their own jobs (issue "Many tenants", section 5), on the real
server: per-user tokens (only their digest stored), 403 with the reason on another user's job
and on a queue the user may not use, operator commands for admins only, the CLI's exit 1 with
the server's reason, and the state dir's token still the first admin's."""
from __future__ import annotations

import sqlite3

import httpx

from conftest import digits_spec

QUEUES = """\
queues:
  - name: team-a
    quotas:
      gpu: {nominal: 4, borrowing_limit: 0}
  - name: team-b
    quotas:
      gpu: {nominal: 4}
"""


def _as(s, token: str, method: str, path: str, body=None) -> httpx.Response:
    return httpx.request(method, s.url + path, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def test_users_touch_only_their_own_jobs(runtime, tmp_path):
    qf = tmp_path / "queues.yaml"
    qf.write_text(QUEUES)
    s = runtime.ensure("fifo", extra=["--queues", str(qf)])
    out = s.cli("user", "add", "alice", "--queues", "team-a").stdout.strip().splitlines()
    alice = out[-1]
    bob = s.cli("user", "add", "bob", "--queues", "team-b,team-a").stdout.strip().splitlines()[-1]
    assert "alice" in out[0] and len(alice) >= 40
    # the store keeps digests only
    db = sqlite3.connect(s.state_dir / "dlsched.db")
    stored = [r[0] for r in db.execute("SELECT token_sha256 FROM users")]
    assert alice not in stored and bob not in stored and len(stored) == 3         # admin, alice, bob
    assert _as(s, alice, "GET", "/whoami").json() == {"name": "alice", "admin": False, "queues": ["team-a"]}

    spec = digits_spec(name="bobs", iterations=100000, args={"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.02})
    r = _as(s, bob, "POST", "/jobs", {"spec": spec})
    assert r.status_code == 201, r.text
    jid = r.json()["job_id"]
    j = s.get(f"/jobs/{jid}")
    assert (j["user"], j["queue"]) == ("bob", "team-b")                 # bob's default queue: his first
    for method, path in (("POST", f"/jobs/{jid}/cancel"), ("POST", f"/jobs/{jid}/suspend"),
                         ("POST", f"/jobs/{jid}/resume"), ("GET", f"/jobs/{jid}"), ("GET", f"/jobs/{jid}/output")):
        r = _as(s, alice, method, path)
        assert r.status_code == 403 and "alice may not touch" in r.json()["detail"] and "bob's" in r.json()["detail"], (path, r.text)
    # the listing is shared; the operator's commands are an admin's
    assert jid in [x["job_id"] for x in _as(s, alice, "GET", "/jobs").json()]
    for method, path, body in (("POST", f"/jobs/{jid}/migrate", {}), ("GET", "/log", None), ("GET", "/export", None),
                               ("POST", "/users", {"name": "mallory", "admin": True}), ("GET", "/users", None)):
        r = _as(s, bob, method, path, body)
        assert r.status_code == 403 and "needs an admin" in r.json()["detail"], (path, r.text)
    # a queue alice may not use; one that does not exist; a job submitted as someone else
    r = _as(s, alice, "POST", "/jobs", {"spec": {**spec, "queue": "team-b"}})
    assert r.status_code == 403 and r.json()["detail"] == "alice may not submit to queue 'team-b' (allowed: team-a)"
    r = _as(s, alice, "POST", "/jobs", {"spec": {**spec, "queue": "team-z"}})
    assert r.status_code == 422 and "unknown queue 'team-z'" in r.json()["detail"]
    r = _as(s, alice, "POST", "/jobs", {"spec": {**spec, "user": "bob"}})
    assert r.status_code == 403 and "as 'bob'" in r.json()["detail"]
    # more than team-a may ever hold (nominal 4, borrowing limit 0): refused at submit, with the numbers
    r = _as(s, alice, "POST", "/jobs", {"spec": {**spec, "workers": 3, "gpus_per_worker": 2, "batch_size": 63}})
    assert r.status_code == 422 and r.json()["detail"].endswith(
        "field 'queue': the job asks 6 GPUs at once; queue team-a's nominal quota plus borrowing limit is 4"), r.text
    # the CLI: the server's reason, exit 1; a user naming an unknown queue: exit 2
    r = s.cli("job", "cancel", jid, check=False, env={"DLSCHED_TOKEN": alice})
    assert r.returncode == 1 and "alice may not touch" in r.stderr, r.stderr
    r = s.cli("user", "add", "carol", "--queues", "team-q", check=False)
    assert r.returncode == 2 and "unknown queue 'team-q'" in r.stderr
    # his own: bob suspends (the reason says who), resumes and cancels it
    r = _as(s, bob, "POST", f"/jobs/{jid}/suspend")
    assert r.status_code == 200 and r.json()["state"] == "suspended", r.text
    assert s.get(f"/jobs/{jid}")["reason"].startswith("suspended by bob at ")
    assert _as(s, bob, "POST", f"/jobs/{jid}/cancel").json()["state"] == "cancelled"
    # the state dir's token is the first admin's: it touches anyone's job
    j2 = _as(s, bob, "POST", "/jobs", {"spec": {**spec, "name": "bobs2"}}).json()["job_id"]
    assert s.post(f"/jobs/{j2}/cancel").json()["state"] == "cancelled"
    runtime.ensure("fifo")                                     # the plain server for the next tests
