"""Workload files: round trips, format detection, error locations, atomic saving, summaries."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from dlsched.core.errors import DlschedError, InputError
from dlsched.core.types import JobSpec
from dlsched.workload import describe_workload, load_workload, save_workload
from dlsched.workload import io as wio
from dlsched.workload.schema import COLUMNS, job_from_row, job_to_row

HEADER = "job_id,submit_time_s,kind,workers,model,iterations,duration_s"


def _varied_jobs() -> list[JobSpec]:
    """Jobs exercising every schema column, including None / non-default values."""
    rows = [
        {"job_id": "a", "submit_time_s": 0.0, "workers": 2, "duration_s": 123.456},
        {"job_id": "b", "submit_time_s": 10.25, "kind": "dl", "workers": 4, "ps": 2, "gpus_per_worker": 0.5,
         "cpus_per_worker": 3.5, "mem_gb_per_worker": 12.0, "disk_mbps_per_worker": 150.0,
         "net_gbps_per_worker": 2.5, "ps_cpus": 6.0, "ps_mem_gb": 20.0, "model": "resnet50", "comm": "ps",
         "batch_size": 256, "iterations": 1000.0, "duration_s": None, "deadline_s": 5000.5,
         "priority": 3, "user": "alice", "gpu_type": "V100"},
        {"job_id": "c", "submit_time_s": 10.25, "kind": "tasks", "workers": 5, "gpus_per_worker": 0.0,
         "cpus_per_worker": 2.0, "duration_s": 0.1 + 0.2, "user": "bob"},     # an inexact float
        {"job_id": "d", "submit_time_s": 1e-7, "workers": 1, "model": "bert", "iterations": 2.5e6,
         "batch_size": 12, "comm": "none", "priority": 0, "deadline_s": 1.0 / 3.0},
    ]
    return [job_from_row(r) for r in rows]


def _expected(jobs):
    return sorted(jobs, key=lambda j: (j.submit_time_s, j.job_id))


@pytest.mark.parametrize("name", ["w.csv", "w.csv.gz", "w.parquet", "w.jsonl", "w.jsonl.gz"])
def test_round_trip_preserves_every_field(tmp_path, name):
    jobs = _varied_jobs() + load_workload("sample") + load_workload("seed000:jobs=3,tasks=4")
    path = save_workload(jobs, tmp_path / name)
    assert path == tmp_path / name
    back = load_workload(path)
    assert back == _expected(jobs)
    assert [job_to_row(j) for j in back] == [job_to_row(j) for j in _expected(jobs)]
    assert [p.name for p in tmp_path.iterdir()] == [name]      # no temporary file left


def test_saved_files_are_gzipped_and_deterministic(tmp_path):
    jobs = _varied_jobs()
    a = save_workload(jobs, tmp_path / "a.csv.gz").read_bytes()
    b = save_workload(jobs, tmp_path / "b.csv.gz").read_bytes()
    assert a[:2] == b"\x1f\x8b" and a == b
    header = gzip.decompress(a).decode().splitlines()[0]
    assert header.split(",") == list(COLUMNS)


def test_save_is_atomic_on_error(tmp_path, monkeypatch):
    target = tmp_path / "w.csv"
    target.write_text("old content\n")

    def boom(rows, fh):
        fh.write("job_id\n")
        raise RuntimeError("disk full")

    monkeypatch.setattr(wio, "_write_csv", boom)
    with pytest.raises(RuntimeError):
        save_workload(_varied_jobs(), target)
    assert target.read_text() == "old content\n"
    assert [p.name for p in tmp_path.iterdir()] == ["w.csv"]


def test_save_unknown_extension(tmp_path):
    with pytest.raises(DlschedError, match="extension"):
        save_workload(_varied_jobs(), tmp_path / "w.xlsx")
    assert not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------- detection

def test_schema_csv_with_other_extension_loads(tmp_path):
    f = tmp_path / "jobs.txt"
    f.write_text(f"{HEADER}\nj1,5,dl,2,,,100\nj0,5,tasks,3,,,10\n")
    jobs = load_workload(f)
    assert [j.job_id for j in jobs] == ["j0", "j1"]           # sorted by (submit, job_id)
    assert jobs[0].kind == "tasks" and len(jobs[0].tasks) == 3


def test_encoding_detected_from_content(tmp_path):
    jobs = _varied_jobs()
    for src, dst in [("a.csv.gz", "a.dat"), ("b.jsonl", "b.txt"), ("c.parquet", "c.bin"),
                     ("d.jsonl.gz", "d.data")]:
        save_workload(jobs, tmp_path / src).rename(tmp_path / dst)
        assert load_workload(tmp_path / dst) == _expected(jobs)


def test_pollux_csv_detected(tmp_path):
    f = tmp_path / "w.csv"
    f.write_text("name,time,application,num_replicas,batch_size\ncifar10-0,53,cifar10,6,2048\n"
                 "ncf-1,7,ncf,1,256\n")
    jobs = load_workload(f)
    assert [j.job_id for j in jobs] == ["ncf-1", "cifar10-0"]
    assert jobs[1].model == "cifar10" and jobs[1].num_workers == 6 and jobs[1].batch_size == 2048
    assert jobs[1].iterations > 0


def test_philly_csv_detected(tmp_path):
    f = tmp_path / "p.csv"
    f.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
                 "2017-10-09 06:13:03,2951.0,2,5902.0,6214e9\n")
    jobs = load_workload(f)
    assert [(j.job_id, j.submit_time_s, j.num_workers) for j in jobs] == [
        ("philly-1", 0.0, 2), ("philly-0", 2932.0, 1)]


def test_unrecognised_columns(tmp_path):
    f = tmp_path / "mystery.csv"
    f.write_text("foo,bar\n1,2\n")
    with pytest.raises(DlschedError, match="unrecognised") as e:
        load_workload(f)
    assert "mystery.csv" in str(e.value)


def test_format_override(tmp_path):
    f = tmp_path / "p.csv"
    f.write_text("timestamp,duration,num_gpus\n2017-10-09 07:01:55,66.0,1\n")
    assert len(load_workload(f, format="philly")) == 1
    with pytest.raises(InputError, match="missing column") as e:
        load_workload(f, format="pollux")
    assert e.value.line == 1 and e.value.field == "name"
    with pytest.raises(DlschedError, match="unknown workload format"):
        load_workload(f, format="excel")


def test_unknown_file_and_generator(tmp_path):
    with pytest.raises(DlschedError, match="nope.csv"):
        load_workload(tmp_path / "nope.csv")
    with pytest.raises(DlschedError, match="nope.csv"):
        load_workload(str(tmp_path / "nope.csv"))
    with pytest.raises(DlschedError, match="not a workload generator"):
        load_workload("no-such-generator")
    with pytest.raises(DlschedError, match="not a workload generator"):
        load_workload("poison:rate=0.02")
    with pytest.raises(DlschedError, match="empty"):
        (tmp_path / "empty.csv").write_text("")
        load_workload(tmp_path / "empty.csv")


def test_generator_refs_and_bundled():
    jobs = load_workload("poisson:jobs=20,rate=0.02", seed=4)
    assert len(jobs) == 20 and jobs == load_workload("poisson:jobs=20,rate=0.02,seed=4")
    assert len(load_workload("pollux-6")) == 160
    with pytest.raises(DlschedError, match="'jobs'"):
        load_workload("poisson:jobs=abc")


# ----------------------------------------------------------------------------- errors

def _error(tmp_path, text: str, name: str = "bad.csv") -> InputError:
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(InputError) as e:
        load_workload(f)
    return e.value


def test_non_numeric_submit_time_names_file_line_field(tmp_path):
    err = _error(tmp_path, f"{HEADER}\nj0,0,dl,1,,,10\nj1,5,dl,1,,,10\nj2,soon,dl,1,,,10\n")
    msg = str(err)
    assert "bad.csv" in msg and "line 4" in msg and "submit_time_s" in msg
    assert (err.line, err.field) == (4, "submit_time_s")


@pytest.mark.parametrize("row,field", [
    (",5,dl,1,,,10", "job_id"),                      # missing required field
    ("j1,,dl,1,,,10", "submit_time_s"),
    ("j1,5,dl,-2,,,10", "workers"),                  # negative value
    ("j1,5,dl,1,,,-10", "duration_s"),
    ("j1,5,batch,1,,,10", "kind"),                   # unknown kind
    ("j1,5,dl,1,,,", "duration_s"),                  # a dl job without work
    ("j1,5,dl,1.5,,,10", "workers"),
])
def test_malformed_schema_rows(tmp_path, row, field):
    err = _error(tmp_path, f"{HEADER}\nj0,0,dl,1,,,10\n{row}\n")
    assert (err.line, err.field) == (3, field)
    assert "bad.csv" in str(err) and "line 3" in str(err)


def test_iterations_of_an_unknown_model_load_and_a_run_refuses_them(tmp_path):
    """A model the zoo lacks may have iterations in a file (a throughput table may name it);
    a run without such a table refuses the job in one line (dlsched.api.check_work)."""
    import dlsched
    from dlsched.core.errors import DlschedError
    f = tmp_path / "w.csv"
    f.write_text(f"{HEADER}\nj0,0,dl,1,,,10\nj1,5,dl,1,nosuchmodel,100,\n")
    jobs = load_workload(f)
    assert [j.model for j in jobs] == [None, "nosuchmodel"] and jobs[1].iterations == 100
    with pytest.raises(DlschedError, match="job j1: its 100 iterations need a model the speed model knows"):
        dlsched.simulate("seed002", jobs, "fifo")


def test_unknown_column_in_schema_file(tmp_path):
    err = _error(tmp_path, "job_id,submit_time_s,duration_s,colour\nj0,0,10,red\n")
    assert (err.line, err.field) == (2, "colour")


def test_duplicate_job_id(tmp_path):
    err = _error(tmp_path, f"{HEADER}\nj0,0,dl,1,,,10\nj1,0,dl,1,,,10\nj0,9,dl,1,,,10\n")
    assert (err.line, err.field) == (4, "job_id") and "duplicate" in str(err)


def test_blank_lines_keep_line_numbers(tmp_path):
    err = _error(tmp_path, f"{HEADER}\nj0,0,dl,1,,,10\n\nj1,x,dl,1,,,10\n")
    assert (err.line, err.field) == (4, "submit_time_s")
    f = tmp_path / "ok.csv"
    f.write_text(f"{HEADER}\nj0,0,dl,1,,,10\n\nj1,1,dl,1,,,10\n\n\n")
    assert len(load_workload(f)) == 2


def test_too_many_fields(tmp_path):
    err = _error(tmp_path, f"{HEADER}\nj0,0,dl,1,,,10\nj1,0,dl,1,,,10,extra\n")
    assert (err.line, err.field) == (3, "duration_s")
    err = _error(tmp_path, f"{HEADER}\nj0,0,dl,1,,,10,extra\nj1,0,dl,1,,,10\n")   # not taken as an index
    assert (err.line, err.field) == (2, "duration_s")


@pytest.mark.parametrize("gz", [False, True])
def test_row_cut_short_is_an_error_not_defaults(tmp_path, gz):
    f = tmp_path / "cut.csv"
    text = f"{HEADER}\nj0,0,dl,1,,,25939\nj1,5,dl,1,,"                  # j1's duration_s was cut off
    f.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    with pytest.raises(InputError) as e:
        load_workload(f)
    assert (e.value.line, e.value.field) == (3, "duration_s") and "fields" in str(e.value)


def test_jsonl_errors_count_records_from_line_1(tmp_path):
    good = json.dumps({"job_id": "a", "submit_time_s": 0, "duration_s": 5})
    err = _error(tmp_path, good + "\n\n" + json.dumps({"job_id": "b", "submit_time_s": -1, "duration_s": 5})
                 + "\n", "bad.jsonl")
    assert (err.line, err.field) == (3, "submit_time_s")
    err = _error(tmp_path, good + "\n{not json\n", "bad2.jsonl")
    assert err.line == 2 and "bad2.jsonl" in str(err)
    err = _error(tmp_path, good + "\n" + json.dumps({"job_id": "c", "submit_time_s": 1, "duration_s": 5,
                                                       "oops": 1}) + "\n", "bad3.jsonl")
    assert (err.line, err.field) == (2, "oops")


def test_parquet_errors_use_row_index_plus_one(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"job_id": ["a", "b", "c"], "submit_time_s": [0.0, 1.0, -5.0], "duration_s": [1.0, 2.0, 3.0]})
    pq.write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(InputError) as e:
        load_workload(tmp_path / "bad.parquet")
    assert (e.value.line, e.value.field) == (3, "submit_time_s")


# ----------------------------------------------------------------------------- describe / import

def test_describe_workload():
    d = describe_workload(_varied_jobs())
    assert d["jobs"] == 4 and d["dl_jobs"] == 3 and d["tasks_jobs"] == 1
    assert d["gpus_per_job"] == {0: 1, 1: 1, 2: 2}
    assert d["gpus_requested"] == 5.0
    assert d["first_submit_s"] == 0.0 and d["span_s"] == 10.25
    # a: 2 GPUs x 123.456 s; c: tasks without GPUs
    assert d["jobs_with_duration"] == 2 and d["gpu_seconds"] == pytest.approx(246.912)
    assert d["models"] == {"bert": 1, "resnet50": 1}
    assert d["jobs_with_deadline"] == 2 and d["users"] == 3
    json.dumps(d)
    assert describe_workload([])["jobs"] == 0


def test_import_does_not_load_pandas_or_pyarrow():
    code = "import sys, dlsched.workload; print('pandas' in sys.modules, 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
