"""Gavel's round mechanism (dlsched.sim.gavel.rounds): rounds, arrivals at round ends, the reset
rule, priorities and failures, on hand-made jobs whose answers follow from the rules."""
import pytest

from dlsched.cluster.topology import load_cluster
from dlsched.core.errors import DlschedError
from dlsched.core.types import JobSpec
from dlsched.sim.gavel import simulate_gavel
from dlsched.workload.gavel_trace import _tasks
from dlsched.workload.throughputs import load_throughputs

TABLE = load_throughputs("gavel")
RESNET = "ResNet-18 (batch size 64)"


def _job(i: int, at: float, seconds_on_v100: float, job_type: str = RESNET, gpus: int = 1) -> JobSpec:
    steps = seconds_on_v100 * TABLE.steps_per_s(job_type, gpus, "V100")
    return JobSpec(job_id=f"j{i}", submit_time_s=at, kind="dl", model=job_type, iterations=steps,
                   tasks=_tasks(gpus))


def _run(jobs, policy="gavel-fifo-perf", cluster="gavel-3:0:0", **kw):
    res = simulate_gavel(load_cluster(cluster), jobs, policy, TABLE, **kw)
    return res, res.jobs.set_index("job_id")


def test_a_lone_job_runs_in_whole_rounds_and_its_jct_is_its_run_time():
    res, j = _run([_job(0, 0.0, 1000.0)])
    assert j.loc["j0", "state"] == "done"
    assert j.loc["j0", "jct_s"] == pytest.approx(1000.0, rel=1e-3)
    assert j.loc["j0", "rounds"] == 3                      # 360 + 360 + 280 s
    assert j.loc["j0", "gpu_type_run"] == "V100"
    assert res.summary["semantics"] == "gavel"


def test_a_job_arriving_mid_round_waits_for_the_round_to_end():
    _, j = _run([_job(0, 0.0, 5000.0), _job(1, 100.0, 500.0)])
    assert j.loc["j1", "first_start_s"] == pytest.approx(360.0, abs=1.0)
    assert j.loc["j1", "wait_s"] == pytest.approx(260.0, abs=1.0)


def test_a_new_job_gets_no_allocation_until_the_minimum_interval_since_the_last_reset():
    # j1 arrives at 400 and is added at the round end 720; no reset at a time > 0 happened yet, so
    # X is recomputed at once. j2 arrives at 800, is added at 1080, and must wait for X until a
    # round end >= 720 + 1920 = 2640: rounds end every 360 s, so 2880 (a round lasts int(T * 360) / T,
    # a little under 360 s).
    jobs = [_job(0, 0.0, 20000.0), _job(1, 400.0, 20000.0), _job(2, 800.0, 20000.0)]
    res, j = _run(jobs)
    assert j.loc["j1", "first_start_s"] == pytest.approx(720.0, abs=1.0)
    assert j.loc["j2", "first_start_s"] == pytest.approx(2880.0, abs=1.0)
    _, j = _run(jobs, min_reset_s=0.0)
    assert j.loc["j2", "first_start_s"] == pytest.approx(1080.0, abs=1.0)


def test_time_is_shared_by_priority_when_jobs_outnumber_gpus():
    # three equal jobs on one V100 under max-min fairness: each gets a third of the rounds, so
    # all three finish close together, at about three times their run time alone
    jobs = [_job(i, 0.0, 3600.0) for i in range(3)]
    _, j = _run(jobs, policy="gavel-max-min-fairness-perf", cluster="gavel-1:0:0")
    assert (j.state == "done").all()
    assert j.jct_s.min() > 2.5 * 3600 and j.jct_s.max() < 3.2 * 3600
    assert (j.preemptions > 0).all()


def test_a_perf_policy_puts_a_job_on_its_fastest_type():
    # CycleGAN runs 8.8x faster on a V100 than on a K80; the agnostic FIFO takes the V100 by
    # Gavel's quirk, so compare with a job type that prefers the P100 (Recommendation)
    rec = "Recommendation (batch size 2048)"
    assert TABLE.steps_per_s(rec, 1, "P100") > TABLE.steps_per_s(rec, 1, "V100")
    _, j = _run([_job(0, 0.0, 2000.0, rec)], cluster="gavel-1:1:1")
    assert j.loc["j0", "gpu_type_run"] == "P100"
    _, j = _run([_job(0, 0.0, 2000.0, rec)], policy="gavel-fifo", cluster="gavel-1:1:1")
    assert j.loc["j0", "gpu_type_run"] == "V100"


def test_the_same_seed_gives_the_same_run_and_the_window_ends_it():
    def mk(i):
        return _job(i, 600.0 * i, 3000.0 + 500 * (i % 12), RESNET if i % 2 else "CycleGAN")

    jobs = [mk(i) for i in range(12)]
    a = _run(jobs, policy="gavel-max-min-fairness", cluster="gavel-1:1:1", seed=3)[1]
    b = _run(jobs, policy="gavel-max-min-fairness", cluster="gavel-1:1:1", seed=3)[1]
    assert a.equals(b)
    # a window: arrivals go on while it runs (Gavel's generator never stops), from `more`
    asked = []

    def more(n):
        asked.append(n)
        return [mk(i) for i in range(n, 2 * n)]

    _, w = _run(jobs, cluster="gavel-1:1:1", window=(0, 10), more=more)
    assert (w.loc[[f"j{i}" for i in range(10)], "state"] == "done").all()
    assert asked and len(w) > 12 and (w.state != "done").any()
    with pytest.raises(DlschedError, match="ran out of jobs"):
        _run(jobs, cluster="gavel-1:1:1", window=(0, 10))


def test_jobs_that_can_never_run_are_refused_before_the_run():
    with pytest.raises(DlschedError, match="can run on no GPU type"):
        _run([_job(0, 0.0, 100.0, gpus=4)], cluster="gavel-2:2:2")
    with pytest.raises(DlschedError, match="not a job type"):
        _run([JobSpec(job_id="x", submit_time_s=0.0, kind="dl", model="resnet50", iterations=10.0,
                      tasks=_tasks(1))])
    with pytest.raises(DlschedError, match="Gavel's policies"):
        _run([_job(0, 0.0, 100.0)], policy="fifo")
