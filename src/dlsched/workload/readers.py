"""Readers for the public trace formats dlsched understands, converting them to the common schema.

Each reader takes the rows of an already opened file (see `dlsched.workload.io`, which finds the
format and the encoding) together with the line number of every row, and returns JobSpecs.
Errors are `InputError`s naming the file, the 1-based line (header = line 1) and the field.

Philly per-job CSV (Pollux authors' extract of the Microsoft Philly 2017 trace)
    columns: timestamp,duration,num_gpus,gpu_time,cluster
    - timestamp: submission time `YYYY-MM-DD HH:MM:SS` (the trace's local time)
    - duration: seconds the job ran; num_gpus: GPUs it held; gpu_time = duration x num_gpus
      (not used); cluster: the virtual-cluster hash.
    Converted to: job_id `philly-<i>` (i = 0-based index of the data row in file order),
    submit_time_s = seconds since the earliest timestamp of the file, kind dl, workers =
    num_gpus with 1 GPU each, duration_s = duration (its run time, taken as the run time at the
    ideal placement), queue = cluster (its virtual cluster: the tenant, dlsched.tenancy), user =
    cluster too (the extract has no user column; DRF's fairness between users stays per VC), no
    model, comm allreduce.
    Assumed (the trace does not record them): 4 CPU cores and 16 GB of host memory per worker,
    no disk / network reservation.

Pollux workload CSV (Qiao et al., OSDI'21; bundled as `pollux-1` .. `pollux-8`)
    columns: name,time,application,num_replicas,batch_size
    Converted to: job_id = name, submit_time_s = time, model = application, workers =
    num_replicas with 1 GPU, 4 CPU cores and 16 GB each, batch_size = batch_size (global),
    comm allreduce, iterations = ceil(samples-to-target / batch_size) where samples-to-target is
    what the Pollux simulator trains the application for (see `pollux_samples_to_target`).

Bundled data lives in `dlsched/data/pollux/` (see its README.md for sources and licences).
"""
from __future__ import annotations

import csv
import functools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from dlsched.core.errors import DlschedError, InputError
from dlsched.core.types import JobSpec, Role, TaskSpec
from dlsched.workload.efficiency import iterations_to_target
from dlsched.workload.measured import trained_batch
from dlsched.workload.pollux_data import POLLUX_MAX_EPOCHS, pollux_data_dir  # noqa: F401 (re-exported)
from dlsched.workload.schema import job_from_row, parse_number

if TYPE_CHECKING:  # pandas is imported lazily: the simulator core must import fast
    import pandas

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
PHILLY_REQUIRED = ("timestamp", "duration", "num_gpus")
POLLUX_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
POLLUX_REQUIRED = POLLUX_COLUMNS

# Per-worker host resources assumed for trace jobs that do not record them. Philly servers had
# 24-48 cores and 128-512 GB for 2-8 GPUs; the Pollux testbed (g4dn.12xlarge) 48 cores and
# 192 GB for 4 GPUs. 4 cores and 16 GB per GPU fits all of them without making CPU or memory
# the bottleneck, so these traces stay GPU-bound as in the papers that use them.
TRACE_CPUS_PER_WORKER = 4.0
TRACE_MEM_GB_PER_WORKER = 16.0

PHILLY_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"

POLLUX_WORKLOADS = tuple(f"pollux-{i}" for i in range(1, 9))


# ----------------------------------------------------------------------------- bundled data
# (the data folder and the applications' epochs: pollux_data.py, shared with efficiency / measured)

def bundled_workload_path(ref: str) -> Path | None:
    """The file of a bundled workload name (`pollux-1` .. `pollux-8`, `philly`: the whole Philly
    per-job trace, dlsched/data/philly), or None for other names."""
    if ref in POLLUX_WORKLOADS:
        return pollux_data_dir() / "workloads" / f"workload-{ref.split('-')[1]}.csv"
    if ref == "philly":
        return pollux_data_dir().parent / "philly" / "philly.csv.gz"
    return None


