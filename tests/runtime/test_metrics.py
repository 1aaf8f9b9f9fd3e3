"""GET /metrics of a real `dlsched server` (dlsched.runtime.metrics): behind the token, in
Prometheus's text format, and in agreement with GET /jobs and GET /nodes while a job runs sharing
a GPU, is suspended, resumed and cancelled and another runs to completion; the transitions and
switches counted are exactly those; the page passes Prometheus's own linter (`promtool check
metrics`, from Debian's `prometheus`: `make promtool` installs it; without it the test skips
locally and fails in CI, CI=true); and the shipped Grafana dashboard queries only series that are
exported."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT, digits_spec, required_tool

DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
STATES = ("queued", "starting", "running", "suspended", "held", "done", "failed", "cancelled", "rejected")
LIVE = ("queued", "starting", "running", "suspended", "held")


@pytest.fixture(scope="session")
def promtool() -> str:
    """Prometheus's linter. Session scope, and listed before `runtime` in a test's arguments: a
    missing promtool skips before the cluster starts, and fails in CI (CI=true), so CI cannot
    pass without linting the page."""
    return required_tool(shutil.which("promtool"),
                         "promtool not found (install it with `make promtool` or `apt-get install prometheus`)")


def page(s) -> str:
    """The text of one GET /metrics."""
    r = httpx.get(s.url + "/metrics", headers={"Authorization": f"Bearer {s.token}"}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == CONTENT_TYPE_LATEST
    return r.text


def scrape(s) -> dict:
    """{(sample name, ((label, value), ...)): value} of one GET /metrics."""
    return {(x.name, tuple(sorted(x.labels.items()))): x.value
            for fam in text_string_to_metric_families(page(s)) for x in fam.samples}


def val(m: dict, name: str, **labels) -> float:
    return m[name, tuple(sorted(labels.items()))]


def view(s) -> tuple:
    """What the gauges must agree with: the jobs' states and, per node, up, GPUs, free, load."""
    jobs = sorted((j["job_id"], j["state"]) for j in s.get("/jobs"))
    nodes = [(n["up"], n["gpus"], n["free_gpus"], tuple(n["gpu_load"])) for n in s.get("/nodes")]
    return jobs, nodes


def agreed(s, timeout: float = 20.0) -> dict:
    """A scrape taken between two equal reads of /jobs and /nodes, whose gauges say what those
    say (the scheduler's own records follow the store within a poll: retried until then)."""
    t0, got, want = time.monotonic(), None, None
    while True:
        before = view(s)
        m = scrape(s)
        if view(s) == before:
            jobs, nodes = before
            n = {st: sum(1 for _, x in jobs if x == st) for st in STATES}
            want = {("dlsched_jobs", st): n[st] for st in STATES}
            want.update({
                "dlsched_running_jobs": n["running"],
                "dlsched_queue_length": n["queued"],
                "dlsched_gpus_capacity": sum(g for up, g, _, _ in nodes if up),
                "dlsched_gpus_free": sum(f for up, _, f, _ in nodes if up),
                "dlsched_gpus_allocated": sum(x > 0 for *_, load in nodes for x in load),
                "dlsched_gpus_shared": sum(x > 1 for *_, load in nodes for x in load)})
            got = {k: (val(m, k[0], state=k[1]) if isinstance(k, tuple) else val(m, k)) for k in want}
            if got == want:
                return m
        assert time.monotonic() - t0 < timeout, f"/metrics {got} never agreed with /jobs and /nodes {want}"
        time.sleep(0.2)


def idle(s) -> None:
    """Jobs of earlier tests still live are cancelled: what is counted from here on is ours."""
    live = [j["job_id"] for j in s.get("/jobs") if j["state"] in LIVE]
    for jid in live:
        s.post(f"/jobs/{jid}/cancel")
    for jid in live:
        s.wait_state(jid, "cancelled", 60)


