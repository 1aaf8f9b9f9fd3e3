"""The Acme, OpenB, spot-GPU and ITP / ElasticFlow readers (dlsched.workload.formats): each on its
bundled slice, checked against an independent reading of the same file; every bundled slice
recognised as its own format and no other; bad input (one InputError naming file, line and
field; exit 2 from the CLI)."""
from __future__ import annotations

import csv
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlsched.core.errors import InputError
from dlsched.workload import formats, load_workload, save_workload
from dlsched.workload.formats import table
from dlsched.workload.io import inspect_workload
from dlsched.workload.readers import detect_format

DATA = Path(__file__).resolve().parents[2] / "src" / "dlsched" / "data" / "traces"
NEW = [
    ("acme", DATA / "acme" / "trace_seren-sample.csv"),
    ("acme", DATA / "acme" / "trace_kalos-sample.csv"),
    ("openb", DATA / "openb" / "openb_pod_list-sample.csv"),
    ("spot", DATA / "spot" / "job_info_df-sample.csv"),
    ("elasticflow", DATA / "itp-raw" / "cluster10.csv"),
    ("elasticflow", DATA / "elasticflow" / "cluster10.csv"),
]
OLD = [
    ("tiresias", DATA / "tiresias" / "60_job.csv"),
    ("swf", DATA / "swf" / "NASA-iPSC-1993-3.1-cln-first300.swf"),
    ("slurm", DATA / "slurm" / "sacct-parsable2.txt"),
    ("helios", DATA / "helios" / "cluster_log.csv"),
    ("pai", DATA / "pai" / "pai_job_table.csv"),
    ("philly-raw", DATA / "philly-raw" / "cluster_job_log"),
]
#: bundled files that are no job trace (machine lists): no reader may claim them
NOT_JOBS = [DATA / "openb-nodes" / "openb_node_list_gpu_node-sample.csv",
            DATA / "pai-machines" / "pai_machine_spec-every6th.csv"]


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _write(tmp_path, text, name="t.csv"):
    f = tmp_path / name
    f.write_text(text)
    return f


@pytest.mark.parametrize("fmt,path", NEW, ids=[p.name for _, p in NEW])
def test_new_slices_read_and_round_trip(fmt, path, tmp_path):
    jobs, info = inspect_workload(path)
    assert info["format"] == fmt and jobs
    assert load_workload(path, format=fmt) == jobs
    assert min(j.submit_time_s for j in jobs) >= 0.0
    for j in jobs:
        assert j.gpus > 0 and j.duration_s is not None and j.duration_s >= 0
        assert j.extra is None or isinstance(json.loads(j.extra), dict)
    for suffix in (".csv", ".parquet", ".jsonl.gz"):
        assert load_workload(save_workload(jobs, tmp_path / f"w{suffix}")) == jobs


@pytest.mark.parametrize("fmt,path", OLD + NEW, ids=[p.name for _, p in OLD + NEW])
def test_every_slice_is_its_own_format_and_no_other(fmt, path):
    assert formats.detect(path) == fmt
    head = table.head_text(path)
    if head.lstrip()[:1] in ("[", "{", ";") or fmt == "pai":
        return                              # recognised by name or first bytes, not by a header
    cols, _ = formats._header(head)
    claims = [name for name, module in formats.HEADER_FORMATS.items()
              if any(all(c in cols for c in sig) for sig in formats._signatures(module))]
    assert claims == [fmt] and detect_format(cols) is None


@pytest.mark.parametrize("path", NOT_JOBS, ids=[p.name for p in NOT_JOBS])
def test_machine_lists_are_no_job_format(path):
    assert formats.detect(path) is None


def _ts(text):
    return dt.datetime.fromisoformat(text).timestamp()


