"""Trace readers: Philly per-job CSV and Pollux workloads, and the bundled Pollux data."""
from __future__ import annotations

import filecmp
import math
import time
from collections import Counter
from pathlib import Path

import pytest

from dlsched.workload.efficiency import iterations_to_target

from dlsched.core.errors import DlschedError, InputError
from dlsched.workload import load_workload
from dlsched.workload import readers
from dlsched.workload.schema import job_from_row

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason=f"{TRACES} not available")

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"
POLLUX_HEADER = "name,time,application,num_replicas,batch_size"


def _write(tmp_path, text, name="t.csv"):
    f = tmp_path / name
    f.write_text(text)
    return f


# ----------------------------------------------------------------------------- Philly

def test_philly_conversion(tmp_path):
    f = _write(tmp_path, f"{PHILLY_HEADER}\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
                         "2017-10-09 06:13:03,2951.0,4,11804.0,103959\n2017-10-09 06:13:03,0,8,0,\n")
    jobs = load_workload(f)
    assert [j.job_id for j in jobs] == ["philly-1", "philly-2", "philly-0"]
    a, b, c = jobs
    assert (a.submit_time_s, c.submit_time_s) == (0.0, 2932.0)
    assert a.user == "103959" and b.user == "default" and c.user == "11cb48"   # VC hash stays a string
    assert (a.queue, b.queue, c.queue) == ("103959", "default", "11cb48")      # the VC is the queue
    assert a.num_workers == 4 and a.gpus == 4.0 and a.duration_s == 2951.0
    # The fast path builds exactly what the schema would.
    expect = job_from_row({"job_id": "philly-1", "submit_time_s": 0.0, "workers": 4, "gpus_per_worker": 1,
                           "cpus_per_worker": 4, "mem_gb_per_worker": 16, "duration_s": 2951.0,
                           "user": "103959", "queue": "103959", "comm": "allreduce"})
    assert a == expect


@pytest.mark.parametrize("row,field", [
    ("2017-10-09 07:01:55,66.0,0,0,vc", "num_gpus"),
    ("2017-10-09 07:01:55,66.0,x,0,vc", "num_gpus"),
    ("2017-10-09 07:01:55,66.0,1.5,0,vc", "num_gpus"),
    ("2017-10-09 07:01:55,66.0,,0,vc", "num_gpus"),
    ("2017-10-09 07:01:55,-1,1,0,vc", "duration"),
    ("2017-10-09 07:01:55,abc,1,0,vc", "duration"),
    ("yesterday,66.0,1,66,vc", "timestamp"),
    ("2017-13-09 07:01:55,66.0,1,66,vc", "timestamp"),
])
def test_philly_bad_rows(tmp_path, row, field):
    ok = "2017-10-09 07:01:55,66.0,1,66.0,vc"
    f = _write(tmp_path, f"{PHILLY_HEADER}\n{ok}\n{ok}\n{row}\n{ok}\n", "philly-bad.csv")
    with pytest.raises(InputError) as e:
        load_workload(f)
    assert (e.value.line, e.value.field) == (4, field)
    assert "philly-bad.csv" in str(e.value) and "line 4" in str(e.value) and field in str(e.value)


def test_philly_reports_first_bad_row_in_file_order(tmp_path):
    f = _write(tmp_path, f"{PHILLY_HEADER}\n2017-10-09 07:01:55,66.0,1,66.0,vc\n"
                         "2017-10-09 07:01:55,66.0,0,0,vc\nbad,-1,1,66.0,vc\n")
    with pytest.raises(InputError) as e:
        load_workload(f)
    assert (e.value.line, e.value.field) == (3, "num_gpus")


@needs_traces
def test_philly_full_trace():
    start = time.perf_counter()
    jobs = load_workload(TRACES / "philly" / "philly.csv.gz")
    elapsed = time.perf_counter() - start
    assert len(jobs) == 82_247
    hist = Counter(j.num_workers for j in jobs)
    assert hist == {1: 76_627, 2: 1_818, 4: 1_870, 8: 1_643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3}
    assert jobs[0].submit_time_s == 0.0
    # README: submissions 2017-09-04 10:30:41 .. 2017-12-22 08:02:11; 978,078 GPU-hours in total.
    assert jobs[-1].submit_time_s == 9_408_690.0
    assert sum(j.gpus * j.duration_s for j in jobs) / 3600 == pytest.approx(978_078, abs=1)
    assert Counter(j.user for j in jobs)["6214e9"] == 41_226
    assert elapsed < 10       # typically ~1 s; generous for slow machines


# ----------------------------------------------------------------------------- Pollux

