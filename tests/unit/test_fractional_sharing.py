"""Fine-grained GPU sharing in the simulator: jobs asking for a fraction of a GPU are placed best
fit on GPU slots (never beside a task that holds a whole GPU) and slow each other by the speed
model's interference factor."""
import pytest

from dlsched.cluster.topology import cluster_from_dict
from dlsched.scheduler.core import Scheduler
from dlsched.scheduler.profile import build_profile
from dlsched.sim import SimBackend
from dlsched.workload.schema import job_from_row

import dlsched.policies  # noqa: F401  (registers the profiles)


def two_gpus():
    return cluster_from_dict({"name": "two-gpus", "node_groups": [
        {"count": 1, "gpus": 2, "gpu_type": "T4", "gpu_mem_gb": 16, "cpus": 16, "mem_gb": 64}]})


def job(jid, gpus, model, t=0.0):
    return job_from_row({"job_id": jid, "submit_time_s": t, "gpus_per_worker": gpus, "model": model,
                         "duration_s": 600, "mem_gb_per_worker": 2})


def first_round(jobs):
    b = SimBackend(two_gpus(), jobs)
    sched = Scheduler(build_profile("liquid-immediate"))
    for e in b.poll():
        sched.handle(e, b)
    plan = sched.round(b.snapshot())
    return b, {d.job_id: d.placements[0].gpu_ids for d in plan.decisions}, plan


def test_fractions_share_a_gpu_best_fit_and_never_beside_a_whole_gpu():
    # FIFO order (ties by job id): p, then a, b, c, d
    jobs = [job("p", 1.0, "resnet50"), job("pa", 0.5, "vae"), job("pb", 0.25, "dcgan"),
            job("pc", 0.25, "mobilenet"), job("pd", 0.5, "vae")]
    b, gpus, plan = first_round(jobs)
    # p takes GPU 0 whole; a, b and c fill GPU 1 (the fullest GPU they fit on); d fits nowhere
    assert gpus == {"p": (0,), "pa": (1,), "pb": (1,), "pc": (1,)}
    b.apply(plan)
    assert b.state.gpu_used[0, :2].tolist() == [1.0, 1.0] and b.state.gpu_load[0, :2].tolist() == [1, 3]
    assert b.usage()[0] == pytest.approx(2.0)


def test_jobs_on_one_gpu_slow_each_other_by_the_interference_factor():
    jobs = [job("a", 0.5, "vae"), job("b", 0.5, "resnet50")]
    b, gpus, plan = first_round(jobs)
    assert gpus == {"a": (0,), "b": (0,)}                 # best fit: both on GPU 0, GPU 1 left free
    b.apply(plan)
    f = b.speed.params.factor
    assert b.runs["a"].rate == pytest.approx(f("vae", "resnet50"))     # duration jobs: rate 1 alone
    assert b.runs["b"].rate == pytest.approx(f("resnet50", "vae"))
    assert f("vae", "resnet50") < 1 and f("resnet50", "vae") < 1


def test_a_whole_gpu_job_does_not_go_beside_a_fraction():
    jobs = [job("a", 0.25, "vae"), job("p", 1.0, "resnet50"), job("q", 1.0, "resnet50")]
    _, gpus, _ = first_round(jobs)
    assert gpus == {"a": (0,), "p": (1,)}                 # q waits: GPU 0 is partly taken
