"""Quotas on real jobs (issue "Many tenants", sections 3 and 5): a queue borrows what another
leaves idle, and the owner takes it back through the runtime's suspend, with the reason in the
job's events and the scheduler's log; the jobs then finish."""
from __future__ import annotations

import time

from conftest import digits_spec

QUEUES = """\
queues:
  - name: team-a
    quotas:
      gpu: {nominal: 4}
  - name: team-b
    quotas:
      gpu: {nominal: 4}
"""


def _submit(s, spec) -> str:
    r = s.post("/jobs", {"spec": spec})
    assert r.status_code == 201, r.text
    return r.json()["job_id"]


def _wait(s, pred, what: str, timeout: float = 120.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_borrow_then_reclaim_on_real_jobs(runtime, tmp_path):
    qf = tmp_path / "queues.yaml"
    qf.write_text(QUEUES)
    s = runtime.ensure("fifo", extra=["--queues", str(qf), "--tenancy", "kueue"])
    long = {"iterations": 240, "args": {"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.04}}
    a = [_submit(s, digits_spec(name=f"a{i}", queue="team-a", **long)) for i in range(4)]
    # team-a borrows team-b's idle 4 GPUs: all four 2-GPU jobs run on the 8 GPUs
    _wait(s, lambda: all(s.get(f"/jobs/{j}")["state"] == "running" for j in a), "team-a's four jobs to run")
    b = _submit(s, digits_spec(name="b0", queue="team-b", **long))
    _wait(s, lambda: s.get(f"/jobs/{b}")["state"] in ("starting", "running"), "team-b's job to start")
    taken = [j for j in a if any(e["kind"] == "preempted" for e in s.get(f"/jobs/{j}/events"))]
    assert len(taken) == 1, taken
    why = [e["detail"] for e in s.get(f"/jobs/{taken[0]}/events") if e["kind"] == "preempted"]
    assert why == [f"reclaim: for {b} (team-b)"]
    # the victim waits, over quota, with the reason the walk gave
    j = _wait(s, lambda: (lambda j: j if "over quota" in j.get("waiting_reason", "") else None)(
        s.get(f"/jobs/{taken[0]}")), "the victim's reason")
    assert j["state"] == "queued" and j["waiting_reason"] == (
        "over quota: team-a uses 6 of 4 GPUs and asks 2 more; cannot borrow: the cluster's queues have 0 idle"), j
    # every job ends
    _wait(s, lambda: all(s.get(f"/jobs/{x}")["state"] == "done" for x in a + [b]), "every job to finish", 300)
