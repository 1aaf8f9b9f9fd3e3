"""What a tenant sees of the queues (issue "Many tenants", section 4), on the real server with
quotas (`--queues` with team-a and team-b, nominal 4 GPUs each, on the 8 GPUs; kueue): GET
/queues, a queue's waiting jobs with their places and reasons (GET /queues/{q}/pending, paged),
the 404 and 422 answers, `dlsched queues [QUEUE]` (its table, --json, a typo in the queue's
name: the server's reason, exit 1), the per-queue Prometheus series (promtool-clean, with a
reclaim counted), and the web view's Queues page. The same routes without Ray, on a tree with an
inner queue and on a server without --queues (the one `default` queue), at the end."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from html import escape
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from conftest import digits_spec, team_queues_server

SLOW = {"iterations": 100000, "args": {"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.2}}


def _kueue_server(runtime, tmp):
    """The server with the shared two-team queues (conftest.TEAM_QUEUES, kueue)."""
    return team_queues_server(runtime)


def _get(s, path: str, **params) -> httpx.Response:
    return httpx.get(s.url + path, params=params, headers={"Authorization": f"Bearer {s.token}"}, timeout=60)


def _wait(pred, what: str, seen=lambda: "", timeout: float = 120.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}: {seen()}")


@pytest.fixture(scope="module")
def waiting(runtime, tmp_path_factory):
    """team-a runs one 4-GPU job and borrows team-b's idle 4 GPUs for another; team-b's 4-GPU job
    takes them back (a reclaim); then team-a's two 2-GPU jobs and team-b's one wait over quota,
    behind the victim in team-a."""
    s = _kueue_server(runtime, tmp_path_factory.mktemp("queues"))
    big = dict(workers=2, gpus_per_worker=2, **SLOW)
    a0, ab = (s.submit(digits_spec(name=n, queue="team-a", **big)) for n in ("qa0", "qa-borrow"))
    _wait(lambda: all(s.get(f"/jobs/{j}")["state"] == "running" for j in (a0, ab)), "team-a's two jobs to run")
    b0 = s.submit(digits_spec(name="qb0", queue="team-b", **big))
    _wait(lambda: s.get(f"/jobs/{b0}")["state"] in ("starting", "running"), "team-b's job to start")
    victim = next(j for j in (a0, ab) if any(e["kind"] == "preempted" for e in s.get(f"/jobs/{j}/events")))
    small = dict(workers=1, gpus_per_worker=2, **SLOW)
    a1, a2 = (s.submit(digits_spec(name=n, queue="team-a", **small)) for n in ("qa1", "qa2"))
    b1 = s.submit(digits_spec(name="qb1", queue="team-b", **small))
    jobs = {"a0": a0, "ab": ab, "b0": b0, "victim": victim, "a1": a1, "a2": a2, "b1": b1}
    # one round has seen them all: each has the walk's reason
    seen = {}

    def reasons():
        seen.update({j["job_id"]: (j["state"], j["waiting_reason"]) for j in s.get("/jobs")
                     if j["job_id"] in (victim, a1, a2, b1)})
        return len(seen) == 4 and all("over quota" in why for _, why in seen.values())
    _wait(reasons, "the waiting jobs' reasons", lambda: seen)
    try:
        yield s, jobs
    finally:
        for j in (a1, a2, b1, victim, a0, ab, b0):      # the waiting first: none starts on freed GPUs
            s.post(f"/jobs/{j}/cancel")
        _wait(lambda: all(s.get(f"/jobs/{j}")["state"] in ("cancelled", "done") for j in jobs.values()),
              "every job to end", timeout=60)


def test_queues_and_pending_jobs(waiting):
    s, jobs = waiting
    ans = s.get("/queues")
    assert ans["mode"] == "kueue"
    q = {x["name"]: x for x in ans["queues"]}
    assert list(q) == ["team-a", "team-b", "default"], list(q)
    a, b = q["team-a"], q["team-b"]
    assert (a["parent"], a["leaf"], a["quotas"]["gpu"]["nominal"]) == (None, True, 4.0)
    assert (a["usage"]["gpu"], a["borrowed_gpus"], a["running"], a["pending"]) == (4.0, 0.0, 1, 3), a
    assert (b["usage"]["gpu"], b["borrowed_gpus"], b["running"], b["pending"]) == (4.0, 0.0, 1, 1), b
    assert q["default"]["quotas"] == {} and q["default"]["pending"] == 0

    owner = {j["job_id"]: j["user"] for j in s.get("/jobs")}        # as GET /jobs names it
    p = s.get("/queues/team-a/pending")
    assert (p["queue"], p["total"], p["offset"], p["limit"]) == ("team-a", 3, 0, 1000)
    assert [i["job_id"] for i in p["items"]] == [jobs["victim"], jobs["a1"], jobs["a2"]], p
    assert [i["position_in_queue"] for i in p["items"]] == [1, 2, 3]
    # a top-level queue's parent is the cluster: places among every waiting job, team-b's included
    pb = s.get("/queues/team-b/pending")
    assert [i["job_id"] for i in pb["items"]] == [jobs["b1"]] and pb["items"][0]["position_in_queue"] == 1
    places = sorted(i["position_in_parent"] for i in p["items"] + pb["items"])
    assert places == [1, 2, 3, 4], (p, pb)
    assert [i["position_in_parent"] for i in p["items"]] == sorted(i["position_in_parent"] for i in p["items"])
    for i in p["items"]:
        assert (i["user"], i["gpus"]) == (owner[i["job_id"]], 4.0 if i["job_id"] == jobs["victim"] else 2.0), i
    # fifo blocks: team-a's queue is strict, its later jobs wait behind its head
    head = "over quota: team-a uses 4 of 4 GPUs and asks 4 more"
    assert p["items"][0]["reason"].startswith(head), p
    assert [i["reason"].startswith(f"behind {jobs['victim']} in queue team-a ({head}") for i in p["items"][1:]] \
        == [True, True], p
    assert pb["items"][0]["reason"].startswith("over quota: team-b uses 4 of 4 GPUs and asks 2 more"), pb
    # paged
    page = s.get("/queues/team-a/pending", params={"offset": 1, "limit": 1})
    assert (page["total"], page["offset"], page["limit"]) == (3, 1, 1) and page["items"] == p["items"][1:2]
    assert s.get("/queues/team-a/pending", params={"offset": 5})["items"] == []

    # refusals: an unknown queue names the leaves; a bad offset or limit names the field
    r = _get(s, "/queues/team-z/pending")
    assert r.status_code == 404 and r.json()["detail"] == \
        "unknown queue 'team-z' (queues that hold jobs: team-a, team-b, default)", r.text
    for params, field in (({"offset": -1}, "offset"), ({"limit": 0}, "limit"), ({"limit": 1001}, "limit")):
        r = _get(s, "/queues/team-a/pending", **params)
        assert r.status_code == 422 and r.json()["detail"].startswith(f"{field}: "), (params, r.text)
    r = _get(s, "/queues/team-a/pending", offset="x")
    assert r.status_code == 422 and "offset" in json.dumps(r.json()["detail"]), r.text
    assert httpx.get(s.url + "/queues", timeout=60).status_code == 401         # behind the token, as /jobs


def test_dlsched_queues(waiting):
    s, jobs = waiting
    out = s.cli("queues").stdout
    assert "queues (GPUs; tenancy kueue)" in out, out
    for col in ("queue", "parent", "nominal", "limit", "used", "entitled", "borrowed", "running", "pending"):
        assert col in out, (col, out)
    row = next(line for line in out.splitlines() if " team-a " in line).split("│")
    cells = [c.strip() for c in row if c.strip()]
    assert cells[:5] == ["team-a", "-", "4", "-", "4"] and cells[-2:] == ["1", "3"], cells
    assert json.loads(s.cli("queues", "--json").stdout)["queues"][0]["name"] == "team-a"

    out = s.cli("queues", "team-a").stdout
    assert "queue team-a: 3 waiting" in out and "#queue" in out and "#parent" in out, out
    for key in ("victim", "a1", "a2"):
        assert jobs[key] in out, (key, out)
    assert jobs["b1"] not in out and "over quota" in out
    rows = [line for line in out.splitlines() if any(jobs[k] in line for k in ("victim", "a1", "a2"))]
    assert [jobs[k] in r for k, r in zip(("victim", "a1", "a2"), rows)] == [True] * 3, out
    out = s.cli("queues", "team-a", "--offset", "2", "--limit", "1").stdout
    assert "queue team-a: 3 waiting, 3 to 3 shown" in out and jobs["a2"] in out and jobs["a1"] not in out, out
    p = json.loads(s.cli("queues", "team-b", "--json").stdout)
    assert [i["job_id"] for i in p["items"]] == [jobs["b1"]]
    assert s.cli("queues", "default").stdout.strip() == "no job waits in queue default"

    # a typo in the queue's name: the server's reason, one line, exit 1; a bad --limit: exit 2
    r = s.cli("queues", "team-x", check=False)
    assert r.returncode == 1 and r.stderr.strip() == \
        "error: unknown queue 'team-x' (queues that hold jobs: team-a, team-b, default)", r.stderr
    r = s.cli("queues", "team-a", "--limit", "0", check=False)
    assert r.returncode == 2 and "--limit" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_per_queue_metrics(waiting):
    s, _ = waiting
    text = httpx.get(s.url + "/metrics", headers={"Authorization": f"Bearer {s.token}"}, timeout=60).text
    for line in ('dlsched_queue_gpus_used{queue="team-a"} 4.0', 'dlsched_queue_gpus_used{queue="team-b"} 4.0',
                 'dlsched_queue_gpus_nominal{queue="team-a"} 4.0', 'dlsched_queue_gpus_nominal{queue="default"} 0.0',
                 'dlsched_queue_gpus_borrowed{queue="team-a"} 0.0',
                 'dlsched_queue_jobs_pending{queue="team-a"} 3.0', 'dlsched_queue_jobs_pending{queue="team-b"} 1.0',
                 'dlsched_queue_jobs_running{queue="team-a"} 1.0', 'dlsched_queue_jobs_running{queue="team-b"} 1.0',
                 "# TYPE dlsched_queue_preemptions_total counter"):
        assert line in text.splitlines(), (line, [x for x in text.splitlines() if "queue_" in x])
    # the reclaim of this test (and any earlier one on this server)
    n = [float(x.split()[-1]) for x in text.splitlines()
         if x.startswith('dlsched_queue_preemptions_total{queue="team-a",reason="reclaim"}')]
    assert n and n[0] >= 1, [x for x in text.splitlines() if "preemptions" in x]
    _promtool_clean(text)


def test_queues_page_in_chromium(chromium, waiting, tmp_path):
    from headless import DevTools
    s, jobs = waiting
    reason = escape(s.get("/queues/team-a/pending")["items"][1]["reason"], quote=False)
    b = DevTools(chromium, tmp_path / "profile", tmp_path / "net.json")
    try:
        b.open(s.url + "/")
        b.wait_for('name="token"')
        b.js(f"document.getElementById('token').value = {json.dumps(s.token)}; document.forms[0].submit()")
        b.wait_for('class="node"')
        b.js("location.hash = '#/queues'")
        html = b.wait_for('href="#/queues"', "Tenancy kueue", "team-a: 3 waiting", "team-b: 1 waiting",
                          "why it waits", reason, *(f'href="#/job/{jobs[k]}"' for k in ("victim", "a1", "a2", "b1")))
        rows = [html.index(f'href="#/job/{jobs[k]}"') for k in ("victim", "a1", "a2")]
        assert rows == sorted(rows)                         # in the queue's order
        assert 'class="active"' in html[html.index('href="#/queues"') - 80:html.index('href="#/queues"') + 80]
    finally:
        b.close()


def _promtool_clean(text: str) -> None:
    exe = shutil.which("promtool")
    if exe is None:             # test_metrics.py requires it in CI; here it is an extra check
        return
    r = subprocess.run([exe, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
                       check=False)
    assert (r.returncode, r.stdout + r.stderr) == (0, ""), r.stdout + r.stderr


# -- without Ray: the routes on a tree with an inner queue, and without --queues -------------------

def _client(sched, tree):
    from fastapi import APIRouter, FastAPI
    from fastapi.testclient import TestClient

    from dlsched.runtime.queues_api import install_queues
    app, api = FastAPI(), APIRouter()
    install_queues(api, SimpleNamespace(scheduler=sched, tree=tree))
    app.include_router(api)
    return TestClient(app)


def _sched(tenancy=None, **kw):
    return SimpleNamespace(**{"tenancy": tenancy, "queue": [], "queue_order": (), "jobs": {}, "running": {}, **kw})


def test_an_inner_queue_holds_no_jobs():
    from dlsched.tenancy import tree_from_dict
    from dlsched.tenancy.engine import Tenancy
    tree = tree_from_dict({"queues": [{"name": "research", "quotas": {"gpu": {"nominal": 0, "limit": 8}}},
                                      {"name": "team-a", "parent": "research", "quotas": {"gpu": {"nominal": 4}}}]})
    c = _client(_sched(Tenancy(tree, "kueue")), tree)
    r = c.get("/queues/research/pending")
    assert r.status_code == 422 and r.json()["detail"] == \
        "queue 'research' is an inner queue: only leaves hold jobs (leaves: team-a, default)", r.text
    assert c.get("/queues/team-a/pending").json() == {"queue": "team-a", "total": 0, "offset": 0, "limit": 1000,
                                                     "items": []}
    q = {x["name"]: x for x in c.get("/queues").json()["queues"]}
    assert (q["research"]["leaf"], q["team-a"]["parent"], q["research"]["quotas"]["gpu"]["limit"]) == (False, "research", 8.0)


def test_without_queues_one_default_queue():
    from dlsched.cli.queues import queue_row
    from dlsched.core.types import GPU, NRES
    from dlsched.runtime.metrics import QueueState
    from dlsched.tenancy import default_tree

    def rec(jid, gpus, placed=False, why=""):
        d = np.zeros(NRES)
        d[GPU] = gpus
        return SimpleNamespace(job_id=jid, queued=not placed, why=why, spec=SimpleNamespace(user="u", priority=0),
                               tasks=[SimpleNamespace(demand=d)], held_gpus=lambda: gpus if placed else 0.0)
    run, w1, w2 = rec("r", 2.0, placed=True), rec("w1", 1.0, why="does not fit"), rec("w2", 4.0)
    sched = _sched(jobs={"r": run, "w1": w1, "w2": w2}, running={"r": run}, queue=[w1, w2], queue_order=("w1",))
    c = _client(sched, default_tree())
    ans = c.get("/queues").json()
    assert ans["mode"] is None and len(ans["queues"]) == 1
    d = ans["queues"][0]
    assert (d["name"], d["usage"], d["running"], d["pending"], d["entitled_gpus"]) == ("default", {"gpu": 2.0}, 1, 2, None)
    assert queue_row(d) == {"queue": "default", "parent": "-", "nominal": "-", "limit": "-", "used": "2",
                            "entitled": "-", "borrowed": "0", "running": 1, "pending": 2}
    p = c.get("/queues/default/pending").json()
    assert [(i["job_id"], i["position_in_queue"], i["position_in_parent"], i["gpus"], i["reason"]) for i in p["items"]] == \
        [("w1", 1, 1, 1.0, "does not fit"), ("w2", 2, 2, 4.0, "arrived after the last round")]
    assert c.get("/queues/nope/pending").status_code == 404
    # the per-queue series: the one queue, no preemption
    from prometheus_client import CollectorRegistry, generate_latest
    reg = CollectorRegistry()
    reg.register(QueueState(sched))
    text = generate_latest(reg).decode()
    assert 'dlsched_queue_gpus_used{queue="default"} 2.0' in text and 'dlsched_queue_jobs_pending{queue="default"} 2.0' in text
    assert "dlsched_queue_preemptions_total{" not in text
    _promtool_clean(text)
