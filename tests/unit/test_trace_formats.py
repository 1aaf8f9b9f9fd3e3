"""Trace formats read as they are (dlsched.workload.formats): each reader on its bundled slice,
checked against an independent reading of the same file, round trips through the schema, and
bad input (one InputError naming file, line and field; exit 2 from the CLI)."""
from __future__ import annotations

import csv
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlsched.core.errors import DlschedError, InputError
from dlsched.workload import formats, load_workload, save_workload
from dlsched.workload.io import inspect_workload

DATA = Path(__file__).resolve().parents[2] / "src" / "dlsched" / "data" / "traces"
SLICES = {
    "tiresias": DATA / "tiresias" / "60_job.csv",
    "swf": DATA / "swf" / "NASA-iPSC-1993-3.1-cln-first300.swf",
    "slurm": DATA / "slurm" / "sacct-parsable2.txt",
    "helios": DATA / "helios" / "cluster_log.csv",
    "pai": DATA / "pai" / "pai_job_table.csv",
    "philly-raw": DATA / "philly-raw" / "cluster_job_log",
}


def _write(tmp_path, text, name="t.csv"):
    f = tmp_path / name
    f.write_text(text)
    return f


def _rows(path, delimiter=","):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter=delimiter))


# ----------------------------------------------------------------------------- slices

@pytest.mark.parametrize("fmt", list(SLICES))
def test_each_slice_is_recognised_and_round_trips(fmt, tmp_path):
    jobs, info = inspect_workload(SLICES[fmt])
    assert info["format"] == fmt and jobs
    assert formats.detect(SLICES[fmt]) == fmt
    assert load_workload(SLICES[fmt], format=fmt) == jobs
    assert min(j.submit_time_s for j in jobs) >= 0.0       # 0 is the first submission, kept or not
    for j in jobs:
        assert j.gpus > 0 and j.duration_s is not None and j.duration_s >= 0
        assert j.extra is None or isinstance(json.loads(j.extra), dict)
    for suffix in (".csv", ".parquet", ".jsonl.gz"):
        out = save_workload(jobs, tmp_path / f"w{suffix}")
        assert load_workload(out) == jobs


def test_tiresias_slice_matches_its_file():
    rows = _rows(SLICES["tiresias"])
    jobs = {j.job_id: j for j in load_workload(SLICES["tiresias"])}
    assert len(jobs) == len(rows)
    for r in rows:
        j = jobs[f"tiresias-{r['job_id']}"]
        assert (j.gpus, j.num_workers) == (float(r["num_gpu"]), int(r["num_gpu"]))
        assert j.submit_time_s == float(r["submit_time"]) - min(float(x["submit_time"]) for x in rows)
        assert j.duration_s == float(r["duration"]) and j.model is None and j.recorded_start_s is None
        assert json.loads(j.extra) == {k: r[k] for k in ("iterations", "model_name", "interval")}


def test_helios_slice_matches_its_file():
    import datetime as dt
    rows = _rows(SLICES["helios"])
    jobs, info = inspect_workload(SLICES["helios"])
    by_id = {j.job_id: j for j in jobs}
    t = {r["job_id"]: dt.datetime.strptime(r["submit_time"], "%Y-%m-%d %H:%M:%S") for r in rows}
    origin = min(t.values())
    cpu = [r for r in rows if r["gpu_num"] == "0"]
    never = [r for r in rows if r["gpu_num"] != "0" and r["state"] == "CANCELLED" and r["duration"] == "0"]
    assert info["dropped"] == {k: v for k, v in {"CPU job (gpu_num 0)": len(cpu),
                               "never ran (no start_time, or cancelled with duration 0)": len(never)}.items() if v}
    assert len(jobs) == len(rows) - len(cpu) - len(never)
    for r in rows:
        j = by_id.get(f"helios-{r['job_id']}")
        if j is None:
            continue
        assert (j.user, j.queue, j.gpus, j.duration_s) == (r["user"], r["vc"], float(r["gpu_num"]), float(r["duration"]))
        assert j.submit_time_s == (t[r["job_id"]] - origin).total_seconds()
        assert j.recorded_start_s - j.submit_time_s == float(r["queue"])
        assert j.recorded_end_s - j.recorded_start_s == float(r["duration"])
        assert json.loads(j.extra)["state"] == r["state"]