@pytest.mark.parametrize("path", [p for f, p in NEW if f == "acme"], ids=["seren", "kalos"])
def test_acme_slice_matches_its_file(path):
    rows = _rows(path)
    jobs, info = inspect_workload(path)
    by_id = {j.job_id: j for j in jobs}
    origin = min(_ts(r["submit_time"]) for r in rows)
    cpu = [r for r in rows if r["gpu_num"] == "0"]
    never = [r for r in rows if r["gpu_num"] != "0" and (r["start_time"] == "" or
                                                          (r["state"] == "CANCELLED" and r["duration"] == "0"))]
    assert sum(info["dropped"].values()) == len(cpu) + len(never) and len(jobs) == len(rows) - len(cpu) - len(never)
    for r in rows:
        j = by_id.get(f"acme-{r['job_id']}")
        if j is None:
            continue
        assert (j.user, j.gpus, j.num_workers, j.duration_s, j.queue) == (
            r["user"], float(r["gpu_num"]), int(r["gpu_num"]), float(r["duration"]), None)
        assert j.submit_time_s == pytest.approx(_ts(r["submit_time"]) - origin)
        assert j.recorded_start_s - j.submit_time_s == pytest.approx(float(r["queue"]))
        assert j.recorded_end_s == pytest.approx(_ts(r["end_time"]) - origin)
        extra = json.loads(j.extra)
        assert (extra["state"], extra["type"], extra["gpu_time"]) == (r["state"], r["type"], r["gpu_time"])


def test_openb_slice_fractions_types_and_host_resources():
    path = dict((p.name, p) for _, p in NEW)["openb_pod_list-sample.csv"]
    rows = _rows(path)
    jobs, info = inspect_workload(path)
    by_id = {j.job_id: j for j in jobs}
    origin = min(float(r["creation_time"]) for r in rows)
    assert info["dropped"] == {"CPU pod (num_gpu 0)": sum(r["num_gpu"] == "0" for r in rows),
                               "never scheduled (no scheduled_time: Pending)":
                                   sum(r["num_gpu"] != "0" and r["scheduled_time"] == "" for r in rows)}
    shared = multi = 0
    for r in rows:
        j = by_id.get(r["name"])
        if j is None:
            assert r["num_gpu"] == "0" or r["scheduled_time"] == ""
            continue
        n, milli = int(r["num_gpu"]), float(r["gpu_milli"])
        assert j.num_workers == 1 and j.gpus == (milli / 1000 if n == 1 else n)
        shared += milli < 1000
        assert j.tasks[0].demand[1:3] == (float(r["cpu_milli"]) / 1000, float(r["memory_mib"]) / 1024)
        types = [t for t in r["gpu_spec"].split("|") if t]
        assert (j.gpu_type, j.gpu_types) == ((types[0], None) if len(types) == 1 else
                                             (None, tuple(types) if types else None))
        multi += len(types) > 1
        assert (j.submit_time_s, j.recorded_start_s, j.recorded_end_s) == (
            float(r["creation_time"]) - origin, float(r["scheduled_time"]) - origin, float(r["deletion_time"]) - origin)
        assert j.duration_s == float(r["deletion_time"]) - float(r["scheduled_time"])
        assert json.loads(j.extra) == {"qos": r["qos"], "pod_phase": r["pod_phase"]}
    assert shared and multi
    from dlsched.workload.io import describe_workload
    sets = describe_workload(jobs)["gpu_type_sets"]
    assert sum(sets.values()) == multi and all("|" in k for k in sets)


def test_spot_slice_matches_its_file():
    path = dict((p.name, p) for _, p in NEW)["job_info_df-sample.csv"]
    rows = _rows(path)
    jobs, info = inspect_workload(path)
    by_id = {j.job_id: j for j in jobs}
    assert info["dropped"] == {"no GPU (gpu_request 0)": sum(r["gpu_request"] == "0" for r in rows)}
    origin = min(float(r["submit_time"]) for r in rows)
    for r in rows:
        j = by_id.get(f"spot-{r['job_name']}")
        if j is None:
            continue
        assert (j.queue, j.gpu_type, j.num_workers, j.tasks[0].demand[:2], j.user) == (
            r["organization"], r["gpu_model"], int(r["worker_num"]),
            (float(r["gpu_request"]), float(r["cpu_request"])), "default")
        assert (j.submit_time_s, j.duration_s) == (float(r["submit_time"]) - origin, float(r["duration"]))
        assert json.loads(j.extra) == {"job_type": r["job_type"]} and j.recorded_start_s is None
    assert {j.gpu_type for j in jobs} >= {"A10", "A100-SXM4-80GB"}


