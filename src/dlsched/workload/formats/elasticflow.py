"""Microsoft ITP job traces as released for ElasticFlow (Gu et al., "ElasticFlow: An Elastic
Serverless Training Platform for Distributed Deep Learning", ASPLOS'23;
microsoft/elasticflow-traces, MIT), in both layouts, and the layout ElasticFlow's own trace
generator writes (pkusys/ElasticFlow `trace_generator/generate_trace_from_itp.py`).

- raw (`data/raw-traces.tar.gz`, one CSV per ITP cluster): `job_id,submission_time,duration,
  num_gpu`;
- augmented (`data/elasticflow-traces.tar.gz`, what ElasticFlow's simulator reads):
  `job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration`, the
  iterations, model, batch size and deadline generated at random from the raw job;
- the generator's: `job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration`
  (ElasticFlow's `jobs.py` reads either name of each column).

Times are seconds from the start of collection; the deadline is absolute, on the same clock.

| column                        | dlsched                                                    |
| ---                           | ---                                                        |
| job_id                        | job_id `itp-<job_id>`                                      |
| submission_time (submit_time) | submit_time_s (seconds from the earliest submission)       |
| num_gpu                       | num_gpu workers x 1 GPU                                    |
| duration                      | duration_s                                                 |
| deadline (ddl)                | deadline_s (same clock as submit_time_s)                   |
| num_iteration (iteration), model_name, batch_size | extra: generated, not measured; as a zoo model and an iteration count they would replace the recorded run time |
| others                        | extra                                                      |

ITP records no users, queues, GPU types or start times (user `default`, no queue). Every row is
a job. Bad rows: a submission time, duration or deadline that is not a number >= 0, a num_gpu
that is not a whole number >= 1.
"""
from __future__ import annotations

import numpy as np

from dlsched.workload.formats import common as c

NAME = "elasticflow"
COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")
#: the header sets that identify the format: the released traces, and the generator's layout
#: (Tiresias's columns and a `ddl`: checked before Tiresias's)
SIGNATURES = (COLUMNS, ("job_id", "submit_time", "ddl", "duration", "num_gpu"))
MAPPED = ("job_id", "submission_time", "submit_time", "duration", "num_gpu", "deadline", "ddl")


def read(frame, lines: np.ndarray, *, file=None) -> c.Trace:
    sub = "submission_time" if "submission_time" in frame.columns or "submit_time" not in frame.columns \
        else "submit_time"
    c.require(frame, ("job_id", sub, "duration", "num_gpu"), file)
    ddl = next((col for col in ("deadline", "ddl") if col in frame.columns), None)
    submit, dur, gpus = c.numbers(frame, sub), c.numbers(frame, "duration"), c.numbers(frame, "num_gpu")
    ids = frame["job_id"].astype(str).str.strip()
    checks = [
        ("job_id", (ids == "").to_numpy(), "expected a job id"),
        (sub, c.bad_number(submit, c.blank(frame, sub)), "expected seconds >= 0"),
        ("duration", c.bad_number(dur, c.blank(frame, "duration")), "expected seconds >= 0"),
        ("num_gpu", c.bad_number(gpus, c.blank(frame, "num_gpu"), minimum=1, integer=True),
         "expected a whole number of GPUs >= 1"),
    ]
    deadline = None
    if ddl is not None:
        deadline = c.numbers(frame, ddl)
        checks.append((ddl, c.bad_number(deadline, c.blank(frame, ddl), optional=True),
                       "expected seconds >= 0 or nothing"))
    c.first_bad(checks, frame, lines, file)
    pairs = c.build_jobs(origin=c.origin(submit), job_ids=("itp-" + ids).tolist(), submit=submit, duration=dur,
                         workers=gpus, gpus_per_worker=np.ones(len(frame)), lines=lines, deadline=deadline,
                         extra=c.extra_json(frame, [col for col in frame.columns if col not in MAPPED]))
    return c.Trace(NAME, pairs)
