"""Liquid's job phases in the simulator (dlsched.sim.phases): launch, iterations, saving; the
pre-scheduling of the next job during a saving phase; the schema's phase columns."""
import pytest

from dlsched.api import simulate
from dlsched.cluster.topology import cluster_from_dict
from dlsched.core.errors import InputError
from dlsched.core.types import Launch, Plan, TaskPlacement
from dlsched.scheduler import events as ev
from dlsched.sim import SimBackend
from dlsched.workload.io import load_workload
from dlsched.workload.models import get_model
from dlsched.workload.schema import job_from_row

PRE = {"policies": {"liquid-immediate": {"params": {"liquid": {"prescheduling": True}}}}}


def one_gpu():
    return cluster_from_dict({"name": "one-gpu", "node_groups": [
        {"count": 1, "gpus": 1, "gpu_type": "T4", "gpu_mem_gb": 16, "cpus": 8, "mem_gb": 32, "nic_gbps": 10}]})


def job(jid, submit=0.0, **kw):
    return job_from_row({"job_id": jid, "submit_time_s": submit, "duration_s": 100, **kw})


def finishes(res):
    return dict(zip(res.jobs.job_id, res.jobs.finish_s))


def run_alone(spec):
    b = SimBackend(one_gpu(), [spec])
    b.poll()
    b.apply(Plan([Launch(spec.job_id, (TaskPlacement(0, 0, (0,)),))]))
    batches = []
    while (out := b.poll()) is not None:
        batches += [(b.now(), type(e)) for e in out]
    return b, batches


def test_one_job_runs_launch_then_iterations_then_saving():
    b, batches = run_alone(job("a", launch_s=20, save_s=30))
    assert batches == [(pytest.approx(150.0), ev.JobFinish)]     # 20 + 100 + 30
    st = b.job_stats("a")
    assert st["first_progress_s"] == pytest.approx(20.0)
    assert st["gpu_s"] == pytest.approx(150.0)                    # its GPU held in all three
    assert [k for _, k, j, _ in b.log if j == "a" and k in ("saving", "finish")] == ["saving", "finish"]
    assert [t for t, k, j, _ in b.log if j == "a" and k == "saving"] == [pytest.approx(120.0)]


def test_launch_from_data_and_model_size_over_the_nic():
    b, batches = run_alone(job("d", model="resnet50", data_gb=5.0))
    launch = (5e9 + get_model("resnet50").param_bytes) / (10 * 1e9 / 8)    # 10 Gbps NIC
    assert b.job_stats("d")["first_progress_s"] == pytest.approx(launch)
    assert batches[-1][0] == pytest.approx(launch + 100)


def test_without_phases_a_job_runs_as_before():
    b, batches = run_alone(job("p"))
    assert batches == [(pytest.approx(100.0), ev.JobFinish)]
    assert b.job_stats("p")["first_progress_s"] == 0.0


@pytest.mark.parametrize("launch_b, finish_b_off, finish_b_on", [
    (40, 150 + 40 + 100, 120 + 40 + 100),    # B's launch outlasts A's saving: B starts at 160
    (10, 150 + 10 + 100, 150 + 100),         # A's saving outlasts B's launch: B starts at 150
])
def test_prescheduling_overlaps_the_next_launch_with_the_saving(launch_b, finish_b_off, finish_b_on):
    # One GPU. A: launch 20, 100 s of iterations, saving 30 (saving from 120 to 150).
    # B, waiting from t=0: without pre-scheduling it is placed at 150; with it, at 120.
    jobs = [job("a", launch_s=20, save_s=30), job("b", submit=1, launch_s=launch_b)]
    off = finishes(simulate(one_gpu(), jobs, "liquid-immediate"))
    on = finishes(simulate(one_gpu(), jobs, "liquid-immediate", policy_config=PRE))
    assert off == {"a": pytest.approx(150), "b": pytest.approx(finish_b_off)}
    assert on == {"a": pytest.approx(150), "b": pytest.approx(finish_b_on)}


def test_prescheduling_is_refused_where_the_backend_cannot_do_it():
    from dlsched.core.errors import DlschedError
    from dlsched.scheduler.core import Scheduler
    from dlsched.scheduler.profile import build_profile

    class NoPrescheduling(SimBackend):
        capabilities = SimBackend.capabilities - {"prescheduling"}
    sched = Scheduler(build_profile("liquid", PRE["policies"]["liquid-immediate"]))
    with pytest.raises(DlschedError, match="prescheduling"):
        sched.run(NoPrescheduling(one_gpu(), [job("a")]))


def test_phase_columns_default_to_none_and_round_trip(tmp_path):
    spec = job("a")
    assert (spec.data_gb, spec.launch_s, spec.save_s) == (None, None, 0.0)
    f = tmp_path / "w.csv"
    f.write_text("job_id,submit_time_s,duration_s,data_gb,launch_s,save_s\na,0,10,2.5,,4\n")
    (j,) = load_workload(str(f))
    assert (j.data_gb, j.launch_s, j.save_s) == (2.5, None, 4.0)


@pytest.mark.parametrize("col, value, message", [
    ("save_s", "-1", "must be >= 0"), ("data_gb", "lots", "expected a number"), ("launch_s", "inf", "finite")])
def test_bad_phase_column_names_file_line_and_field(tmp_path, col, value, message):
    f = tmp_path / "bad.csv"
    f.write_text(f"job_id,submit_time_s,duration_s,{col}\na,0,10,1\nb,0,10,{value}\n")
    with pytest.raises(InputError) as e:
        load_workload(str(f))
    text = str(e.value)
    assert "bad.csv" in text and "3" in text and col in text and message in text
    assert "\n" not in text


def test_phases_are_for_dl_jobs():
    with pytest.raises(InputError, match="save_s"):
        job_from_row({"job_id": "t", "submit_time_s": 0, "kind": "tasks", "duration_s": 5, "save_s": 3})
