"""The web view in headless Chromium, as on an air-gapped machine (headless.py: no host but
127.0.0.1 resolves; the net logs must show no request to any other host).

Live: a real `dlsched server` (fifo) with a job holding all 8 GPUs and two jobs waiting behind
it. Without a session `/` is the login page and the API refuses reads; the browser types the
token into the form, and the cluster, queue, job and timeline views then show the nodes, the
GPUs coloured by the job, the waiting jobs in order, the job's placements and curves; logout
ends the session. The API is checked beside it: a cookie opens reads only, the token still
opens everything. Replay (first, before the live jobs load the machine): `dlsched view` on a
small simulated run, with the link it prints."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from html import escape
from urllib.parse import urlsplit

import httpx
import pytest
from conftest import digits_spec
from headless import DevTools, page_requests

from dlsched.cli.main import main


def only_loopback(*netlogs) -> list[str]:
    reqs = [u for p in netlogs for u in page_requests(json.loads(p.read_text()))]
    assert reqs and all(urlsplit(u).hostname == "127.0.0.1" for u in reqs), reqs
    return reqs


def test_dlsched_view_of_a_simulated_run(chromium, tmp_path):
    out = tmp_path / "run"
    assert main(["simulate", "-c", "seed002", "-w", "sample", "-p", "fifo", "--out", str(out)]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "dlsched.cli.main", "view", str(out), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    b = None
    try:
        url = _printed_url(proc)
        base = url.split("/login")[0]
        assert urlsplit(url).hostname == "127.0.0.1" and httpx.get(base + "/jobs").status_code == 401
        at = httpx.get(base + "/allocations", params={"t": 5000}, cookies=_cookie(url)).json()
        b = DevTools(chromium, tmp_path / "profile", tmp_path / "net.json")
        b.open(url)                                                  # the printed link logs in
        b.wait_for('type="range"', "v100x4-0", "v100x2-1", "12 GPUs")
        b.js("location.hash = '#/cluster/5000'")                    # the cluster at t = 5000 s
        b.wait_for("t = 1h 23m 20s", *(f'href="#/job/{j}"' for j in at))
        b.js("location.hash = '#/timeline'")
        b.wait_for("placements of 60 jobs on 12 GPUs", 'aria-label="jobs over GPUs"')
        b.js("location.hash = '#/job/job-13'")
        b.wait_for("Placement history", "rank 8 → v100x4-0", "Speed")
    finally:
        if b is not None:
            b.close()
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
    only_loopback(tmp_path / "net.json")


@pytest.fixture(scope="module")
def jobs(runtime):
    """A job on every GPU of the 4 x 2 cluster, then two that wait behind it (fifo)."""
    s = runtime.server if runtime.server.policy == "fifo" else runtime.restart("fifo")
    # it sleeps 0.2 s a step (delay_s), so it costs little CPU while the other tests run
    hog = s.submit(digits_spec(name="hog", workers=4, gpus_per_worker=2, iterations=100000,
                               args={"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.2}))
    s.wait_state(hog, "running")
    waiting = [s.submit(digits_spec(name=f"wait{i}", workers=1, iterations=50)) for i in (1, 2)]
    try:
        yield s, hog, waiting
    finally:
        for j in (hog, *waiting):
            s.post(f"/jobs/{j}/cancel")


def test_session_cookie_opens_reads_only(chromium, jobs):
    s, hog, waiting = jobs
    anon = httpx.Client(base_url=s.url, timeout=30)
    r = anon.get("/")
    assert r.status_code == 200 and 'name="token"' in r.text
    assert anon.get("/jobs").status_code == 401 and anon.get("/timeline").status_code == 401
    assert anon.post("/login", data={"token": s.token + "x"}).status_code == 401
    r = anon.post("/login", data={"token": s.token}, follow_redirects=False)
    assert r.status_code == 303 and "HttpOnly" in r.headers["set-cookie"] and s.token not in r.headers["set-cookie"]
    assert anon.get("/jobs").status_code == 200
    assert anon.post(f"/jobs/{waiting[1]}/suspend").status_code == 401          # a cookie never writes
    # the token still opens everything (Bearer), as before the web view
    assert s.post(f"/jobs/{hog}/cancel", token="wrong").status_code == 401

    allocs = anon.get("/allocations").json()
    assert allocs[hog] == s.get(f"/jobs/{hog}")["allocation"]
    tl = anon.get("/timeline", params={"job_id": hog}).json()
    assert sorted((i["node"], i["gpus"], i["end"]) for i in tl["intervals"]) == \
        sorted((a["node"], a["gpu_ids"], None) for a in allocs[hog])
    assert anon.post("/logout", follow_redirects=False).status_code == 303
    anon.cookies.clear()
    assert anon.get("/jobs").status_code == 401


def test_pages_in_chromium_after_login(chromium, jobs, tmp_path):
    s, hog, waiting = jobs
    nodes = [n["name"] for n in s.get("/nodes")]
    b = DevTools(chromium, tmp_path / "profile", tmp_path / "net.json")
    try:
        b.open(s.url + "/")
        b.wait_for('name="token"', "Log in")
        b.js(f"document.getElementById('token').value = {json.dumps(s.token + 'x')}; document.forms[0].submit()")
        b.wait_for("not the token of this server")
        b.js(f"document.getElementById('token').value = {json.dumps(s.token)}; document.forms[0].submit()")
        html = b.wait_for('class="node"', *nodes, f'title="GPU 1: {hog}"')
        assert "8 GPUs: 8 in use" in html and "Log out" in html

        b.js("location.hash = '#/queue'")
        ranked = {j["job_id"]: j for j in s.get("/jobs") if j.get("queue_position")}
        reasons = [escape(ranked[j]["waiting_reason"], quote=False) for j in waiting if j in ranked]
        html = b.wait_for(" waiting, ", *waiting, "why it waits", *reasons)
        rows = [html.index(f'href="#/job/{j}"') for j in waiting]
        assert rows == sorted(rows)                                         # in the policy's order

        b.js(f"location.hash = '#/job/{hog}'")
        b.wait_for("Placement history", "rank 3 →", "Loss", "Step time", "submitted")
        b.js("location.hash = '#/timeline'")
        b.wait_for("placements of", 'aria-label="jobs over GPUs"')
        b.js("location.hash = '#/whatif/fifo,sjf@1h'")                      # GET /whatif, with the cookie
        b.wait_for("What if", "Per policy", "mean JCT", ">fifo<", ">sjf<", "predicted start / finish", *waiting)

        b.js("document.querySelector('header form').submit()")
        b.wait_for('name="token"')
    finally:
        b.close()
    reqs = only_loopback(tmp_path / "net.json")
    assert {"/web/static/app.js", "/web/static/vendor/chart.umd.min.js", "/nodes", "/timeline", "/whatif"} <= \
        {urlsplit(u).path for u in reqs}


def _printed_url(proc) -> str:
    watchdog = threading.Timer(60, proc.kill)      # a view that never prints is killed, not waited for
    watchdog.start()
    try:
        for line in proc.stdout:
            if line.startswith("open "):
                return line.split()[1]
    finally:
        watchdog.cancel()
    raise AssertionError("dlsched view printed no URL")


def _cookie(url: str) -> dict:
    r = httpx.get(url, follow_redirects=False)
    name, value = r.headers["set-cookie"].split(";")[0].split("=", 1)
    return {name: value}
