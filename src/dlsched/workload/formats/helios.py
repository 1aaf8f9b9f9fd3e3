"""SenseTime Helios `cluster_log.csv` (Hu et al., SC'21; S-Lab-System-Group/HeliosData, CC-BY-4.0).

Header (HeliosData README): `job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,
start_time,end_time,duration,queue`; the Helios artifact's processed logs add `jobname`. Times
are `YYYY-MM-DD HH:MM:SS` (no zone); `duration` = end_time - start_time and `queue` =
start_time - submit_time, both seconds. One row per Slurm job, CPU jobs included.

| column                 | dlsched                                                         |
| ---                    | ---                                                             |
| job_id                 | job_id `helios-<job_id>`                                        |
| user                   | user                                                            |
| vc                     | queue (the virtual cluster)                                     |
| gpu_num                | gpu_num workers x 1 GPU (4 cores, 16 GB each, as for Philly)    |
| submit_time            | submit_time_s (seconds from the earliest submission)            |
| start_time, end_time   | recorded_start_s, recorded_end_s (same clock)                   |
| duration               | duration_s (the recorded run time)                              |
| cpu_num, node_num, state, queue (wait), jobname, others | extra                      |

Dropped (counted, `dlsched workload describe` shows them): CPU jobs (gpu_num 0; Helios is a GPU
study and dlsched schedules GPUs) and jobs that never ran (no start_time, or a CANCELLED job with
duration 0). Failed, cancelled-after-start, TIMEOUT and NODE_FAIL jobs are kept with the run time
they had. Bad rows: a timestamp that does not parse, a negative or fractional gpu_num, a duration
that is not a number >= 0.
"""
from __future__ import annotations

import numpy as np

from dlsched.workload.formats import common as c

NAME = "helios"
COLUMNS = ("job_id", "vc", "gpu_num", "submit_time", "duration")
MAPPED = ("job_id", "user", "vc", "gpu_num", "submit_time", "start_time", "end_time", "duration")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def read(frame, lines: np.ndarray, *, file=None) -> c.Trace:
    c.require(frame, COLUMNS, file)
    gpus, dur = c.numbers(frame, "gpu_num"), c.numbers(frame, "duration")
    submit, _ = c.times(frame, "submit_time", fmt=TIME_FORMAT)
    has = {col: col in frame.columns for col in ("start_time", "end_time", "state", "user")}
    start = end = None
    checks = [
        ("gpu_num", c.bad_number(gpus, c.blank(frame, "gpu_num"), integer=True), "expected a whole number of GPUs >= 0"),
        ("submit_time", c.bad_time(submit, c.blank(frame, "submit_time")), f"expected a time {TIME_FORMAT!r}"),
    ]
    if has["start_time"]:
        start, _ = c.times(frame, "start_time", fmt=TIME_FORMAT)
        checks.append(("start_time", c.bad_time(start, c.blank(frame, "start_time"), optional=True),
                       f"expected a time {TIME_FORMAT!r} or nothing"))
    if has["end_time"]:
        end, _ = c.times(frame, "end_time", fmt=TIME_FORMAT)
        checks.append(("end_time", c.bad_time(end, c.blank(frame, "end_time"), optional=True),
                       f"expected a time {TIME_FORMAT!r} or nothing"))
    checks.append(("duration", c.bad_number(dur, c.blank(frame, "duration")), "expected seconds >= 0"))
    c.first_bad(checks, frame, lines, file)

    dropped: dict[str, int] = {}
    cpu = gpus == 0
    n = len(frame)
    no_start = np.isnan(start) if start is not None else np.zeros(n, dtype=bool)
    cancelled = (frame["state"].astype(str).str.strip().str.upper().str.startswith("CANCELLED").to_numpy()
                 if has["state"] else np.zeros(n, dtype=bool))
    never = ~cpu & (no_start | (cancelled & (dur == 0)))
    c.count(dropped, "CPU job (gpu_num 0)", cpu)
    c.count(dropped, "never ran (no start_time, or cancelled with duration 0)", never)
    keep = ~(cpu | never)
    rest = [col for col in frame.columns if col not in MAPPED]
    f, ln = c.kept(frame, keep, ("job_id", "user", "vc", *rest)), lines[keep]
    pairs = c.build_jobs(origin=c.origin(submit),
        job_ids=("helios-" + f["job_id"].astype(str).str.strip()).tolist(), submit=submit[keep],
        duration=dur[keep], workers=gpus[keep], gpus_per_worker=np.ones(int(np.count_nonzero(keep))), lines=ln,
        users=f["user"] if has["user"] else None, queues=f["vc"],
        start=None if start is None else start[keep], end=None if end is None else end[keep],
        extra=c.extra_json(f, rest))
    return c.Trace(NAME, pairs, dropped)