def test_itp_raw_and_augmented_agree_and_deadlines(tmp_path):
    raw, aug = (p for f, p in NEW if f == "elasticflow")
    a, b = load_workload(raw), load_workload(aug)
    assert [(j.job_id, j.submit_time_s, j.duration_s, j.tasks) for j in a] == \
           [(j.job_id, j.submit_time_s, j.duration_s, j.tasks) for j in b]
    rows = _rows(aug)
    origin = min(float(r["submission_time"]) for r in rows)
    for j, r in zip(b, rows):
        assert j.deadline_s == float(r["deadline"]) - origin and j.model is None and j.iterations is None
        assert json.loads(j.extra) == {k: r[k] for k in ("num_iteration", "model_name", "batch_size")}
    assert all(j.deadline_s is None and j.extra is None for j in a)
    # ElasticFlow's trace generator names them submit_time, iteration and ddl: still ElasticFlow, not Tiresias
    text = aug.read_text().replace("submission_time,num_iteration,model_name,deadline",
                                   "submit_time,iteration,model_name,ddl", 1)
    gen = _write(tmp_path, text, "gen.csv")
    assert formats.detect(gen) == "elasticflow"
    assert [(j.job_id, j.deadline_s) for j in load_workload(gen)] == [(j.job_id, j.deadline_s) for j in b]


# ----------------------------------------------------------------------------- bad input

ACME = ("job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time\n"
        "5778432,u5907,1,8,128,Other,FAILED,2023-03-01 00:18:22+08:00,2023-03-01 00:18:54+08:00,"
        "2023-03-01 00:20:51+08:00,117,32,936.0\n")
OPENB = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
         "openb-pod-0022,4000,15258,1,220,,BE,Running,9679175,9973826,9679175\n")
SPOT = ("job_name,organization,gpu_model,cpu_request,gpu_request,worker_num,submit_time,duration,job_type\n"
        "437260,57,A100-SXM4-80GB,15,1,16,9589663,41060,Spot\n")
ITP = ("job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
       "6b2d9ccc-6279-403c-e1a2-cfe7810d5c57,16566,40285,bert,21347,64,4,3890\n")

BAD = [
    # (file name, good text, (old, new) to break it, field)
    ("a.csv", ACME, ("2023-03-01 00:18:22+08:00", "2023-02-30 00:18:22+08:00"), "submit_time"),
    ("a.csv", ACME, (",1,8,128,", ",1,-8,128,"), "gpu_num"),
    ("a.csv", ACME, (",117,", ",2m,"), "duration"),
    ("o.csv", OPENB, (",9679175,9973826", ",yesterday,9973826"), "creation_time"),
    ("o.csv", OPENB, ("4000,15258,1,220", "4000,15258,-1,220"), "num_gpu"),
    ("o.csv", OPENB, (",220,", ",1500,"), "gpu_milli"),
    ("o.csv", OPENB, ("9973826,9679175", "9000000,9679175"), "deletion_time"),
    ("s.csv", SPOT, (",9589663,", ",9589663s,"), "submit_time"),
    ("s.csv", SPOT, (",15,1,16,", ",15,-1,16,"), "gpu_request"),
    ("s.csv", SPOT, (",41060,", ",11h,"), "duration"),
    ("i.csv", ITP, (",16566,", ",t0,"), "submission_time"),
    ("i.csv", ITP, (",64,4,", ",64,-4,"), "num_gpu"),
    ("i.csv", ITP, (",3890\n", ",1 hour\n"), "duration"),
    ("i.csv", ITP, (",21347,", ",soon,"), "deadline"),
]


@pytest.mark.parametrize("name,text,change,field", BAD, ids=[f"{b[0]}-{b[3]}" for b in BAD])
def test_bad_row_names_file_line_and_field(name, text, change, field, tmp_path):
    assert load_workload(_write(tmp_path, text, name))                      # the good file reads
    assert change[0] in text
    bad = _write(tmp_path, text.replace(*change, 1), "bad-" + name)
    with pytest.raises(InputError) as e:
        load_workload(bad)
    assert (e.value.file, e.value.line, e.value.field) == (str(bad), 2, field)


@pytest.mark.parametrize("text,change,field", [(ACME, (",117,", ",x,"), "duration"),
                                               (OPENB, (",220,", ",-220,"), "gpu_milli"),
                                               (SPOT, (",41060,", ",n/a,"), "duration"),
                                               (ITP, (",16566,", ",2021-03-04,"), "submission_time")])
def test_cli_bad_row_is_one_line_exit_2(text, change, field, tmp_path):
    f = _write(tmp_path, text.replace(*change, 1))
    r = subprocess.run([sys.executable, "-m", "dlsched.cli.main", "workload", "describe", str(f)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and f"line 2, field '{field}'" in r.stderr and str(f) in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
