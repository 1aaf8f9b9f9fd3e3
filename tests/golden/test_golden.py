"""Golden runs: tiny workloads whose metrics are worked out by hand. A change in behaviour
shows up here first."""
import pytest

import dlsched
from dlsched.workload.models import ZOO
from dlsched.workload.schema import job_from_row


def test_golden_tasks_jobs_fifo_first_fit():
    """seed002 nodes have 40 CPUs. Job A: 6 tasks x 16 CPUs, 100 s -> nodes 0,0,1,1,2,2 (2 per node);
    job B (t=10): 4 tasks x 16 CPUs, 50 s -> node 3 takes 2 (10..60); the other 2 wait until those
    free node 3 at t=60 and run 60..110. A's JCT 100, B's 100, makespan 110."""
    jobs = [job_from_row(dict(job_id="A", submit_time_s=0, kind="tasks", workers=6, cpus_per_worker=16,
                              mem_gb_per_worker=8, duration_s=100)),
            job_from_row(dict(job_id="B", submit_time_s=10, kind="tasks", workers=4, cpus_per_worker=16,
                              mem_gb_per_worker=8, duration_s=50))]
    r = dlsched.simulate("seed002", jobs, "fifo")
    j = r.jobs.set_index("job_id")
    assert j.loc["A", "jct_s"] == 100 and j.loc["B", "jct_s"] == 100
    assert j.loc["B", "first_start_s"] == 10  # tasks start as they fit: a tasks job is not a gang
    assert r.summary["makespan_s"] == 110
    assert r.summary["mean_jct_s"] == 100
    assert r.summary["gpu_util"] == 0  # CPU-only tasks
    assert r.summary["partial_hold_gpu_s"] == 0


def test_golden_model_job_iteration_time():
    """resnet50, 1 worker, batch 64, 1000 iterations on a V100: 15 ms + 64 x 1.9 ms = 136.6 ms per
    iteration -> 136.6 s."""
    m = ZOO["resnet50"]
    jobs = [job_from_row(dict(job_id="r", submit_time_s=0, model="resnet50", batch_size=64, iterations=1000))]
    r = dlsched.simulate("seed002", jobs, "fifo")
    assert r.summary["mean_jct_s"] == pytest.approx(1000 * (m.overhead_ms + 64 * m.ms_per_sample) / 1e3)
    assert r.summary["nic_bytes"] == 0 and r.summary["jobs"] == 1


def test_golden_summary_keys_and_deadlines():
    jobs = [job_from_row(dict(job_id="a", submit_time_s=0, workers=4, duration_s=100, deadline_s=150)),
            job_from_row(dict(job_id="b", submit_time_s=0, workers=12, duration_s=100, deadline_s=150))]
    r = dlsched.simulate("seed002", jobs, "fifo-gang")
    for key in ("jobs", "mean_jct_s", "median_jct_s", "p95_jct_s", "p99_jct_s", "makespan_s", "mean_wait_s",
                "gpu_util", "nic_bytes", "cross_rack_bytes", "sched_time_s", "partial_hold_gpu_s"):
        assert key in r.summary
    # a runs 0..100 (met), b waits for all 12 GPUs until 100 and ends at 200 (missed).
    assert r.summary["deadline_hit_rate"] == 0.5
    assert r.summary["mean_wait_s"] == 50
    assert r.summary["median_jct_s"] == 150
