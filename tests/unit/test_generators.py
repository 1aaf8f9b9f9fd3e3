"""Synthetic workload generators: determinism, parameters, and the shape of each workload."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from dlsched.core.errors import DlschedError
from dlsched.core.types import Role
from dlsched.workload import GENERATORS, generate, parse_ref
from dlsched.workload.generators import POISSON_MODELS, _iteration_s
from dlsched.workload.models import get_model
from dlsched.workload.schema import job_from_row, job_to_row

SMALL = {"seed000": {}, "poisson": {"jobs": 200}, "sample": {}, "seed002": {}, "liquid": {"jobs": 30},
         "seed001": {"jobs": 10}, "gavel": {"rate": 2, "jobs": 50, "multi_gpu": 1}}


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_deterministic_per_seed(name):
    gen = GENERATORS[name]
    a, b, c = gen(7, **SMALL[name]), gen(7, **SMALL[name]), gen(8, **SMALL[name])
    assert a == b
    assert a != c


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_jobs_survive_the_schema(name):
    import dataclasses
    for job in GENERATORS[name](1, **SMALL[name]):
        # the schema keeps model names lower-case (a throughput table matches them either way)
        want = dataclasses.replace(job, model=job.model.lower()) if job.model else job
        assert job_from_row(job_to_row(job)) == want


@pytest.mark.parametrize("ref,match", [
    ("seed000:colour=red", "'colour'"),
    ("seed000:jobs=0", "'jobs'"),
    ("seed000:tasks=2.5", "'tasks'"),
    ("seed000:span_s=-1", "'span_s'"),
    ("poisson:rate=0", "'rate'"),
    ("poisson:jobs=many", "'jobs'"),
    ("poisson:users=0", "'users'"),
    ("sample:jobs=-3", "'jobs'"),
    ("poisson:jobs", "key=value"),
    ("poisson:jobs=1,jobs=2", "twice"),
    ("nosuch", "unknown workload generator"),
])
def test_parameter_validation(ref, match):
    with pytest.raises(DlschedError, match=match):
        generate(ref)


def test_parse_ref():
    assert parse_ref("poisson:jobs=200,rate=0.02") == ("poisson", {"jobs": 200, "rate": 0.02})
    assert parse_ref("sample") == ("sample", {})
    assert parse_ref("x: a = 1 , b=two,") == ("x", {"a": 1, "b": "two"})
    assert generate("poisson:jobs=5,seed=3") == generate("poisson:jobs=5", seed=3)
    with pytest.raises(DlschedError, match="seed"):
        generate("poisson:jobs=5", seed=-1)


def test_seed000_shape():
    jobs = generate("seed000")
    assert len(jobs) == 40
    assert all(j.kind == "tasks" and len(j.tasks) == 30 for j in jobs)
    assert all(0 <= j.submit_time_s < 3000 for j in jobs)
    assert all(t.role is Role.TASK and 100 <= t.duration_s <= 600 for j in jobs for t in j.tasks)
    demand = np.array([t.demand for j in jobs for t in j.tasks])
    gpu, cpu, mem, disk, net = demand.T
    assert set(gpu) <= {0.0, 1.0}
    assert sum(1 for j in jobs if j.gpus > 0) == 10                   # a quarter of the jobs
    # One dominant resource per job at 25-50 % of a node (32 cores, 128 GB, 1000 MB/s, 10 Gbps),
    # the others at 2-8 %.
    frac = np.stack([cpu / 32, mem / 128, disk / 1000, net / 10], axis=1)
    assert frac.min() >= 0.02 - 1e-3 and frac.max() <= 0.5 + 1e-3
    per_job = np.array([[t.demand[1] / 32, t.demand[2] / 128, t.demand[3] / 1000, t.demand[4] / 10]
                        for j in jobs for t in j.tasks[:1]])
    assert ((per_job >= 0.25 - 1e-3).sum(axis=1) == 1).all()
    # Heavy load on the seed000 cluster (20 x 4 GPUs, 32 cores, 128 GB, 1000 MB/s, 10 Gbps):
    # all tasks at once ask far more than the cluster has...
    cluster = np.array([80, 640, 2560, 20_000, 200])
    assert (demand.sum(axis=0)[1:] > cluster[1:]).all() and gpu.sum() > cluster[0]
    # ...and the disk / network work over the arrival window exceeds what it can serve.
    work = np.array([t.duration_s * np.array(t.demand) for j in jobs for t in j.tasks]).sum(axis=0)
    assert (work[3:] > cluster[3:] * 3000).all()
    # demands differ between jobs
    assert len({j.tasks[0].demand for j in jobs}) > 30
    other = generate("seed000:jobs=5,tasks=2,span_s=10")
    assert len(other) == 5 and all(len(j.tasks) == 2 and j.submit_time_s < 10 for j in other)


def test_poisson_shape():
    jobs = generate("poisson", seed=2)
    assert len(jobs) == 1000 and all(j.kind == "dl" for j in jobs)
    gaps = np.diff([j.submit_time_s for j in jobs])
    assert jobs[0].submit_time_s == 0.0 and (gaps >= 0).all()
    assert 50 < gaps.mean() < 70                                    # rate 1/60 jobs/s
    mix = Counter(j.num_workers for j in jobs)
    assert set(mix) <= {1, 2, 4, 8}
    assert 0.65 < mix[1] / 1000 < 0.75 and 0.02 < mix[8] / 1000 < 0.08
    dur = np.array([j.duration_s for j in jobs])
    assert dur.min() >= 60 * 10 ** 1.5 - 0.1 and dur.max() <= 60 * 10 ** 4 + 0.1
    assert 0.15 < (dur > 60 * 10 ** 3).mean() < 0.25                  # the long-job branch
    assert {j.model for j in jobs} == set(POISSON_MODELS)
    assert all(j.batch_size == get_model(j.model).default_batch * j.num_workers for j in jobs)
    assert all(j.iterations is None for j in jobs)
    assert {j.user for j in jobs} == {f"u{i}" for i in range(8)}
    fast = generate("poisson:jobs=100,rate=1")
    assert len(fast) == 100 and fast[-1].submit_time_s < 300


def test_sample_shape():
    jobs = generate("sample")
    assert len(jobs) == 60 and all(j.kind == "dl" for j in jobs)
    assert all(0 <= j.submit_time_s < 7200 for j in jobs)
    mix = Counter(j.num_workers for j in jobs)
    assert set(mix) == {1, 2, 4, 8} and mix[8] <= 3
    assert all(j.gpus <= 12 for j in jobs)                           # the seed002 cluster has 12 GPUs
    for j in jobs:
        m = get_model(j.model)
        assert m is not None and m.gpu_mem_gb <= 32
        assert j.batch_size == m.default_batch * j.num_workers and j.iterations >= 1
        one_v100_min = j.iterations * _iteration_s(j.model, j.batch_size) / 60
        assert 4.5 <= one_v100_min <= 61
        if j.deadline_s is not None:
            assert j.deadline_s > j.submit_time_s
    ps_jobs = [j for j in jobs if j.comm == "ps"]
    assert 1 <= len(ps_jobs) <= 12 and all(j.num_ps == 1 and j.num_workers > 1 for j in ps_jobs)
    assert 15 <= sum(j.deadline_s is not None for j in jobs) <= 45


def test_job_like_builds_what_job_from_row_builds():
    """A generator's jobs of one shape are built like the first (schema.job_like): the same
    JobSpec as a full job_from_row of the row, and the same one-line errors for its own columns."""
    from dlsched.core.errors import InputError
    from dlsched.workload.schema import job_like
    rows = [job_to_row(j) for j in GENERATORS["poisson"](3, jobs=300)]
    bases = {}
    for row in rows:
        key = (row["model"], row["workers"])
        base = bases.setdefault(key, job_from_row(row))
        assert job_like(base, row) == job_from_row(row)
    base, row = next(iter(bases.values())), rows[0]
    for col, bad in (("submit_time_s", -1.0), ("duration_s", float("inf")), ("job_id", "  "),
                     ("duration_s", "ten")):
        with pytest.raises(InputError) as want:
            job_from_row({**row, col: bad}, file="w.csv", line=4)
        with pytest.raises(InputError) as got:
            job_like(base, {**row, col: bad}, file="w.csv", line=4)
        assert str(got.value) == str(want.value)
    tasks = GENERATORS["seed000"](1)[0]
    with pytest.raises(ValueError, match="dl jobs only"):
        job_like(tasks, job_to_row(tasks))
