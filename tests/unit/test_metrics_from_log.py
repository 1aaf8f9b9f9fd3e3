"""Metrics come from the typed event log alone (dlsched.scheduler.eventlog ->
dlsched.metrics.result.result_from_log): replaying the log gives, for every job, what the
Scheduler's own records say, under policies that preempt, migrate, resize and place in parts."""
import numpy as np
import pytest

import dlsched.policies  # noqa: F401
from dlsched.cluster import load_cluster
from dlsched.metrics.result import build_result, jobs_from_log
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.scheduler.eventlog import KINDS, LogRecord
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row


def _jobs():
    rng = np.random.default_rng(5)
    out = []
    for i in range(50):
        row = dict(job_id=f"j{i}", submit_time_s=float(rng.uniform(0, 4000)), workers=int(rng.choice([1, 2, 4, 8])))
        if i % 5 == 4:
            row.update(kind="tasks", cpus_per_worker=8, duration_s=float(rng.uniform(50, 500)))
        else:
            row.update(model=["resnet50", "bert", "vgg16", "ncf"][i % 4], batch_size=64,
                       iterations=float(rng.integers(500, 6000)))
        out.append(job_from_row(row))
    return out


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "gandiva", "optimus", "k8s-spread", "srtf"])
def test_the_log_replays_to_the_schedulers_records(policy):
    sched = Scheduler(build_profile(policy), seed=2)
    backend = SimBackend(load_cluster("seed002"), _jobs(), restart_delay_s=10.0)
    sched.run(backend)
    assert all(isinstance(r, LogRecord) and r.kind in KINDS for r in sched.log)
    replay = jobs_from_log(sched.log)
    assert list(replay) == list(sched.jobs)
    for job_id, rec in sched.jobs.items():
        j = replay[job_id]
        assert (j.state, j.first_start_s, j.finish_s, j.preemptions, j.migrations) == (
            rec.state.value, rec.first_start_s, rec.finish_s, rec.preemptions, rec.migrations), job_id
    res = build_result(sched, backend, policy=policy, cluster_name="seed002", workload_name="t")
    stats = [r for r in res.decisions if r.kind == "stats"]
    assert len(stats) == len(sched.jobs) and res.jobs.gpu_s.sum() > 0
    if policy in ("tiresias", "gandiva", "srtf"):
        assert res.summary["preemptions"] > 0, "the workload must exercise preemption"
