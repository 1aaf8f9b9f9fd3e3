"""Slurm accounting: `sacct --parsable2` output (pipe-separated, a header of the field names).

For example `sacct -a -X --parsable2 -S 2024-01-01 --format=JobID,JobName,User,Account,Partition,
Submit,Start,End,Elapsed,State,AllocTRES,ReqTRES,NNodes`. Times are Slurm's
`YYYY-MM-DDTHH:MM:SS` (local time); a job not started has Start `Unknown` (or `None`), one still
running End `Unknown`. GPUs are in the TRES strings, `...,gres/gpu=4,...`, typed as
`gres/gpu:a100=4` where the cluster names its types.

| field                  | dlsched                                                              |
| ---                    | ---                                                                  |
| JobID                  | job_id `slurm-<JobID>` (array tasks `123_4` are jobs; steps are not) |
| User                   | user                                                                 |
| Account (else Partition) | queue: the account is the tenant whose share Slurm enforces;     |
|                        | the partition goes to extra                                          |
| AllocTRES (else ReqTRES, AllocGRES, ReqGRES) | gres/gpu=N: N workers x 1 GPU; a typed entry  |
|                        | `gres/gpu:T=N` gives gpu_type T                                      |
| Submit                 | submit_time_s (seconds from the earliest submission)                 |
| Start, End             | recorded_start_s, recorded_end_s (same clock)                        |
| End - Start (else ElapsedRaw, else Elapsed `[D-]HH:MM:SS`) | duration_s                       |
| every other field (State, JobName, NNodes, the TRES strings, ...) | extra                    |

Dropped (counted): job steps (JobID with a `.`: `123.batch`, `123.0`), jobs with no GPU (CPU
jobs), jobs that never started (cancelled while pending) and jobs not finished (no End: pending
or running when sacct ran). Failed, timed-out, cancelled-while-running and node-fail jobs are
kept with the time they ran. Bad rows: a time that does not parse, a negative or fractional GPU
count, an Elapsed that is not a duration.
"""
from __future__ import annotations

import numpy as np

from dlsched.workload.formats import common as c

NAME = "slurm"
COLUMNS = ("JobID", "Submit", "State")
TRES = ("AllocTRES", "ReqTRES", "AllocGRES", "ReqGRES")
MAPPED = ("JobID", "User", "Submit", "Start", "End")
_GPU = r"(?:^|,)(?:gres/)?gpu=(?P<n>-?[0-9.]+)"          # gres/gpu=2 (TRES) or gpu=2
_TYPED = r"(?:^|,)(?:gres/)?gpu:(?P<t>[^=:,]+)[=:](?P<n>-?[0-9.]+)"  # gres/gpu:a100=2, old GRES gpu:a100:2