def test_swf_slice_matches_its_file():
    lines = [ln.split() for ln in SLICES["swf"].read_text().splitlines() if ln.strip() and not ln.startswith(";")]
    jobs, info = inspect_workload(SLICES["swf"])
    kept = [f for f in lines if int(f[3]) >= 0 and int(f[4]) > 0]
    assert len(jobs) == len(kept) and sum(info["dropped"].values()) == len(lines) - len(kept)
    first = min(int(f[1]) for f in lines)
    by_id = {j.job_id: j for j in jobs}
    for f in kept:
        j = by_id[f"swf-{f[0]}"]
        assert (j.submit_time_s, j.duration_s, j.gpus) == (int(f[1]) - first, float(f[3]), float(f[4]))
        assert j.user == f"u{f[11]}" and j.recorded_start_s is None          # this log has no wait times
        assert json.loads(j.extra)["group_id"] == f[12]


def test_slurm_slice_rules():
    rows = _rows(SLICES["slurm"], delimiter="|")
    jobs, info = inspect_workload(SLICES["slurm"])
    steps = [r for r in rows if "." in r["JobID"]]
    assert info["dropped"]["job step (JobID with a '.')"] == len(steps)
    by_id = {j.job_id: j for j in jobs}
    for r in rows:
        j = by_id.get(f"slurm-{r['JobID']}")
        if j is None:
            continue
        assert j.queue == r["Account"] and j.user == r["User"]
        assert f"gres/gpu={int(j.gpus)}" in r["AllocTRES"]
        assert j.gpu_type == ("a100" if "gres/gpu:a100" in r["AllocTRES"] else None)
        assert j.recorded_end_s - j.recorded_start_s == j.duration_s
        assert r["Start"] not in ("Unknown", "None") and r["End"] != "Unknown"
    assert {j.gpu_type for j in jobs} == {None, "a100"}


def test_pai_slice_joins_tasks_and_keeps_fractions():
    task_rows = list(csv.reader(open(DATA / "pai" / "pai_task_table.csv")))
    jobs = load_workload(SLICES["pai"])
    by_id = {j.job_id: j for j in jobs}
    shared = [t for t in task_rows if t[8] in ("25.0", "50.0")]
    assert shared
    for t in shared:
        j = by_id.get(f"pai-{t[0]}")
        if j is None:                          # Running / Waiting jobs are not kept
            assert t[3] in ("Running", "Waiting")
            continue
        assert j.tasks[0].gpus == float(t[8]) / 100 and j.num_workers == int(float(t[2]))
        assert j.gpu_type == t[9] and j.queue is None
        assert j.recorded_start_s == float(t[4]) - min(float(r[4]) for r in csv.reader(open(SLICES["pai"])))


def test_philly_raw_readme_job():
    """The philly-traces README's example job: 8 GPUs, attempts of 74 s and 193,182 s (the Pollux
    authors' CSV has it as duration 193,256 = 74 + 193,182)."""
    jobs = {j.job_id: j for j in load_workload(SLICES["philly-raw"])}
    j = jobs["application_1506638472019_14199"]
    assert (j.gpus, j.duration_s, j.user, j.queue) == (8.0, 193256.0, "ce2f4c", "ee9e8c")
    assert j.recorded_start_s - j.submit_time_s == 30.0                 # 01:11:39 -> 01:12:09
    assert json.loads(j.extra) == {"status": "Pass", "attempts": 2, "hosts": ["m47"]}


def test_fast_and_exact_table_paths_agree(tmp_path):
    text = SLICES["helios"].read_text()
    head, *rest = text.splitlines(keepends=True)
    blanky = _write(tmp_path, head + "\n" + "".join(rest[:40]) + "\n\n" + "".join(rest[40:]), "b.csv")
    a, b = load_workload(SLICES["helios"]), load_workload(blanky)
    assert a == b
    # the exact path numbers lines past blank lines: a bad value on file line 45
    lines = (head + "\n" + "".join(rest[:40]) + "\n\n" + "".join(rest[40:])).splitlines(keepends=True)
    lines[44] = lines[44].replace(",2020-", ",2020-13-", 1)
    with pytest.raises(InputError) as e:
        load_workload(_write(tmp_path, "".join(lines), "c.csv"))
    assert (e.value.line, e.value.field) == (45, "submit_time")
    gz = tmp_path / "cluster_log.csv.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    assert load_workload(gz) == a


# ----------------------------------------------------------------------------- --map

