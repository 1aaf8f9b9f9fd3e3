"""Fair-share preemption and a minimum runtime on real jobs (issue "Many tenants", section 3's
runtime subset): a queue that borrows a little takes a GPU from the queue that borrows most
(Kueue's S2-a, reason fair-share), and only once the victim has held its GPUs for the minimum
runtime (counted from its placement, as the simulator does)."""
from __future__ import annotations


from conftest import digits_spec, wait_until

QUEUES = """\
tenancy: {mode: kueue-fair, reclaim_min_runtime_s: 15}
queues:
  - name: fa
    quotas:
      gpu: {nominal: 2}
  - name: fb
    quotas:
      gpu: {nominal: 2}
  - name: fc
    quotas:
      gpu: {nominal: 4}
"""
ONE = {"workers": 1, "iterations": 100000, "args": {"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.02}}


def _submit(s, name, queue) -> str:
    return s.submit(digits_spec(name=name, queue=queue, **ONE))     # (ServerProc.submit: 201 or fails)


def test_fair_share_preemption_after_the_minimum_runtime(runtime, tmp_path):
    qf = tmp_path / "fair.yaml"
    qf.write_text(QUEUES)
    s = runtime.ensure("fifo", extra=["--queues", str(qf)])
    jobs = []
    try:
        # fb borrows fc's idle 4 GPUs (6 of 8); fa holds its own 2
        jobs += [_submit(s, f"b{i}", "fb") for i in range(6)] + [_submit(s, f"a{i}", "fa") for i in range(2)]
        wait_until(lambda: all(s.get(f"/jobs/{j}")["state"] == "running" for j in jobs), "eight jobs to run")
        # fa asks for one more: it would borrow 1 (share 125) against fb's 4 (500, 375 without a victim)
        new = _submit(s, "a2", "fa")
        jobs.append(new)
        wait_until(lambda: s.get(f"/jobs/{new}")["state"] in ("starting", "running"), "fa's third job to start")
        taken = {j: [e for e in s.get(f"/jobs/{j}/events") if e["kind"] == "preempted"] for j in jobs[:6]}
        taken = {j: ev for j, ev in taken.items() if ev}
        assert len(taken) == 1, taken
        (victim, (ev,)), = taken.items()
        assert ev["detail"] == f"fair-share: for {new} (fa)"
        # not before the victim had held its GPUs 15 s: its launch and its suspension in the
        # scheduler's log (one clock)
        log = [r for r in s.get("/log") if r["job_id"] == victim]
        launch = min(r["time_s"] for r in log if r["kind"] == "launch")
        cut = [r for r in log if r["kind"] == "suspend"]
        assert len(cut) == 1 and cut[0]["detail"] == ev["detail"]
        assert cut[0]["time_s"] - launch >= 15 - 1e-6, (launch, cut)
        assert all(s.get(f"/jobs/{j}")["state"] == "running" for j in jobs if j != victim)
    finally:
        for j in jobs:
            s.post(f"/jobs/{j}/cancel")
