"""Shanghai AI Lab's Acme job traces (Hu et al., "Characterization of Large Language Model
Development in the Datacenter", NSDI'24; InternLM/AcmeTrace `data/job_trace/trace_seren.csv` and
`trace_kalos.csv`, CC-BY-4.0).

Header (the AcmeTrace README): Seren `job_id,user,node_num,gpu_num,cpu_num,type,state,
submit_time,start_time,end_time,duration,queue,gpu_time`; Kalos adds `mem_per_pod_GB,
shared_mem_per_pod` (after cpu_num) and `fail_time,stop_time` (after end_time). Times are ISO 8601
with a zone (`2023-03-01 00:18:22+08:00`); `duration` = end_time - start_time and `queue` =
start_time - submit_time, both seconds; `gpu_time` = duration x gpu_num. One row per job, CPU
jobs included; both clusters are A100 clusters (the paper), which the rows do not name.

| column                 | dlsched                                                           |
| ---                    | ---                                                               |
| job_id                 | job_id `acme-<job_id>`                                            |
| user                   | user                                                              |
| gpu_num                | gpu_num workers x 1 GPU (4 cores, 16 GB each, as for Helios)      |
| submit_time            | submit_time_s (seconds from the earliest submission)              |
| start_time, end_time   | recorded_start_s, recorded_end_s (same clock)                     |
| duration               | duration_s (the recorded run time)                                |
| node_num, cpu_num, type, state, queue (the wait, not a tenant), gpu_time, the Kalos columns | extra |

Acme has no virtual clusters: no queue (a `--queues` file can map users). Dropped (counted): CPU
jobs (gpu_num 0) and jobs that never ran (no start_time, or CANCELLED with duration 0). Failed,
cancelled-after-start, TIMEOUT and NODE_FAIL jobs are kept with the time they ran. Bad rows: a
timestamp that does not parse, a gpu_num that is not a whole number >= 0, a duration that is not
a number >= 0.
"""
from __future__ import annotations

import numpy as np

from dlsched.workload.formats import common as c

NAME = "acme"
# gpu_time and type are Acme's own (Helios has vc and neither of them)
COLUMNS = ("job_id", "user", "gpu_num", "submit_time", "duration", "gpu_time", "type")
MAPPED = ("job_id", "user", "gpu_num", "submit_time", "start_time", "end_time", "duration")
TIME = "a time like 2023-03-01 00:18:22+08:00"


def read(frame, lines: np.ndarray, *, file=None) -> c.Trace:
    c.require(frame, ("job_id", "gpu_num", "submit_time", "duration"), file)
    gpus, dur = c.numbers(frame, "gpu_num"), c.numbers(frame, "duration")
    submit, _ = c.times(frame, "submit_time", fmt="ISO8601")
    checks = [
        ("gpu_num", c.bad_number(gpus, c.blank(frame, "gpu_num"), integer=True), "expected a whole number of GPUs >= 0"),
        ("submit_time", c.bad_time(submit, c.blank(frame, "submit_time")), f"expected {TIME}"),
    ]
    rec = {}
    for col in ("start_time", "end_time"):
        if col in frame.columns:
            rec[col], _ = c.times(frame, col, fmt="ISO8601")
            checks.append((col, c.bad_time(rec[col], c.blank(frame, col), optional=True), f"expected {TIME} or nothing"))
    checks.append(("duration", c.bad_number(dur, c.blank(frame, "duration")), "expected seconds >= 0"))
    c.first_bad(checks, frame, lines, file)

    dropped: dict[str, int] = {}
    n = len(frame)
    cpu = gpus == 0
    no_start = np.isnan(rec["start_time"]) if "start_time" in rec else np.zeros(n, dtype=bool)
    cancelled = (frame["state"].astype(str).str.strip().str.upper().str.startswith("CANCELLED").to_numpy()
                 if "state" in frame.columns else np.zeros(n, dtype=bool))
    never = ~cpu & (no_start | (cancelled & (dur == 0)))
    c.count(dropped, "CPU job (gpu_num 0)", cpu)
    c.count(dropped, "never ran (no start_time, or cancelled with duration 0)", never)
    keep = ~(cpu | never)
    f = frame[keep]
    pairs = c.build_jobs(origin=c.origin(submit),
        job_ids=("acme-" + f["job_id"].astype(str).str.strip()).tolist(), submit=submit[keep], duration=dur[keep],
        workers=gpus[keep], gpus_per_worker=np.ones(int(np.count_nonzero(keep))), lines=lines[keep],
        users=f["user"] if "user" in f.columns else None,
        start=rec["start_time"][keep] if "start_time" in rec else None,
        end=rec["end_time"][keep] if "end_time" in rec else None,
        extra=c.extra_json(f, [col for col in f.columns if col not in MAPPED]))
    return c.Trace(NAME, pairs, dropped)
