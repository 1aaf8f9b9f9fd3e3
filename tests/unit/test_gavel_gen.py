"""The `gavel` generator: Gavel's own job generator, draw for draw (dlsched.workload.gavel_gen)."""
from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from dlsched.cli.main import main
from dlsched.core.errors import DlschedError
from dlsched.core.types import Role
from dlsched.workload import GENERATORS, generate
from dlsched.workload.gavel_gen import JOB_TYPES, gen_gavel
from dlsched.workload.throughputs import load_throughputs

V100 = load_throughputs("gavel")

# What Gavel's own code generated (stanford-futuredata/gavel @ c4fa400): its simulator,
# `scheduler.Scheduler(fifo, throughputs_file="simulation_throughputs.json", seed=S,
# simulate=True).simulate({"v100": 25 or 64, ...}, lam=3600/rate, jobs_to_complete={0..199},
# generate_multi_gpu_jobs=..., generate_multi_priority_jobs=...)`, run from a copy of its
# repository outside this project with only unused modules stubbed (cvxpy, matrix_completion, the
# gRPC runtime; for SLOs `_SLOs = {}`, which Gavel otherwise sets only with a price directory),
# then printed from `sched._all_jobs` as (job_type, scale_factor, arrival, duration, total_steps,
# priority_weight, SLO) with floats as repr. The whole runs (319 to 1,504 jobs) matched exactly.
GAVEL_SEED0_RATE1_MULTI = [
    ("ResNet-18 (batch size 64)", 8, 0.0, 68344.35010595087, 17484476.26110642, 1.0, None),
    ("Transformer (batch size 16)", 1, 978.344291641206, 31016.60914593223, 343170.46864225325, 1.0, None),
    ("Recommendation (batch size 2048)", 1, 3807.099310116383, 2146.6088374387864, 16034.37819420177, 1.0, None),
    ("Recommendation (batch size 8192)", 1, 5470.17078262555, 7386.674819745945, 20989.313058424774, 1.0, None),
    ("LM (batch size 5)", 4, 8804.271777973483, 6858.69820697011, 869104.8688980676, 1.0, None),
]
GAVEL_SEED0_RATE1 = [
    ("ResNet-18 (batch size 64)", 1, 0.0, 68344.35010595087, 1646636.2758419, 1.0, None),
    ("Transformer (batch size 16)", 1, 978.344291641206, 31016.60914593223, 343170.46864225325, 1.0, None),
    ("Recommendation (batch size 2048)", 1, 3807.099310116383, 2146.6088374387864, 16034.37819420177, 1.0, None),
    ("Recommendation (batch size 8192)", 1, 5470.17078262555, 7386.674819745945, 20989.313058424774, 1.0, None),
    ("LM (batch size 5)", 1, 8804.271777973483, 6858.69820697011, 748740.885162768, 1.0, None),
]
# seed 3, rate 2.5 (lam 1440), multi-GPU, priorities and SLOs; the last column is the deadline
# Gavel recorded (`_SLOs[job_id]`: SLO x duration + the time of the round that admitted the job).
GAVEL_SEED3_RATE2_5_ALL = [
    ("Recommendation (batch size 8192)", 1, 0.0, 29576.147178564286, 84040.92874556559, 1.0, 2.0,
     59152.29435712857),
    ("ResNet-50 (batch size 64)", 1, 2270.4202850507336, 358186.99856243725, 1574151.2033238562, 1.0, 2.0,
     718891.6722633303),
    ("ResNet-50 (batch size 64)", 4, 4755.447829882925, 9588.591613873887, 90630.88434708866, 1.0, 1.2,
     16543.79563314044),
    ("Transformer (batch size 256)", 1, 5711.111921645965, 23709.741856365228, 37820.37439260784, 1.0, 10.0,
     242854.8501338686),
    ("ResNet-18 (batch size 64)", 4, 6147.862035431409, 3292.740981387507, 314747.0008354938, 5.0, 1.2,
     10428.66662160589),
]


