"""The Standard Workload Format of the Parallel Workloads Archive (Feitelson et al.; SWF 2.2).

Plain text: `;` starts a header comment (`; Version: 2.2`, `; MaxProcs: 1024`, ...), every other
non-blank line is one job of 18 whitespace-separated numbers, -1 where unknown. A file is
recognised by its name (`.swf`, `.swf.gz`) or a first line starting with `;`.

| # | SWF field                      | dlsched                                                    |
| - | ---                            | ---                                                        |
| 1 | job number                     | job_id `swf-<n>`                                           |
| 2 | submit time (s)                | submit_time_s (from the earliest submission)               |
| 3 | wait time (s)                  | recorded_start_s = submit + wait (when >= 0)               |
| 4 | run time (s)                   | duration_s; recorded_end_s = recorded start + run time     |
| 5 | allocated processors           | the job's GPUs: that many workers x 1 GPU (a "processor"   |
|   |                                | is what the archive's cluster allocates; for a GPU cluster |
|   |                                | logged in SWF, a GPU)                                      |
| 8 | requested processors           | the GPUs when field 5 is -1                                |
| 12 | user id                       | user `u<id>` (-1: default)                                 |
| 15 | queue number                  | queue `q<n>` (-1: none)                                    |
| 16 | partition number              | queue `p<n>` when there is no queue number; else extra     |
| 6, 7, 9, 10, 11, 13, 14, 17, 18 | average CPU time, memory, requested time and memory, status, group, executable, preceding job, think time | extra (by SWF's field names) |

Dropped (counted): jobs with no run time (-1: cancelled before it started, the archive's
convention) and jobs with no processors (-1 in fields 5 and 8). Jobs whose status (field 11)
is 0 (failed) or 5 (cancelled after start) are kept with the run time they had. Bad rows: a
line without 18 fields, a field that is not a number, a negative processor count other than -1.
"""
from __future__ import annotations

import io

import numpy as np

from dlsched.core.errors import InputError
from dlsched.workload.formats import common as c
from dlsched.workload.formats.table import read_bytes

NAME = "swf"
FIELDS = ("job_number", "submit_time", "wait_time", "run_time", "allocated_processors", "average_cpu_time",
          "used_memory", "requested_processors", "requested_time", "requested_memory", "status", "user_id",
          "group_id", "executable_number", "queue_number", "partition_number", "preceding_job",
          "think_time")
MAPPED = ("job_number", "submit_time", "wait_time", "run_time", "allocated_processors", "requested_processors",
          "user_id", "queue_number")


def load(path) -> tuple:
    """(DataFrame of the 18 fields as text, the line of each job)."""
    import pandas as pd
    file = str(path)
    text = read_bytes(path).decode("utf-8", errors="replace")
    rows, lines = [], []
    for i, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if s and not s.startswith(";"):
            rows.append(s)
            lines.append(i)
    ln = np.asarray(lines, dtype=np.int64)
    if not rows:
        return pd.DataFrame(columns=list(FIELDS), dtype=object), ln
    counts = np.fromiter((len(r.split()) for r in rows), dtype=np.int64, count=len(rows))
    wrong = np.flatnonzero(counts != len(FIELDS))
    if wrong.size:
        i = int(wrong[0])
        k = int(counts[i])
        raise InputError(f"an SWF job line has 18 fields, this one {k}", file=file, line=int(ln[i]),
                         field=FIELDS[min(k, len(FIELDS) - 1)])
    frame = pd.read_csv(io.StringIO("\n".join(rows)), sep=r"\s+", header=None, names=list(FIELDS), dtype=str,
                        keep_default_na=False, engine="c")
    return frame, ln


def read(frame, lines: np.ndarray, *, file=None) -> c.Trace:
    vals = {f: c.numbers(frame, f) for f in FIELDS}
    checks = [(f, c.bad_number(vals[f], c.blank(frame, f), minimum=-np.inf), "expected a number (-1: unknown)")
              for f in FIELDS]
    for f in ("allocated_processors", "requested_processors"):
        v = vals[f]
        checks.append((f, (v < 0) & (v != -1) | (v != np.floor(v)), "expected a whole number >= 0, or -1"))
    c.first_bad(checks, frame, lines, file)
    procs = np.where(vals["allocated_processors"] >= 0, vals["allocated_processors"], vals["requested_processors"])
    run, wait, submit = vals["run_time"], vals["wait_time"], vals["submit_time"]
    dropped: dict[str, int] = {}
    no_run = run < 0
    no_procs = ~no_run & (procs <= 0)
    c.count(dropped, "no run time (-1: cancelled before it started)", no_run)
    c.count(dropped, "no processors", no_procs)
    keep = ~(no_run | no_procs)
    f, ln = frame[keep], lines[keep]
    start = np.where(wait >= 0, submit + wait, np.nan)[keep]
    user = vals["user_id"][keep]
    queue_n, part_n = vals["queue_number"][keep], vals["partition_number"][keep]
    users = np.where(user >= 0, np.char.add("u", user.astype(np.int64).astype(str)), "default")
    queues = np.where(queue_n >= 0, np.char.add("q", queue_n.astype(np.int64).astype(str)),
                      np.where(part_n >= 0, np.char.add("p", part_n.astype(np.int64).astype(str)), ""))
    rest = [x for x in FIELDS if x not in MAPPED]
    unknown_blank = f[rest].mask(f[rest].apply(lambda col: col.str.strip() == "-1"), "")   # -1: unknown
    pairs = c.build_jobs(origin=c.origin(submit),
        job_ids=("swf-" + f["job_number"].astype(str)).tolist(), submit=submit[keep], duration=run[keep],
        workers=procs[keep], gpus_per_worker=np.ones(len(f)), lines=ln, users=users, queues=queues,
        start=start, end=start + run[keep], extra=c.extra_json(unknown_blank, rest))
    return c.Trace(NAME, pairs, dropped)