def test_map_reads_any_table(tmp_path):
    f = _write(tmp_path, 'id,ts,n,vc,run,note\na,2024-01-01 00:00:00,2,vcA,100,"x, ""y"""\n'
                         "b,2024-01-01T00:01:40,0.5,vcB,50,\nc,2024-01-01 00:03:20,0,vcA,7,z\n")
    jobs, info = inspect_workload(f, mapping="submit=ts,gpus=n,queue=vc,duration=run,job_id=id")
    assert info == {"format": "mapped", "dropped": {"0 GPUs (CPU job)": 1}}
    a, b = jobs
    assert (a.job_id, a.num_workers, a.queue, a.duration_s) == ("a", 2, "vcA", 100.0)
    assert (b.submit_time_s, b.num_workers, b.tasks[0].gpus) == (100.0, 1, 0.5)
    assert json.loads(a.extra) == {"note": 'x, "y"'} and b.extra is None
    yml = _write(tmp_path, "submit: ts\ngpus: n\nqueue: vc\nduration: run\njob_id: id\n", "m.yaml")
    assert load_workload(f, mapping=str(yml)) == jobs
    nums = _write(tmp_path, "s,b,e\n10,15,25\n0,5,6\n", "n.csv")
    x, y = load_workload(nums, mapping="submit=s,start=b,end=e")
    assert (x.submit_time_s, x.duration_s, x.recorded_start_s) == (0.0, 1.0, 5.0)
    assert (y.submit_time_s, y.duration_s, y.recorded_end_s) == (10.0, 10.0, 25.0)


@pytest.mark.parametrize("spec,msg", [
    ("gpus=n", "submit=COLUMN is required"), ("submit=ts", "give duration=COLUMN"),
    ("submit=ts,bogus=x,duration=run", "unknown name 'bogus'"), ("submit", "expected name=column"),
])
def test_bad_map_spec(spec, msg, tmp_path):
    f = _write(tmp_path, "ts,run\n0,1\n")
    with pytest.raises(DlschedError, match=msg):
        load_workload(f, mapping=spec)


# ----------------------------------------------------------------------------- bad input

TIRESIAS = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,6,vgg19,164,30\n"
HELIOS = ("job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
          "1,u1,vc1,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0\n")
SLURM = ("JobID|User|Account|Partition|Submit|Start|End|Elapsed|State|AllocTRES\n"
         "7|u|acct|gpu|2024-03-04T08:00:00|2024-03-04T08:01:00|2024-03-04T08:02:00|00:01:00|COMPLETED|cpu=8,gres/gpu=2\n")
SWF = "; Version: 2.2\n1 0 5 100 4 -1 -1 4 -1 -1 1 3 1 -1 -1 -1 -1 -1\n"
MAPPED_CSV = "ts,n,run\n2024-01-01 00:00:00,1,10\n"

BAD = [
    # (format, file name, good text, (old, new) to break it, line, field)
    ("tiresias", "t.csv", TIRESIAS, ("0,1,0,6", "0,-1,0,6"), 2, "num_gpu"),
    ("tiresias", "t.csv", TIRESIAS, ("164", "long"), 2, "duration"),
    ("helios", "h.csv", HELIOS, ("2020-06-09 18:41:01,2020", "2020-06-31 18:41:01,2020"), 2, "submit_time"),
    ("helios", "h.csv", HELIOS, (",1,1,1,COMPLETED", ",-2,1,1,COMPLETED"), 2, "gpu_num"),
    ("helios", "h.csv", HELIOS, ("36848", "3h"), 2, "duration"),
    ("slurm", "s.txt", SLURM, ("2024-03-04T08:00:00", "yesterday"), 2, "Submit"),
    ("slurm", "s.txt", SLURM, ("gres/gpu=2", "gres/gpu=-2"), 2, "AllocTRES"),
    ("slurm", "s.txt", SLURM, ("00:01:00", "1 minute"), 2, "Elapsed"),
    ("swf", "w.swf", SWF, (" 4 -1 -1 4 ", " -4 -1 -1 4 "), 2, "allocated_processors"),
    ("swf", "w.swf", SWF, (" 100 ", " 1e2x "), 2, "run_time"),
    ("swf", "w.swf", SWF, (" -1 -1 -1 -1 -1\n", " -1 -1 -1\n"), 2, "preceding_job"),
]


@pytest.mark.parametrize("fmt,name,text,change,line,field", BAD)
def test_bad_row_names_file_line_and_field(fmt, name, text, change, line, field, tmp_path):
    assert load_workload(_write(tmp_path, text, name))                      # the good file reads
    bad = _write(tmp_path, text.replace(*change), "bad-" + name)
    with pytest.raises(InputError) as e:
        load_workload(bad)
    assert (e.value.file, e.value.line, e.value.field) == (str(bad), line, field)