def _duration(job) -> float:
    """The job's run time alone on V100s, back from total_steps."""
    return job.iterations / V100.steps_per_s(job.model, int(job.gpus), "V100")


@pytest.mark.parametrize("ref,seed,expected", [
    ("gavel:rate=1,jobs=5,multi_gpu=1", 0, GAVEL_SEED0_RATE1_MULTI),
    ("gavel:rate=1,jobs=5", 0, GAVEL_SEED0_RATE1),
    ("gavel:rate=2.5,jobs=5,multi_gpu=1,priorities=1,slos=1", 3, GAVEL_SEED3_RATE2_5_ALL),
])
def test_first_jobs_are_gavels(ref, seed, expected):
    jobs = generate(ref, seed=seed)
    assert [j.job_id for j in jobs] == [f"gavel-{i}" for i in range(5)]
    for job, (job_type, sf, arrival, duration, steps, weight, slo, *gavel_deadline) in zip(jobs, expected):
        assert (job.model, int(job.gpus), job.submit_time_s, job.iterations, job.priority) == \
            (job_type, sf, arrival, steps, int(weight))                      # exact, floats too
        # total_steps = duration x V100 throughput, as Gavel computes it
        assert job.iterations == duration * V100.steps_per_s(job_type, sf, "V100")
        if slo is None:
            assert job.deadline_s is None
        else:
            assert job.deadline_s == slo * duration + arrival
            # Gavel's deadline starts at the round that admitted the job: up to one round later
            assert job.deadline_s <= gavel_deadline[0] <= job.deadline_s + 360.0
        # the trace reader's mapping: gang of 1-GPU workers, no duration, model = job type
        assert job.kind == "dl" and job.comm == "allreduce" and job.duration_s is None
        assert all(t.role is Role.WORKER and t.demand[0] == 1.0 for t in job.tasks)


def test_deterministic_per_seed_and_registered():
    assert GENERATORS["gavel"](5, rate=2, jobs=50, multi_gpu=1) == gen_gavel(5, rate=2, jobs=50, multi_gpu=1)
    a = generate("gavel:rate=2,jobs=50,multi_gpu=1", seed=5)
    assert a == generate("gavel:rate=2,jobs=50,multi_gpu=1", seed=5)
    assert a == generate("gavel:rate=2,jobs=50,multi_gpu=1,seed=5")
    assert a != generate("gavel:rate=2,jobs=50,multi_gpu=1", seed=6)
    # a longer run starts with the shorter one; ids are padded to the last index's width
    b = generate("gavel:rate=2,jobs=500,multi_gpu=1", seed=5)
    assert [(j.model, j.gpus, j.iterations, j.submit_time_s) for j in b[:50]] == \
        [(j.model, j.gpus, j.iterations, j.submit_time_s) for j in a]
    assert b[7].job_id == "gavel-007" and a[7].job_id == "gavel-07"
    # rate and lam name the same arrivals
    assert generate("gavel:lam=1440,jobs=50", seed=1) == generate("gavel:rate=2.5,jobs=50", seed=1)
    assert {j.submit_time_s for j in generate("gavel:lam=0,jobs=20")} == {0.0}