def test_metrics_need_the_token_and_agree_with_jobs_and_nodes(runtime):
    s = runtime.server if runtime.server.policy == "fifo" else runtime.restart("fifo")
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = httpx.get(s.url + "/metrics", headers=headers, timeout=30)
        assert r.status_code == 401 and "dlsched_" not in r.text
    idle(s)
    m0 = agreed(s)

    # two ranks of half a GPU: fifo packs them on one GPU (a shared GPU), and it keeps running
    long = s.submit(digits_spec(name="metrics-long", gpus_per_worker=0.5, iterations=100000,
                                args={"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.02}))
    s.wait(long, lambda j: j["state"] == "running" and j["step"] >= 5, what="step 5")
    m = agreed(s)
    assert val(m, "dlsched_running_jobs") == 1 and val(m, "dlsched_gpus_shared") == 1
    assert val(m, "dlsched_gpus_allocated") == 1
    assert val(m, "dlsched_gpus_free") == val(m0, "dlsched_gpus_free") - 1

    assert s.post(f"/jobs/{long}/suspend").json()["state"] == "suspended"
    agreed(s)
    s.post(f"/jobs/{long}/resume")
    s.wait(long, lambda j: j["state"] == "running", what="running again")
    short = s.submit(digits_spec(name="metrics-short", iterations=20))
    s.wait_state(short, "done")
    assert s.post(f"/jobs/{long}/cancel").json()["state"] == "cancelled"
    rounds_before = s.get("/metrics/scheduler")["rounds"]
    m1 = agreed(s)
    rounds_after = s.get("/metrics/scheduler")["rounds"]

    def delta(name, **labels):
        return val(m1, name, **labels) - val(m0, name, **labels)
    # long: queued, starting, running, suspended, queued (resumed), starting, running,
    # cancelled; short: queued, starting, running, done
    entered = {st: delta("dlsched_job_transitions_total", state=st) for st in STATES}
    assert entered == {"queued": 3, "starting": 3, "running": 3, "suspended": 1, "held": 0, "done": 1,
                       "failed": 0, "cancelled": 1, "rejected": 0}
    assert {k: delta("dlsched_switch_seconds_count", kind=k) for k in ("suspend", "resume", "migrate", "resize")} \
        == {"suspend": 1, "resume": 1, "migrate": 0, "resize": 0}
    # the suspend's seconds hold the stop the runtime measured (checkpoint and exit: stop_s)
    ev = s.get(f"/jobs/{long}/events")
    i = next(k for k, e in enumerate(ev) if e["kind"] == "stopped" and e["detail"] == "suspended by operator")
    stop_s = float(next(e["detail"] for e in ev[i:] if e["kind"] == "stop_s"))
    assert stop_s > 0 and delta("dlsched_switch_seconds_sum", kind="suspend") >= stop_s - 0.001
    assert delta("dlsched_switch_seconds_sum", kind="resume") > 0
    # every round the scheduler ran is observed once, at the scrape
    count = val(m1, "dlsched_round_seconds_count")
    assert count > val(m0, "dlsched_round_seconds_count") and rounds_before <= count <= rounds_after
    assert val(m1, "dlsched_round_seconds_sum") > 0
    assert val(m1, "dlsched_round_seconds_bucket", le="+Inf") == count
    assert delta("dlsched_decision_latency_seconds_count") > 0
    assert val(m1, "dlsched_running_jobs") == 0 and val(m1, "dlsched_gpus_allocated") == 0


def test_metrics_pass_promtool_check(promtool, runtime):
    """`promtool check metrics` prints nothing for the real page (Prometheus's naming rules: no
    `_total` on a non-counter, `_total` on every counter, base units, HELP on every family),
    scraped with jobs in the store, one of them running on a shared GPU."""
    s = runtime.server if runtime.server.policy == "fifo" else runtime.restart("fifo")
    done = s.submit(digits_spec(name="metrics-lint-done", iterations=20))
    s.wait_state(done, "done")
    job = s.submit(digits_spec(name="metrics-lint", gpus_per_worker=0.5, iterations=100000,
                               args={"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.02}))
    try:
        s.wait(job, lambda j: j["state"] == "running" and j["step"] >= 2, what="step 2")
        text = page(s)
    finally:
        s.post(f"/jobs/{job}/cancel")
    assert "dlsched_jobs{" in text and "dlsched_switch_seconds_bucket{" in text
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                       timeout=60, check=False)
    assert (r.returncode, r.stdout + r.stderr) == (0, ""), \
        f"promtool check metrics (exit {r.returncode}):\n{r.stdout}{r.stderr}"
    s.wait_state(job, "cancelled", 60)


def test_grafana_dashboard_queries_what_is_exported(runtime):
    dash = json.loads(DASHBOARD.read_text())
    exported = {name for name, _ in scrape(runtime.server)}
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    queried = {n for e in exprs for n in re.findall(r"\bdlsched_\w+", e)}
    assert queried and queried <= exported, queried - exported
    assert {"dlsched_queue_length", "dlsched_running_jobs", "dlsched_gpus_capacity", "dlsched_gpus_allocated",
            "dlsched_gpus_free", "dlsched_gpus_shared", "dlsched_round_seconds_bucket", "dlsched_job_transitions_total",
            "dlsched_switch_seconds_count", "dlsched_switch_seconds_sum"} <= queried
    # the Prometheus data source is a variable, never a UID of one Grafana
    var = next(v for v in dash["templating"]["list"] if v["type"] == "datasource")
    assert var["query"] == "prometheus"
    sources = [x["datasource"] for p in dash["panels"] for x in (p, *p["targets"])]
    assert sources and all(d == {"type": "prometheus", "uid": "${%s}" % var["name"]} for d in sources)
