"""The Tiresias simulator's job trace (Gu et al., NSDI'19; SymbioticLab/Tiresias, `simulator/`).

CSV with a header (a `.txt` trace is space-separated, as the simulator's `parse_job_file` reads
it); its README names the columns `job_id,num_gpu,submit_time,iterations,model_name,duration,
interval`. What the simulator does with them (`jobs.py: add_job`, `run_sim.py`):

| column      | meaning in Tiresias                                   | dlsched                       |
| ---         | ---                                                   | ---                           |
| job_id      | for tracking                                          | job_id `tiresias-<job_id>`    |
| num_gpu     | GPUs the job needs, all at once (a gang)              | workers x 1 GPU               |
| submit_time | seconds from 0 (the simulator sorts jobs by it)       | submit_time_s (from the first)|
| duration    | run time; `int(float(duration))`, ends the job        | duration_s (as written)       |
| iterations  | not used by its schedulers                            | extra                         |
| model_name  | only memory and tensor sizes for placement; run time  | extra (not `model`: a zoo     |
|             | never depends on it                                   | model would change run times) |
| interval    | gap to the next submission (redundant)                | extra                         |
| others      | -                                                     | extra                         |

Every row is a job (the simulator keeps them all). Bad rows: a missing or non-numeric
submit_time / duration, a GPU count that is not a whole number >= 1.
"""
from __future__ import annotations

import numpy as np

from dlsched.workload.formats import common as c

NAME = "tiresias"
COLUMNS = ("job_id", "num_gpu", "submit_time", "duration")
MAPPED = COLUMNS


def read(frame, lines: np.ndarray, *, file=None) -> c.Trace:
    c.require(frame, COLUMNS, file)
    submit, dur, gpus = c.numbers(frame, "submit_time"), c.numbers(frame, "duration"), c.numbers(frame, "num_gpu")
    ids = frame["job_id"].astype(str).str.strip()
    c.first_bad([
        ("job_id", (ids == "").to_numpy(), "expected a job id"),
        ("num_gpu", c.bad_number(gpus, c.blank(frame, "num_gpu"), minimum=1, integer=True),
         "expected a whole number of GPUs >= 1"),
        ("submit_time", c.bad_number(submit, c.blank(frame, "submit_time")), "expected seconds >= 0"),
        ("duration", c.bad_number(dur, c.blank(frame, "duration")), "expected seconds >= 0"),
    ], frame, lines, file)
    rest = [col for col in frame.columns if col not in MAPPED]
    pairs = c.build_jobs(origin=c.origin(submit), job_ids=("tiresias-" + ids).tolist(), submit=submit, duration=dur,
                         workers=gpus, gpus_per_worker=np.ones(len(frame)), lines=lines,
                         extra=c.extra_json(frame, rest))
    return c.Trace(NAME, pairs)
