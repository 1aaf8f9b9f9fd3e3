""""Why pending?": after a round each waiting job has its place in the policy's order
(Scheduler.queue_order) and a reason in the user's terms (JobRecord.why), from the filters'
reasons, the gang commit, and the blocking order."""
import pytest

import dlsched.policies  # noqa: F401
from dlsched.cluster import load_cluster
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.scheduler.events import JobArrival
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

# seed002: 2 nodes of 4 GPUs and 2 of 2 GPUs. j0..j2 take 10 of the 12 GPUs (one 2-GPU block left).
JOBS = [dict(workers=1, gpus_per_worker=4), dict(workers=1, gpus_per_worker=4), dict(workers=1, gpus_per_worker=2),
        dict(workers=1, gpus_per_worker=4),                        # j3: no 4-GPU block left
        dict(workers=3, gpus_per_worker=2),                        # j4: a gang of 6 GPUs, 2 free
        dict(workers=1, gpus_per_worker=1, gpu_type="K80"),        # j5: no K80 in the cluster: rejected
        dict(workers=1, gpus_per_worker=1)]                        # j6: fits


def waiting(profile: str) -> tuple[list, dict]:
    b = SimBackend(load_cluster("seed002"), [])
    s = Scheduler(build_profile(profile))
    for i, kw in enumerate(JOBS):
        s.handle(JobArrival(0.0, job_from_row(dict(job_id=f"j{i}", submit_time_s=0, duration_s=100, **kw))), b)
    plan = s.round(b.snapshot())
    placed = {d.job_id for d in plan.decisions}
    return sorted(placed), {j: s.jobs[j].why for j in s.queue_order if j not in placed}


def test_strict_fifo_names_the_head_and_the_jobs_behind_it():
    placed, why = waiting("fifo")
    assert placed == ["j0", "j1", "j2"]
    assert why["j3"].endswith("needs 4 GPUs on one node; the largest free block is 2")
    for j in ("j4", "j6"):
        assert why[j] == "behind j3 (in order: nothing starts before it)"


@pytest.mark.parametrize("profile", ["fifo-backfill", "volcano-gang", "tiresias"])
def test_gang_profiles_say_how_far_each_job_got(profile):
    placed, why = waiting(profile)
    assert "j6" in placed
    assert why["j3"] == "gang: 0 of 1 tasks fit; needs 4 GPUs on one node; the largest free block is 2"
    assert why["j4"] == "gang: needs 6 GPUs in all; 2 free"


def test_a_job_asking_for_a_gpu_type_the_cluster_lacks_is_rejected_not_left_at_the_head():
    """It would wait forever, and under strict FIFO everything behind it too."""
    b = SimBackend(load_cluster("seed002"), [])
    s = Scheduler(build_profile("fifo"))
    for i, kw in enumerate([JOBS[5], JOBS[6]]):
        s.handle(JobArrival(0.0, job_from_row(dict(job_id=f"j{i}", submit_time_s=0, duration_s=100, **kw))), b)
    assert s.jobs["j0"].state.value == "rejected"
    assert s.jobs["j0"].reject_reason == "no node has K80 GPUs (the cluster has V100)"
    assert [d.job_id for d in s.round(b.snapshot()).decisions] == ["j1"]


def test_a_job_larger_than_every_node_of_its_gpu_type_is_rejected():
    from dlsched.cluster import cluster_from_dict
    cl = cluster_from_dict({"name": "two-types", "node_groups": [
        {"count": 2, "gpus": 8, "gpu_type": "V100", "gpu_mem_gb": 16, "cpus": 32, "mem_gb": 256},
        {"count": 2, "gpus": 2, "gpu_type": "K80", "gpu_mem_gb": 12, "cpus": 16, "mem_gb": 64}]})
    b = SimBackend(cl, [])
    s = Scheduler(build_profile("fifo-gang"))
    rows = [dict(workers=1, gpus_per_worker=4, gpu_type="K80"),     # no K80 node has 4 GPUs
            dict(workers=3, gpus_per_worker=2, gpu_type="K80"),     # 6 K80s in all; the cluster has 4
            dict(workers=2, gpus_per_worker=2, gpu_type="K80"),     # fits
            dict(workers=1, gpus_per_worker=4, gpu_type="V100")]    # fits
    for i, kw in enumerate(rows):
        s.handle(JobArrival(0.0, job_from_row(dict(job_id=f"j{i}", submit_time_s=0, duration_s=100, **kw))), b)
    assert [s.jobs[f"j{i}"].reject_reason for i in range(4)] == [
        "a task is larger than any K80 node", "the job needs more than all the K80 nodes together", "", ""]


def test_a_decided_job_has_no_reason_and_positions_follow_the_order():
    b = SimBackend(load_cluster("seed002"), [])
    s = Scheduler(build_profile("sjf"))
    for i, d in enumerate([300, 100, 200]):
        s.handle(JobArrival(0.0, job_from_row(dict(job_id=f"k{i}", submit_time_s=0, duration_s=d, workers=1,
                                                       gpus_per_worker=4))), b)
    s.round(b.snapshot())
    assert s.queue_order == ("k1", "k2", "k0")          # shortest first
    assert [s.jobs[j].why for j in s.queue_order] == \
        ["", "", "gang: 0 of 1 tasks fit; needs 4 GPUs on one node; the largest free block is 2"]


def test_the_last_rounds_order_stays_when_the_waiting_list_changes_after_it():
    """A static order's round reads the waiting list itself (no copy a round); jobs that arrive
    or leave before the next round do not change what `queue_order` and `why` say of it."""
    def after_round():
        b = SimBackend(load_cluster("seed002"), [])
        s = Scheduler(build_profile("fifo"))
        s._lend = SimBackend.lend_queue      # (as Scheduler.run sets it from its backend)
        for i, kw in enumerate(JOBS):
            s.handle(JobArrival(0.0, job_from_row(dict(job_id=f"j{i}", submit_time_s=0, duration_s=100, **kw))), b)
        s.round(b.snapshot())
        assert s._why_box.ex.queue is s.queue
        return s, b
    still, _ = after_round()
    s, b = after_round()
    for jid in ("a0", "k0", "j35"):       # before, after and inside the list in fifo's order
        s.handle(JobArrival(0.0, job_from_row(dict(job_id=jid, submit_time_s=0, duration_s=100,
                                                   workers=1, gpus_per_worker=4))), b)
    s._remove_from_queue(s.jobs["j4"])
    s._remove_from_queue(s.jobs["a0"])
    now = [r.job_id for r in s.queue]
    assert now[:2] == ["j0", "j1"] and "j35" in now and "j4" not in now
    assert s.queue_order == still.queue_order == tuple(f"j{i}" for i in range(len(JOBS)) if i != 5)
    assert {j: s.jobs[j].why for j in still.queue_order} == {j: still.jobs[j].why for j in still.queue_order}
    assert s.jobs["k0"].why != still.jobs["j6"].why      # not in that round's queue: not "behind j3"
