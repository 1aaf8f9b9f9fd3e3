"""Alibaba's spot GPU trace (Duan et al., "GFS: A Preemptive Scheduling Framework for GPU
Clusters with Predictive Spot Management", ASPLOS'26; alibaba/clusterdata
`cluster-trace-v2026-spot-gpu/job_info_df.csv`).

Header (the trace's README): `job_name,organization,gpu_model,cpu_request,gpu_request,
worker_num,submit_time,duration,job_type`. Times are seconds from the first submission;
`job_type` is `HP` (high priority, with strict SLOs) or `Spot` (runs on spot GPUs, may be
preempted). The README calls gpu_request the GPUs "requested by the job" and worker_num the
"instances requested by the job"; its examples (gpu_request 1, worker_num 94) read as GPUs per
instance, and so does this reader.

| column        | dlsched                                                                |
| ---           | ---                                                                    |
| job_name      | job_id `spot-<job_name>`                                               |
| organization  | queue (the cost organisation: a department or agency)                  |
| gpu_model     | gpu_type (A10, A100-SXM4-80GB, GPU-series-1, ...)                      |
| worker_num, gpu_request | worker_num workers x gpu_request GPUs (a fraction where it is one) |
| cpu_request   | cores per worker                                                       |
| submit_time   | submit_time_s (seconds from the earliest submission)                   |
| duration      | duration_s                                                             |
| job_type, others | extra (HP or Spot: dlsched has no spot capacity, so every job runs as submitted) |

No user column (user `default`) and no start or end times. Dropped (counted): jobs with no GPU
(gpu_request 0). Bad rows: a submit_time or duration that is not a number >= 0, a gpu_request
that is not a number >= 0, a worker_num that is not a whole number >= 1.
"""
from __future__ import annotations

import numpy as np

from dlsched.workload.formats import common as c

NAME = "spot"
COLUMNS = ("job_name", "gpu_request", "worker_num", "submit_time", "duration")
MAPPED = ("job_name", "organization", "gpu_model", "cpu_request", "gpu_request", "worker_num", "submit_time",
          "duration")


def read(frame, lines: np.ndarray, *, file=None) -> c.Trace:
    c.require(frame, COLUMNS, file)
    num = {k: c.numbers(frame, k) for k in ("gpu_request", "worker_num", "submit_time", "duration")}
    checks = [
        ("gpu_request", c.bad_number(num["gpu_request"], c.blank(frame, "gpu_request")), "expected GPUs >= 0"),
        ("worker_num", c.bad_number(num["worker_num"], c.blank(frame, "worker_num"), minimum=1, integer=True),
         "expected a whole number of instances >= 1"),
        ("submit_time", c.bad_number(num["submit_time"], c.blank(frame, "submit_time")), "expected seconds >= 0"),
        ("duration", c.bad_number(num["duration"], c.blank(frame, "duration")), "expected seconds >= 0"),
    ]
    cpus = None
    if "cpu_request" in frame.columns:
        cpus = c.numbers(frame, "cpu_request")
        checks.append(("cpu_request", c.bad_number(cpus, c.blank(frame, "cpu_request"), optional=True),
                       "expected cores >= 0 or nothing"))
    c.first_bad(checks, frame, lines, file)

    dropped: dict[str, int] = {}
    cpu_job = num["gpu_request"] == 0
    c.count(dropped, "no GPU (gpu_request 0)", cpu_job)
    keep = ~cpu_job
    f = frame[keep]
    cores = None if cpus is None else np.where(np.isfinite(cpus[keep]), cpus[keep], c.CPUS_PER_WORKER)
    pairs = c.build_jobs(origin=c.origin(num["submit_time"]),
        job_ids=("spot-" + f["job_name"].astype(str).str.strip()).tolist(), submit=num["submit_time"][keep],
        duration=num["duration"][keep], workers=num["worker_num"][keep], gpus_per_worker=num["gpu_request"][keep],
        lines=lines[keep], queues=f["organization"] if "organization" in f.columns else None,
        gpu_types=f["gpu_model"] if "gpu_model" in f.columns else None, cpus_per_worker=cores,
        extra=c.extra_json(f, [col for col in f.columns if col not in MAPPED]))
    return c.Trace(NAME, pairs, dropped)