@pytest.mark.parametrize("change,field", [(("2024-01-01 00:00:00", "2024-01-01 25:00:00"), "ts"),
                                          ((",1,10", ",-1,10"), "n"), ((",1,10", ",1,ten"), "run")])
def test_bad_mapped_row(change, field, tmp_path):
    f = _write(tmp_path, MAPPED_CSV.replace(*change))
    with pytest.raises(InputError) as e:
        load_workload(f, mapping="submit=ts,gpus=n,duration=run")
    assert (e.value.line, e.value.field) == (2, field)


def test_philly_raw_bad_json(tmp_path):
    text = SLICES["philly-raw"].read_text()
    cut = _write(tmp_path, text[:text.index('"submitted_time"', 2000) + 20], "cut.json")
    with pytest.raises(InputError) as e:
        load_workload(cut)
    assert e.value.line == cut.read_text().count("\n") + 1 and e.value.field == "submitted_time"
    jobs = json.loads(text)
    jobs[3]["attempts"][0]["start_time"] = "2017-10-07 1:2"
    bad = _write(tmp_path, json.dumps(jobs, indent=1), "bad.json")
    with pytest.raises(InputError) as e:
        load_workload(bad)
    starts = [i for i, ln in enumerate(bad.read_text().splitlines(), start=1) if ln == " {"]
    assert (e.value.line, e.value.field) == (starts[3], "attempts.start_time")     # the line its job starts


def test_pai_bad_and_missing_tables(tmp_path):
    job = "j1,i1,u1,Terminated,100.0,200.0\n"
    (tmp_path / "pai_job_table.csv").write_text(job)
    with pytest.raises(DlschedError, match="task table"):
        load_workload(tmp_path / "pai_job_table.csv")
    task = tmp_path / "pai_task_table.csv"
    task.write_text("j1,worker,2.0,Terminated,110.0,200.0,600.0,29.0,50.0,T4\n")
    (j,) = load_workload(tmp_path / "pai_job_table.csv")
    assert (j.num_workers, j.gpus, j.tasks[0].demand[:3], j.duration_s) == (2, 1.0, (0.5, 6.0, 29.0), 90.0)
    task.write_text("j1,worker,2.0,Terminated,110.0,200.0,600.0,29.0,-50.0,T4\n")
    with pytest.raises(InputError) as e:
        load_workload(tmp_path / "pai_job_table.csv")
    assert (e.value.file, e.value.line, e.value.field) == (str(task), 1, "plan_gpu")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "dlsched.cli.main", *args], capture_output=True, text=True)


def test_cli_bad_input_is_one_line_exit_2(tmp_path):
    f = _write(tmp_path, MAPPED_CSV)
    for args, part in [(("workload", "describe", str(f), "--format", "nope"), "unknown workload format 'nope'"),
                       (("workload", "describe", str(f), "--map", "submit=ts,duration=runtime"),
                        "line 1, field 'runtime': --map duration=runtime: no such column"),
                       (("workload", "describe", str(_write(tmp_path, HELIOS.replace("36848", "x"), "h.csv"))),
                        "line 2, field 'duration'")]:
        r = _cli(*args)
        assert r.returncode == 2 and part in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = _cli("workload", "describe", str(SLICES["slurm"]), "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["format"] == "slurm" and d["gpu_types"] == {"a100": d["gpu_types"]["a100"]}
    assert d["queues"] == 4 and d["dropped"]


def test_convert_with_map_keeps_recorded_times(tmp_path):
    from dlsched.cli.main import main
    src = _write(tmp_path, "s,b,e,vc,extra_col\n2024-01-01 00:00:00,2024-01-01 00:00:30,2024-01-01 00:01:30,a,7\n")
    out = tmp_path / "w.parquet"
    assert main(["workload", "convert", str(src), "--map", "submit=s,start=b,end=e,queue=vc", "-o", str(out)]) == 0
    (j,) = load_workload(out)
    assert (j.duration_s, j.recorded_start_s, j.recorded_end_s, j.queue) == (60.0, 30.0, 90.0, "a")
    assert json.loads(j.extra) == {"extra_col": "7"}


def test_jobspec_repr_shows_recorded_fields_only_when_set():
    """Event logs of workloads without them read (and hash) as before the fields existed."""
    from dlsched.core.types import JobSpec
    plain = repr(JobSpec("a", 0.0, queue="q"))
    assert plain.endswith("queue='q')") and "recorded" not in plain and "extra" not in plain
    assert repr(JobSpec("a", 0.0, recorded_start_s=1.5, extra="{}")).endswith("recorded_start_s=1.5, extra='{}')")