@functools.lru_cache(maxsize=None)
def pollux_samples_to_target(app: str) -> float:
    """Training samples after which the Pollux simulator considers a job of `app` complete.

    The simulator ends a job at progress(max_epochs) = min over the application's
    validation-<bsz>.csv files of `progress` at row max_epochs - 1. `progress` counts iterations
    at the application's initial batch size (the smallest profiled one: in that file progress
    equals iteration; e.g. cifar10 epoch 1 = 391 = 50,000 images / 128), so the samples are
    progress x init_batch_size (cifar10: 39,063 x 128 = 5.0 M = 100 epochs of 50,000 images).
    """
    name = app.lower()
    if name not in POLLUX_MAX_EPOCHS:
        raise DlschedError(f"unknown Pollux application {app!r} (known: {', '.join(POLLUX_MAX_EPOCHS)})")
    folder = pollux_data_dir() / "app-profiles" / name
    files = sorted(folder.glob("validation-*.csv"))
    if not files:
        raise DlschedError(f"{folder}: no validation-*.csv profiles (bundled data missing?)")
    row = POLLUX_MAX_EPOCHS[name] - 1
    progress = []
    batch_sizes = []
    for f in files:
        batch_sizes.append(int(f.stem.split("-")[1]))
        with f.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        if len(rows) <= row:
            raise DlschedError(f"{f}: {len(rows)} epochs profiled, {name} needs {row + 1}")
        progress.append(float(rows[row]["progress"]))
    return min(progress) * min(batch_sizes)


# ----------------------------------------------------------------------------- helpers

def _first_bad(masks: list[tuple[str, np.ndarray]], lines: np.ndarray) -> tuple[int, str] | None:
    """The row index and field of the first bad value in file order (field order breaks ties)."""
    best: tuple[int, int, int, str] | None = None   # (line, field order, row, field)
    for order, (fld, mask) in enumerate(masks):
        idx = np.flatnonzero(mask)
        if idx.size:
            i = int(idx[0])
            key = (int(lines[i]), order, i, fld)
            if best is None or key < best:
                best = key
    return None if best is None else (best[2], best[3])


def _missing_columns(columns: Iterable[str], required: Iterable[str], file) -> None:
    cols = set(columns)
    for c in required:
        if c not in cols:
            raise InputError(f"missing column {c!r} (header has: {', '.join(columns)})",
                             file=file, line=1, field=c)


# ----------------------------------------------------------------------------- schema

def read_schema_rows(rows: Iterable[tuple[int, dict[str, Any]]], *, file: str | None = None
                     ) -> list[tuple[int, JobSpec]]:
    """Common-schema rows (line, row dict) -> (line, JobSpec), validated by `job_from_row`."""
    return [(line, job_from_row(row, file=file, line=line)) for line, row in rows]


# ----------------------------------------------------------------------------- Philly

_PHILLY_TASKS: dict[int, tuple[TaskSpec, ...]] = {}


def _philly_tasks(n: int) -> tuple[TaskSpec, ...]:
    # Tasks are frozen values, so every n-GPU Philly job can share one tuple: building 82k jobs
    # then costs one JobSpec each.
    tasks = _PHILLY_TASKS.get(n)
    if tasks is None:
        demand = (1.0, TRACE_CPUS_PER_WORKER, TRACE_MEM_GB_PER_WORKER, 0.0, 0.0)
        tasks = tuple(TaskSpec(i, Role.WORKER, demand, None) for i in range(n))
        _PHILLY_TASKS[n] = tasks
    return tasks