def test_distributions_over_10000_jobs():
    rate = 2.0
    jobs = generate(f"gavel:rate={rate},jobs=10000,multi_gpu=1,priorities=1,slos=1", seed=11)
    n = len(jobs)
    gpus = Counter(int(j.gpus) for j in jobs)
    for sf, share in ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05)):
        assert abs(gpus[sf] / n - share) < 0.015, (sf, gpus[sf] / n)
    distributed = {name for name, d in JOB_TYPES if d}
    assert all(j.model in distributed for j in jobs if j.gpus > 1)
    durations = [_duration(j) for j in jobs]
    assert all(60 * 10 ** 1.5 * (1 - 1e-9) <= d <= 60 * 10 ** 4 * (1 + 1e-9) for d in durations)
    long = sum(d >= 60 * 10 ** 3 for d in durations) / n
    assert abs(long - 0.2) < 0.015, long
    gaps = [b.submit_time_s - a.submit_time_s for a, b in itertools.pairwise(jobs)]
    assert jobs[0].submit_time_s == 0.0 and min(gaps) >= 0
    assert abs(sum(gaps) / len(gaps) / (3600 / rate) - 1) < 0.04
    assert abs(sum(j.priority == 5 for j in jobs) / n - 0.2) < 0.015
    assert {j.priority for j in jobs} == {1, 5}
    slos = Counter(round((j.deadline_s - j.submit_time_s) / d, 6) for j, d in zip(jobs, durations))
    assert set(slos) == {1.2, 2.0, 10.0}
    for slo, share in ((1.2, 0.33), (2.0, 0.34), (10.0, 0.33)):
        assert abs(slos[slo] / n - share) < 0.015, (slo, slos[slo] / n)


def test_single_gpu_jobs_still_draw_the_scale_factor():
    # Gavel draws the scale factor even without --generate-multi-gpu-jobs (then sets it to 1), so
    # both runs read the jobs stream alike up to the first multi-GPU job, whose type draw may be
    # repeated (until a distributed type); arrivals come from their own stream
    one = generate("gavel:rate=3,jobs=300", seed=2)
    multi = generate("gavel:rate=3,jobs=300,multi_gpu=1", seed=2)
    assert all(j.gpus == 1 for j in one) and {len(j.tasks) for j in multi} == {1, 2, 4, 8}
    assert [j.submit_time_s for j in one] == [j.submit_time_s for j in multi]
    k = next(i for i, j in enumerate(multi) if j.gpus > 1)
    assert k > 0 and one[:k] == multi[:k]
    assert _duration(one[k]) == pytest.approx(_duration(multi[k]), rel=1e-12)
    assert {j.model for j in one} == {name for name, _ in JOB_TYPES}   # all 26 types with 1 GPU
    # the draws are Python's random.Random, seeded as Gavel seeds them (seed + 2: jobs)
    r = random.Random(2 + 2).uniform(0, 1)
    assert int(multi[0].gpus) == (1 if r < 0.7 else 2 if r <= 0.8 else 4 if r <= 0.95 else 8)


@pytest.mark.parametrize("ref,seed,name", [
    ("gavel", 0, "'rate'"),
    ("gavel:jobs=5", 0, "'rate'"),
    ("gavel:rate=0", 0, "'rate'"),
    ("gavel:rate=fast", 0, "'rate'"),
    ("gavel:rate=1e-320", 0, "'rate'"),
    ("gavel:rate=1,jobs=0", 0, "'jobs'"),
    ("gavel:rate=1,jobs=2.5", 0, "'jobs'"),
    ("gavel:rate=1,multi_gpu=2", 0, "'multi_gpu'"),
    ("gavel:rate=1,priorities=-1", 0, "'priorities'"),
    ("gavel:rate=1,slos=yes", 0, "'slos'"),
    ("gavel:lam=-5", 0, "'lam'"),
    ("gavel:rate=1,lam=3600", 0, "'lam'"),
    ("gavel:rate=1,colour=red", 0, "'colour'"),
    ("gavel:rate=1", -1, "seed"),
])
def test_bad_parameters_give_one_line_naming_them(ref, seed, name):
    with pytest.raises(DlschedError, match=name) as e:
        generate(ref, seed=seed)
    assert "\n" not in str(e.value)


def test_cli_generate_and_describe(tmp_path, capsys):
    out = tmp_path / "x.csv"
    assert main(["workload", "generate", "gavel:rate=1,jobs=100", "--out", str(out)]) == 0
    assert "wrote 100 jobs" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == 101
    assert main(["workload", "describe", "gavel:rate=1,jobs=100", "--json"]) == 0
    assert '"jobs": 100' in capsys.readouterr().out
    assert main(["workload", "generate", "gavel:rate=0,jobs=100", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'rate'" in err