def _elapsed(frame, col: str) -> np.ndarray:
    """`[D-]HH:MM:SS` (or MM:SS) as seconds; NaN where it does not parse."""
    parts = frame[col].astype(str).str.strip().str.extract(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")
    num = parts.apply(lambda s: s.astype(float)).to_numpy(dtype=np.float64, na_value=np.nan)
    d, h, m, s = (np.nan_to_num(num[:, i]) if i < 2 else num[:, i] for i in range(4))
    return d * 86400 + h * 3600 + m * 60 + s


def _gpus(frame, lines, file):
    """(GPUs, gpu_type or None) per row from the first TRES column the header has."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
    cols = [t for t in TRES if t in frame.columns]
    if not cols:
        c.require(frame, ["AllocTRES"], file)
    col = cols[0]
    text = frame[col].astype(str).str.replace(" ", "", regex=False)
    for other in cols[1:]:        # a job never allocated has only what it asked for
        text = text.where(text != "", frame[other].astype(str).str.replace(" ", "", regex=False))
    arr = pa.array(text.to_numpy(dtype=object), type=pa.string())
    plain = pc.struct_field(pc.extract_regex(arr, _GPU), [0])        # null where no match (Arrow's RE2)
    typed = pc.extract_regex(arr, _TYPED)
    raw = pc.if_else(pc.is_valid(plain), plain, pc.struct_field(typed, [1]))
    try:
        n = pc.cast(raw, pa.float64()).fill_null(float("nan")).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        n = pd.to_numeric(pd.Series(raw.to_pandas()), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    present = pc.is_valid(raw).to_numpy(zero_copy_only=False)
    c.first_bad([(col, present & c.bad_number(n, ~present, integer=True, optional=True),
                  "expected gres/gpu=N with N a whole number >= 0")], frame, lines, file)
    return np.where(present, n, 0.0), pd.Series(pc.struct_field(typed, [0]).to_pandas())


def read(frame, lines: np.ndarray, *, file=None) -> c.Trace:
    c.require(frame, COLUMNS, file)
    dropped: dict[str, int] = {}
    step = frame["JobID"].astype(str).str.contains(".", regex=False).to_numpy()
    c.count(dropped, "job step (JobID with a '.')", step)
    if step.any():
        frame, lines = c.kept(frame, ~step, frame.columns), lines[~step]
    gpus, types = _gpus(frame, lines, file)
    submit, _ = c.times(frame, "Submit")
    checks = [("Submit", c.bad_time(submit, c.blank(frame, "Submit")), "expected a time YYYY-MM-DDTHH:MM:SS")]
    rec = {}
    for col in ("Start", "End"):
        if col in frame.columns:
            rec[col], _ = c.times(frame, col)
            checks.append((col, c.bad_time(rec[col], c.blank(frame, col), optional=True),
                           "expected a time YYYY-MM-DDTHH:MM:SS, Unknown or nothing"))
    dur = np.full(len(frame), np.nan)
    if "ElapsedRaw" in frame.columns:
        raw = c.numbers(frame, "ElapsedRaw")
        checks.append(("ElapsedRaw", c.bad_number(raw, c.blank(frame, "ElapsedRaw"), optional=True),
                       "expected seconds >= 0"))
        dur = raw
    elif "Elapsed" in frame.columns:
        el = _elapsed(frame, "Elapsed")
        checks.append(("Elapsed", c.bad_time(el, c.blank(frame, "Elapsed"), optional=True),
                       "expected a duration [D-]HH:MM:SS"))
        dur = el
    c.first_bad(checks, frame, lines, file)
    if "Start" in rec and "End" in rec:
        both = np.isfinite(rec["Start"]) & np.isfinite(rec["End"])
        dur = np.where(both, np.maximum(rec.get("End", 0) - rec.get("Start", 0), 0.0), dur)
    if "Start" not in rec and "End" not in rec and not ({"ElapsedRaw", "Elapsed"} & set(frame.columns)):
        c.require(frame, ["Start", "End"], file)

    cpu = gpus == 0
    never = ~cpu & (np.isnan(rec["Start"]) if "Start" in rec else np.zeros(len(frame), dtype=bool))
    unfinished = ~cpu & ~never & ((np.isnan(rec["End"]) if "End" in rec else False) | np.isnan(dur))
    c.count(dropped, "no GPU (CPU job)", cpu)
    c.count(dropped, "never started (cancelled while pending)", never)
    c.count(dropped, "not finished (no End)", unfinished)
    keep = ~(cpu | never | unfinished)
    f, ln = c.kept(frame, keep, ("JobID", "User", "Account", "Partition",
                                 *(col for col in frame.columns if col not in MAPPED))), lines[keep]
    queue = f["Account"] if "Account" in f.columns else (f["Partition"] if "Partition" in f.columns else None)
    if "Account" in f.columns and "Partition" in f.columns:
        acct = f["Account"].astype(str).str.strip()
        queue = f["Account"].where(acct != "", f["Partition"])
    rest = [col for col in f.columns if col not in MAPPED and col != "Account"]
    pairs = c.build_jobs(origin=c.origin(submit),
        job_ids=("slurm-" + f["JobID"].astype(str).str.strip()).tolist(), submit=submit[keep], duration=dur[keep],
        workers=gpus[keep], gpus_per_worker=np.ones(len(f)), lines=ln,
        users=f["User"] if "User" in f.columns else None, queues=queue, gpu_types=types[keep],
        start=rec["Start"][keep] if "Start" in rec else None, end=rec["End"][keep] if "End" in rec else None,
        extra=c.extra_json(f, rest))
    return c.Trace(NAME, pairs, dropped)