def read_philly(frame: "pandas.DataFrame", lines: np.ndarray, *, file: str | None = None
                ) -> list[tuple[int, JobSpec]]:
    """Philly per-job rows -> (line, JobSpec) in file order.

    Parsing and validation are vectorised (the whole trace is 82,247 rows); the first bad row in
    file order is reported with its line and field."""
    import pandas as pd

    _missing_columns(list(frame.columns), PHILLY_REQUIRED, file)
    n = len(frame)
    if n == 0:
        return []
    raw_ts = frame["timestamp"]
    if pd.api.types.is_datetime64_any_dtype(raw_ts.dtype):
        ts = raw_ts
    else:
        ts = pd.to_datetime(raw_ts.astype(str).str.strip(), format=PHILLY_TIME_FORMAT, errors="coerce")
    dur = pd.to_numeric(frame["duration"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    gpus = pd.to_numeric(frame["num_gpus"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    with np.errstate(invalid="ignore"):
        bad = _first_bad([
            ("timestamp", ts.isna().to_numpy()),
            ("duration", ~np.isfinite(dur) | (dur < 0)),
            ("num_gpus", ~np.isfinite(gpus) | (gpus < 1) | (gpus != np.floor(gpus))),
        ], lines)
    if bad is not None:
        i, fld = bad
        value = frame[fld].iloc[i]
        why = {"timestamp": f"expected a time {PHILLY_TIME_FORMAT!r}, got {value!r}",
               "duration": f"expected a number of seconds >= 0, got {value!r}",
               "num_gpus": f"expected an integer >= 1, got {value!r}"}[fld]
        raise InputError(why, file=file, line=int(lines[i]), field=fld)

    t = ts.to_numpy(dtype="datetime64[us]").astype(np.int64)
    submit = ((t - t.min()) / 1e6).tolist()
    if "cluster" in frame.columns:
        users = ["default" if (u is None or u != u or str(u).strip() == "") else str(u).strip()
                 for u in frame["cluster"].tolist()]
    else:
        users = ["default"] * n
    counts = gpus.astype(np.int64).tolist()
    tasks_of = {g: _philly_tasks(g) for g in set(counts)}
    # Same values job_from_row would build from the equivalent schema row (a test checks it).
    return [(line, JobSpec(job_id=f"philly-{i}", submit_time_s=s, kind="dl", tasks=tasks_of[g], user=u,
                           comm="allreduce", duration_s=d, queue=u))
            for i, (s, d, g, u, line) in enumerate(zip(submit, dur.tolist(), counts, users, lines.tolist()))]


# ----------------------------------------------------------------------------- Pollux

def pollux_iterations(app: str, batch: int, replicas: int) -> float:
    """Iterations a Pollux job of `app` with target batch `batch` on `replicas` GPUs trains for,
    as Pollux's simulator counts them: its trained batch (the target rounded to whole per-GPU
    batches, `measured.trained_batch`) and statistical efficiency (`efficiency.py`)."""
    return float(math.ceil(iterations_to_target(app, trained_batch(app, batch, replicas))))


def read_pollux(frame: "pandas.DataFrame", lines: np.ndarray, *, file: str | None = None
                ) -> list[tuple[int, JobSpec]]:
    """Pollux workload rows -> (line, JobSpec) in file order (a few hundred rows: a plain loop)."""
    _missing_columns(list(frame.columns), POLLUX_REQUIRED, file)
    cols = [frame[c].tolist() for c in POLLUX_COLUMNS]
    out = []
    for (name, time, app, replicas, bsz), line in zip(zip(*cols), lines.tolist()):
        if name is None or (isinstance(name, float) and math.isnan(name)) or not str(name).strip():
            raise InputError("is required", file=file, line=line, field="name")
        submit = parse_number(time, file=file, line=line, field="time")
        app_name = "" if app is None or (isinstance(app, float) and math.isnan(app)) else str(app).strip().lower()
        if app_name not in POLLUX_MAX_EPOCHS:
            raise InputError(f"unknown application {app!r} (known: {', '.join(POLLUX_MAX_EPOCHS)})",
                             file=file, line=line, field="application")
        workers = parse_number(replicas, file=file, line=line, field="num_replicas", integer=True, minimum=1)
        batch = parse_number(bsz, file=file, line=line, field="batch_size", integer=True, minimum=1)
        iterations = pollux_iterations(app_name, batch, workers)
        row = {
            "job_id": str(name).strip(), "submit_time_s": submit, "kind": "dl", "workers": workers,
            "gpus_per_worker": 1.0, "cpus_per_worker": TRACE_CPUS_PER_WORKER,
            "mem_gb_per_worker": TRACE_MEM_GB_PER_WORKER, "model": app_name, "comm": "allreduce",
            "batch_size": batch, "iterations": iterations,
        }
        out.append((line, job_from_row(row, file=file, line=line)))
    return out


# ----------------------------------------------------------------------------- detection

FORMAT_COLUMNS: dict[str, tuple[str, ...]] = {
    # the columns whose presence identifies a format (checked in this order)
    "schema": ("job_id", "submit_time_s"),
    "philly": PHILLY_REQUIRED,
    "pollux": ("name", "time", "application", "num_replicas"),
}


def detect_format(columns: Iterable[str]) -> str | None:
    """`schema`, `philly` or `pollux` from a header's column names; None when none matches."""
    cols = {str(c).strip() for c in columns}
    for fmt, needed in FORMAT_COLUMNS.items():
        if all(c in cols for c in needed):
            return fmt
    return None

