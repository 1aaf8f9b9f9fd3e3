"""Order by decayed usage on real jobs (issue "Many tenants", section 3's runtime subset): under
slurm-fairtree the queue that used less over time goes first, even with the later job and over
its share, where Kueue's classic order would take the other (earlier, within its nominal)."""
from __future__ import annotations

import time

from conftest import digits_spec, wait_until

QUEUES = """\
tenancy: {mode: slurm-fairtree}
queues:
  - name: ua
    quotas:
      gpu: {nominal: 4}
  - name: ub
    quotas:
      gpu: {nominal: 4}
"""
LONG = {"workers": 1, "iterations": 100000, "args": {"hidden": 32, "lr": 0.1, "seed": 0, "delay_s": 0.02}}


def test_the_queue_that_used_less_goes_first(runtime, tmp_path):
    qf = tmp_path / "fairtree.yaml"
    qf.write_text(QUEUES)
    s = runtime.ensure("fifo", extra=["--queues", str(qf)])
    state = lambda j: s.get(f"/jobs/{j}")["state"]          # noqa: E731
    jobs = []
    try:
        # ua uses the whole cluster (8 GPUs) for a while: its decayed usage grows, ub's stays 0
        ua = [s.submit(digits_spec(name=f"ua{i}", queue="ua", **LONG)) for i in range(8)]
        jobs += ua
        wait_until(lambda: all(state(j) == "running" for j in ua), "ua's eight jobs to run")
        time.sleep(5)
        for j in ua[4:]:
            s.post(f"/jobs/{j}/cancel")
        # ub takes its 4; the cluster is full again, 4 and 4
        ub = [s.submit(digits_spec(name=f"ub{i}", queue="ub", **LONG)) for i in range(4)]
        jobs += ub
        wait_until(lambda: all(state(j) == "running" for j in ub), "ub's four jobs to run")
        # ua asks first, ub after; then one GPU frees (one of ua's: ua's new job would be within
        # its nominal 4, ub's would borrow)
        late_a = s.submit(digits_spec(name="ua-late", queue="ua", **LONG))
        late_b = s.submit(digits_spec(name="ub-late", queue="ub", **LONG))
        jobs += [late_a, late_b]
        time.sleep(2)
        assert state(late_a) == "queued" and state(late_b) == "queued"
        s.post(f"/jobs/{ua[0]}/cancel")
        wait_until(lambda: state(late_b) in ("starting", "running"), "ub's later job to start")
        assert state(late_a) == "queued"
        pending = s.get("/queues/ua/pending")["items"]
        assert [p["job_id"] for p in pending] == [late_a], pending
        assert pending[0]["reason"].startswith("over quota"), pending
    finally:
        for j in jobs:
            s.post(f"/jobs/{j}/cancel")
