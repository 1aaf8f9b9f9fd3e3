"""A job that declares itself non-preemptible (JobSpec.preemptible False; a runtime spec's
`preemptible: false`) is never suspended, migrated or resized once it runs, by the policies that
move running jobs on their own: Gandiva (time slicing, migration, grow-shrink), Optimus, Gavel's
leases and Pollux skip it when they choose, and do not reach Transaction's refusal. Liquid only
shapes jobs before they start. The same workload with every job preemptible shows that the jobs
made fixed here are moved otherwise, so the checks are not vacuous."""
from __future__ import annotations

import dataclasses
import random

import pytest

import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

FIXED = ("j0", "j5", "j7", "j11", "j13")
MOVES = ("suspend", "migrate", "resize")


def _cluster():
    return cluster_from_dict({"node_groups": [
        {"count": 2, "gpus": 4, "gpu_type": "V100", "gpu_mem_gb": 32, "cpus": 32, "mem_gb": 256},
        {"count": 1, "gpus": 4, "gpu_type": "K80", "gpu_mem_gb": 12, "cpus": 32, "mem_gb": 256}]})


def _jobs(fixed=()):
    rng = random.Random(7)
    out = []
    for i in range(14):
        j = job_from_row(dict(job_id=f"j{i}", submit_time_s=float(i * 200),
                              model=rng.choice(["resnet50", "vgg16", "lstm"]), workers=rng.choice([1, 1, 2, 4]),
                              batch_size=256, iterations=rng.choice([3000, 8000, 20000]), cpus_per_worker=2,
                              mem_gb_per_worker=8))
        out.append(dataclasses.replace(j, preemptible=j.job_id not in fixed))
    return out


def _moved_while_running(policy: str, fixed=()) -> tuple[dict[str, list], int]:
    """{job: the suspends, migrations and resizes after its first start}, and the jobs done."""
    sched = Scheduler(build_profile(policy))
    sched.run(SimBackend(_cluster(), _jobs(fixed)))
    started: set[str] = set()
    moved: dict[str, list] = {}
    for e in sched.log:
        kind, job = e[1], e[2]
        if kind in MOVES and job in started:
            moved.setdefault(job, []).append((float(e[0]), kind))
        if kind in ("launch", "resume", "resize"):
            started.add(job)
    done = sum(1 for r in sched.jobs.values() if r.state.value == "done")
    return moved, done


@pytest.mark.parametrize("policy", ["gandiva", "optimus", "gavel-max-min-fairness-perf"])
def test_a_non_preemptible_job_is_never_moved(policy):
    before, _ = _moved_while_running(policy)
    assert set(FIXED) & set(before), f"{policy} moves none of {FIXED} anyway: the test shows nothing"
    moved, done = _moved_while_running(policy, FIXED)
    assert not {j: moved[j] for j in FIXED if j in moved}, moved
    assert done == 14                                   # no policy error stopped a round
    assert moved, f"{policy} still moves the preemptible jobs"


@pytest.mark.parametrize("policy", ["liquid", "pollux"])
def test_policies_that_move_no_running_job_here(policy):
    moved, done = _moved_while_running(policy, FIXED)
    assert not {j: moved[j] for j in FIXED if j in moved} and done == 14


def test_gandiva_time_slicing_leaves_a_fixed_holder_alone():
    """1 node x 2 GPUs: a (fixed) and b run; c arrives with nothing free. It joins b's ring, not
    a's: b and c take turns, a runs straight through."""
    cl = cluster_from_dict({"node_groups": [{"count": 1, "gpus": 2, "gpu_type": "P40", "gpu_mem_gb": 24,
                                             "cpus": 32, "mem_gb": 256}]})

    def job(j, t, fixed=False):
        spec = job_from_row(dict(job_id=j, submit_time_s=t, workers=1, model="resnet50", duration_s=3000.0,
                                 cpus_per_worker=2, mem_gb_per_worker=8))
        return dataclasses.replace(spec, preemptible=not fixed)
    params = {"params": {"gandiva_grow": {"enabled": False}}}
    sched = Scheduler(build_profile("gandiva", params))
    sched.run(SimBackend(cl, [job("a", 0, fixed=True), job("b", 0), job("c", 100)]))
    sus = [e[2] for e in sched.log if e[1] == "suspend"]
    assert sus and "a" not in sus and "b" in sus and "c" in sus
    # without the declaration a is the ring holder (lowest GPU) and is suspended at 100
    sched = Scheduler(build_profile("gandiva", params))
    sched.run(SimBackend(cl, [job("a", 0), job("b", 0), job("c", 100)]))
    assert [e[:3] for e in sched.log if e[1] == "suspend"][0] == (100.0, "suspend", "a")