def test_pollux_conversion(tmp_path):
    f = _write(tmp_path, f"{POLLUX_HEADER}\ncifar10-0,53,cifar10,6,2048\nbert-1,60.5,bert,1,12\n")
    a, b = load_workload(f)
    assert (a.job_id, a.submit_time_s, a.model, a.num_workers, a.batch_size, a.comm) == \
        ("cifar10-0", 53.0, "cifar10", 6, 2048, "allreduce")
    # Pollux's iterations: its trained batch (6 x ceil(2048 / 6) = 2052) and statistical
    # efficiency (a large batch needs more samples than the initial batch's run)
    assert a.iterations == math.ceil(iterations_to_target("cifar10", 2052))
    assert a.iterations * 2052 > readers.pollux_samples_to_target("cifar10")
    assert a.tasks[0].demand == (1.0, 4.0, 16.0, 0.0, 0.0)
    # bert at its initial batch (12): gain 1, iterations = samples / 12
    assert b.iterations == math.ceil(readers.pollux_samples_to_target("bert") / 12)


@pytest.mark.parametrize("row,field", [
    ("mnist-2,10,mnist,1,64", "application"),
    ("x-2,10,,1,64", "application"),
    ("x-2,later,cifar10,1,64", "time"),
    ("x-2,10,cifar10,0,64", "num_replicas"),
    ("x-2,10,cifar10,1,-64", "batch_size"),
    (",10,cifar10,1,64", "name"),
])
def test_pollux_bad_rows(tmp_path, row, field):
    f = _write(tmp_path, f"{POLLUX_HEADER}\ncifar10-0,53,cifar10,6,2048\n{row}\n", "pollux-bad.csv")
    with pytest.raises(InputError) as e:
        load_workload(f)
    assert (e.value.line, e.value.field) == (3, field)
    assert "pollux-bad.csv" in str(e.value) and "line 3" in str(e.value)


def test_pollux_samples_to_target():
    # progress counts iterations at the smallest profiled batch size (cifar10: 128); 100 epochs
    # of CIFAR-10's 50,000 images, 90 of ImageNet's 1.28 M.
    assert readers.pollux_samples_to_target("cifar10") == pytest.approx(100 * 50_000, rel=0.01)
    assert readers.pollux_samples_to_target("imagenet") == pytest.approx(90 * 1_281_167, rel=0.01)
    for app in readers.POLLUX_MAX_EPOCHS:
        assert readers.pollux_samples_to_target(app) > 0
    with pytest.raises(DlschedError, match="mnist"):
        readers.pollux_samples_to_target("mnist")


def test_bundled_pollux_workload_6():
    jobs = load_workload("pollux-6")
    assert len(jobs) == 160
    assert Counter(j.model for j in jobs) == {"cifar10": 67, "ncf": 54, "deepspeech2": 16, "bert": 15,
                                              "yolov3": 5, "imagenet": 3}
    assert all(j.iterations > 0 and j.batch_size > 0 and j.kind == "dl" for j in jobs)
    for i in range(1, 9):
        assert len(load_workload(f"pollux-{i}")) == 160


@needs_traces
def test_pollux_workload_6_from_shared_traces():
    jobs = load_workload(TRACES / "pollux" / "workloads" / "workload-6.csv")
    assert jobs == load_workload("pollux-6")


@needs_traces
def test_bundled_data_matches_shared_traces():
    ours = readers.pollux_data_dir()
    theirs = TRACES / "pollux"
    for sub in ["workloads", *(f"app-profiles/{a}" for a in readers.POLLUX_MAX_EPOCHS)]:
        names = sorted(p.name for p in (ours / sub).iterdir())
        if sub == "workloads":
            assert names == [f"workload-{i}.csv" for i in range(1, 9)]
        _, mismatch, errors = filecmp.cmpfiles(ours / sub, theirs / sub, names, shallow=False)
        assert not mismatch and not errors
    for lic in ["LICENSE-adaptdl-Apache-2.0.txt", "LICENSE-philly-traces-CC-BY-4.0.txt", "README.md"]:
        assert (ours / lic).is_file()


def test_detect_format():
    assert readers.detect_format(["job_id", "submit_time_s"]) == "schema"
    assert readers.detect_format(PHILLY_HEADER.split(",")) == "philly"
    assert readers.detect_format(POLLUX_HEADER.split(",")) == "pollux"
    assert readers.detect_format(["a", "b"]) is None


def test_the_whole_philly_trace_is_bundled():
    # `-w philly` works on any clone (no ../shared): the Pollux authors' per-job table, 82,247 jobs
    from dlsched.workload.io import is_named_workload, load_workload
    assert is_named_workload("philly")
    jobs = load_workload("philly")
    assert len(jobs) == 82247 and jobs[0].job_id.startswith("philly-")
    assert [j.submit_time_s for j in jobs] == sorted(j.submit_time_s for j in jobs)
