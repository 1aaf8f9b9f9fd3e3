"""Alibaba PAI GPU trace 2020 (Weng et al., NSDI'22; alibaba/clusterdata `cluster-trace-gpu-v2020`):
the job table and the task table, read together.

Give the job table (`pai_job_table.csv`); the task table is read from the same folder
(`pai_task_table.csv`, or the job table's name with `job` replaced by `task`). The published
tables have no header (the column names are in `*.header` files); a first row equal to the
header is taken as one. Times are seconds (shifted by a constant for anonymity).

job table:  `job_name,inst_id,user,status,start_time,end_time`
task table: `job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type`

| column                         | dlsched                                                      |
| ---                            | ---                                                          |
| job.job_name                   | job_id `pai-<job_name>`                                      |
| job.user                       | user (PAI records no tenant: no queue; a `--queues` file can map users) |
| job.start_time (its submission, per the README) | submit_time_s (from the earliest)   |
| min task.start_time            | recorded_start_s (the README: its gap to the job's start_time is the wait) |
| max task.end_time (else job.end_time) | recorded_end_s                                        |
| recorded end - recorded start  | duration_s                                                   |
| GPU tasks (plan_gpu > 0): sum of inst_num, sum of inst_num x plan_gpu / 100 | workers, and GPUs per worker = GPUs / workers (a fraction where PAI shares GPUs: plan_gpu 50 = half a GPU) |
| plan_cpu / 100, plan_mem of the GPU tasks | cores and GB per worker (instance-weighted; 4 and 16 where not given) |
| gpu_type of the GPU tasks      | gpu_type (the first; MISC is PAI's name for older GPUs)      |
| job.status, job.inst_id, job.end_time, the number of task rows | extra                       |

Dropped (counted): jobs without a GPU task (CPU jobs), jobs with no task row, and jobs not
finished (status Running or Waiting, or no end time). Failed jobs are kept with the time they ran.
Bad rows: a time or plan that is not a number, a negative plan_gpu or inst_num.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dlsched.core.errors import DlschedError
from dlsched.workload.formats import common as c
from dlsched.workload.formats.table import read_table

NAME = "pai"
JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_COLUMNS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu", "plan_mem",
                "plan_gpu", "gpu_type")


def task_table(job_path: Path) -> Path:
    """The task table beside a job table."""
    name = job_path.name
    cands = [job_path.with_name(name.replace("job", "task", 1))] if "job" in name else []
    cands += [job_path.with_name(f"pai_task_table{s}") for s in (".csv", ".csv.gz")]
    for p in cands:
        if p != job_path and p.is_file():
            return p
    raise DlschedError(f"{job_path}: a PAI job table needs its task table beside it "
                       f"({', '.join(p.name for p in cands)}: not found)")


def _load(path: Path, names: tuple[str, ...]):
    frame, lines = read_table(path, names=list(names))
    if len(frame) and [str(x).strip() for x in frame.iloc[0].tolist()] == list(names):
        frame, lines = frame.iloc[1:], lines[1:]           # a header row
    return frame, lines


def load(path: Path):
    return _load(path, JOB_COLUMNS), task_table(path)


def read(job_path: Path) -> c.Trace:
    import pandas as pd
    (jobs, jl), tpath = load(job_path)
    tasks, tl = _load(tpath, TASK_COLUMNS)
    jf, tf = str(job_path), str(tpath)
    jsub, jend = c.numbers(jobs, "start_time"), c.numbers(jobs, "end_time")
    c.first_bad([("start_time", c.bad_number(jsub, c.blank(jobs, "start_time")), "expected seconds >= 0"),
                 ("end_time", c.bad_number(jend, c.blank(jobs, "end_time"), optional=True), "expected seconds >= 0")],
                jobs, jl, jf)
    num = {k: c.numbers(tasks, k) for k in ("inst_num", "start_time", "end_time", "plan_cpu", "plan_mem", "plan_gpu")}
    c.first_bad([(k, c.bad_number(num[k], c.blank(tasks, k), optional=k != "inst_num"),
                  "expected a number >= 0" + ("" if k == "inst_num" else " or nothing")) for k in num], tasks, tl, tf)
    t = pd.DataFrame({"job": tasks["job_name"].astype(str).str.strip().to_numpy(), **num,
                      "gpu_type": tasks["gpu_type"].astype(str).str.strip().to_numpy(),
                      "task": tasks["task_name"].astype(str).str.strip().to_numpy()})
    t["gpu_task"] = t["plan_gpu"].fillna(0) > 0
    t["gpus"] = np.where(t["gpu_task"], t["inst_num"] * t["plan_gpu"] / 100.0, 0.0)
    t["w"] = np.where(t["gpu_task"], t["inst_num"], 0.0)
    t["cpus"] = np.where(t["gpu_task"], t["inst_num"] * t["plan_cpu"].fillna(0) / 100.0, 0.0)
    t["mem"] = np.where(t["gpu_task"], t["inst_num"] * t["plan_mem"].fillna(0), 0.0)
    t["gtype"] = t["gpu_type"].where(t["gpu_task"] & ~t["gpu_type"].isin(("", "nan", "None")))
    g = t.groupby("job", sort=False).agg(
        gpus=("gpus", "sum"), w=("w", "sum"), cpus=("cpus", "sum"), mem=("mem", "sum"), start=("start_time", "min"),
        end=("end_time", "max"), gtype=("gtype", "first"), tasks=("task", "size"))
    name = jobs["job_name"].astype(str).str.strip()
    agg = g.reindex(name.to_numpy())
    status = jobs["status"].astype(str).str.strip()
    dropped: dict[str, int] = {}
    no_task = agg["w"].isna().to_numpy()
    cpu = ~no_task & ~(agg["gpus"].fillna(0).to_numpy() > 0)
    end = np.where(np.isfinite(agg["end"].to_numpy(dtype=float)), agg["end"].to_numpy(dtype=float), jend)
    start = agg["start"].to_numpy(dtype=float)
    unfinished = ~no_task & ~cpu & (status.isin(("Running", "Waiting")).to_numpy() | ~np.isfinite(end)
                                    | ~np.isfinite(start))
    c.count(dropped, "no task row", no_task)
    c.count(dropped, "no GPU task (CPU job)", cpu)
    c.count(dropped, "not finished (Running, Waiting or no end time)", unfinished)
    keep = ~(no_task | cpu | unfinished)
    a = agg[keep]
    workers = np.maximum(np.round(a["w"].to_numpy()), 1.0)
    jk = jobs[keep]
    extra = [json.dumps({"status": s, "inst_id": i, "end_time": e, "tasks": tk}, separators=(",", ":"))
             for s, i, e, tk in zip(jk["status"].tolist(), jk["inst_id"].tolist(), jk["end_time"].tolist(),
                                    a["tasks"].tolist())]
    pairs = c.build_jobs(origin=c.origin(jsub),
        job_ids=("pai-" + name[keep]).tolist(), submit=jsub[keep], duration=np.maximum(end[keep] - start[keep], 0.0),
        workers=workers, gpus_per_worker=a["gpus"].to_numpy() / workers, lines=jl[keep], users=jk["user"],
        gpu_types=a["gtype"], start=start[keep], end=end[keep], extra=extra,
        cpus_per_worker=np.where(a["cpus"].to_numpy() > 0, a["cpus"].to_numpy() / workers, c.CPUS_PER_WORKER),
        mem_gb_per_worker=np.where(a["mem"].to_numpy() > 0, a["mem"].to_numpy() / workers, c.MEM_GB_PER_WORKER))
    return c.Trace(NAME, pairs, dropped)
