"""Quotas on real jobs (issue "Many tenants", sections 3 and 5): a queue borrows what another
leaves idle, and the owner takes it back through the runtime's suspend, with the reason in the
job's events and its waiting reason; when the owner's job ends, the borrower resumes."""
from __future__ import annotations

from conftest import digits_spec, team_queues_server, wait_until


def test_borrow_then_reclaim_on_real_jobs(runtime, tmp_path):
    s = team_queues_server(runtime)      # team-a and team-b, nominal 4 GPUs each (conftest.TEAM_QUEUES)
    long = {"iterations": 100000, "args": {"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.02}}
    a = [s.submit(digits_spec(name=f"a{i}", queue="team-a", **long)) for i in range(4)]
    try:
        # team-a borrows team-b's idle 4 GPUs: all four 2-GPU jobs run on the 8 GPUs
        wait_until(lambda: all(s.get(f"/jobs/{j}")["state"] == "running" for j in a), "team-a's four jobs to run", timeout=120.0)
        b = s.submit(digits_spec(name="b0", queue="team-b", **long))
        wait_until(lambda: s.get(f"/jobs/{b}")["state"] in ("starting", "running"), "team-b's job to start", timeout=120.0)
        taken = [j for j in a if any(e["kind"] == "preempted" for e in s.get(f"/jobs/{j}/events"))]
        assert len(taken) == 1, taken
        why = [e["detail"] for e in s.get(f"/jobs/{taken[0]}/events") if e["kind"] == "preempted"]
        assert why == [f"reclaim: for {b} (team-b)"]
        # the victim waits, over quota, with the reason the walk gave
        def over_quota():
            j = s.get(f"/jobs/{taken[0]}")
            return j if "over quota" in j.get("waiting_reason", "") else None
        j = wait_until(over_quota, "the victim's reason", timeout=120.0)
        assert j["state"] == "queued" and j["waiting_reason"] == (
            "over quota: team-a uses 6 of 4 GPUs and asks 2 more; cannot borrow: the cluster's queues have 0 idle"), j
        # team-b gives its GPUs back: team-a borrows them again, the victim resumes from its checkpoint
        assert s.post(f"/jobs/{b}/cancel").status_code == 200
        wait_until(lambda: s.get(f"/jobs/{taken[0]}")["state"] == "running", "the victim to resume", timeout=120.0)
    finally:
        for x in a:
            s.post(f"/jobs/{x}/cancel")
