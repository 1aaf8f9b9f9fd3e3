"""Gavel's trace files (Narayanan et al., OSDI'20; stanford-futuredata/gavel), read as they are.

A Gavel trace is tab-separated text, no header, one job per line. Three layouts exist; the
layout of a file is taken from the field count of its first row, and every other row must have
the same count:

    10 fields (current, since Gavel PR #200, Aug 2020; `scheduler/utils.py:parse_trace`):
       job_type command working_directory num_steps_arg needs_data_dir total_steps
       scale_factor priority_weight SLO arrival_time
     9 fields (Mar-Aug 2020): the same without working_directory
     7 fields (2019; the per-Philly-VC traces `traces/msr/seed=N/<vc>.trace`):
       job_type command num_steps_arg needs_data_dir total_steps arrival_time scale_factor

Lines are numbered from 1 (no header); blank lines are skipped.

| Gavel field     | JobSpec                                                                     |
| ---             | ---                                                                         |
| (file order)    | job_id `gavel-<i>`: i = the job's 0-based index among the file's kept rows, |
|                 | as Gavel's `_job_id_counter` numbers them (it adds trace jobs in file       |
|                 | order); zero-padded to the width of the last index, so that sorting by      |
|                 | (submit_time_s, job_id) keeps Gavel's order among equal arrivals            |
| job_type        | model, exactly as written (e.g. `ResNet-50 (batch size 64)`)                |
| total_steps     | iterations (an integer >= 0); duration_s = None                             |
| scale_factor    | that many workers of 1 GPU each (plus TRACE_CPUS_PER_WORKER cores and       |
|                 | TRACE_MEM_GB_PER_WORKER GB, as for Philly): kind dl, a gang, comm allreduce |
| priority_weight | priority = the weight (must be a whole number > 0; 7-field rows: 1, the     |
|                 | weight Gavel gave them)                                                     |
| SLO             | deadline_s: None when SLO < 0 (Gavel writes -1); else see below             |
| arrival_time    | submit_time_s (seconds, >= 0, never decreasing down the file)               |
| command, working_directory, num_steps_arg | not used (what a real run would execute)          |
| needs_data_dir  | not used (checked to be 0 or 1)                                             |

Where we follow Gavel, and where we cannot:
- scale_factor 0: a 7-field row with it is skipped and gets no job id (Gavel's 2019 parser,
  commit ace90a3, `if int(scale_factor) == 0: continue`); in the 9- and 10-field layouts it is an
  error (today's parser asserts `int(scale_factor) >= 1`).
- Arrivals must not decrease: Gavel's simulator asserts `arrival_times[i] >= arrival_times[i-1]`.
- priority_weight: Gavel's policies treat it as a real-valued weight (max-min fairness divides
  each job's share by it), and the only values it writes are whole (`Job.__str__` prints it with
  `%d`; `generate_job` draws 1 or 5). dlsched's priority is an integer, larger first, so a whole
  weight maps to itself and a fractional one is an error naming its line, rather than rounded
  into another job's class. What is lost: Gavel weighs shares by it, dlsched orders by it.
- SLO: Gavel's `Job` keeps `SLO < 0` as None; otherwise `add_job` sets the deadline to
  `SLO * job.duration + <time of add_job>`, where `duration` is the job's run time alone on the
  reference type, V100 (`generate_job`: `total_steps = run_time * throughputs['v100'][(type,
  sf)]['null']`). A trace does not record that duration (`parse_trace` passes `duration=None`,
  and Gavel asserts it is set when SLOs are on), so deadline_s = arrival_time + SLO x
  total_steps / steps_per_s(job_type, scale_factor), with `steps_per_s` the caller's V100
  throughput table (steps/s of the whole job). Gavel's base time is the round in which the job
  was added (at or after its arrival); ours is the arrival itself. Without a table, a row with
  SLO >= 0 is an error: a deadline is never silently dropped. (Every trace in Gavel's
  repository has SLO -1.)
"""
from __future__ import annotations

import functools
import gzip
from collections.abc import Callable
from pathlib import Path

from dlsched.core.errors import DlschedError, InputError
from dlsched.core.types import JobSpec, Role, TaskSpec
from dlsched.workload.readers import TRACE_CPUS_PER_WORKER, TRACE_MEM_GB_PER_WORKER
from dlsched.workload.schema import parse_number

LAYOUTS: dict[int, tuple[str, ...]] = {
    10: ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps",
         "scale_factor", "priority_weight", "SLO", "arrival_time"),
    9: ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps",
        "scale_factor", "priority_weight", "SLO", "arrival_time"),
    7: ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time", "scale_factor"),
}
_LAYOUT_NAMES = {10: "10-field (current)", 9: "9-field (2020)", 7: "7-field (2019)"}
SUFFIXES = (".trace", ".trace.gz")

#: the V100 throughput of a Gavel job type (job_type, scale_factor) -> steps/s of the whole job
StepsPerS = Callable[[str, int], "float | None"]

_TASKS: dict[int, tuple[TaskSpec, ...]] = {}


def is_gavel_trace(path: str | Path) -> bool:
    """Whether a file name says it is a Gavel trace (`.trace`, `.trace.gz`)."""
    return str(path).lower().endswith(SUFFIXES)


def _tasks(n: int) -> tuple[TaskSpec, ...]:
    # frozen values: every job of n GPUs shares one tuple (as the Philly reader does)
    tasks = _TASKS.get(n)
    if tasks is None:
        demand = (1.0, TRACE_CPUS_PER_WORKER, TRACE_MEM_GB_PER_WORKER, 0.0, 0.0)
        tasks = _TASKS[n] = tuple(TaskSpec(i, Role.WORKER, demand, None) for i in range(n))
    return tasks


def _lines(path: Path):
    """(line number, text without its line end) of every line of the file, gzipped or not."""
    file = str(path)
    try:
        with path.open("rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        with (gzip.open if gz else open)(path, "rt", encoding="utf-8-sig", newline="") as fh:
            for number, text in enumerate(fh, start=1):
                yield number, text.rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text ({e.reason})", file=file) from None
    except (OSError, EOFError) as e:
        raise DlschedError(f"{file}: cannot read ({e}; a truncated file?)") from None


def _number(row: dict[str, str], name: str, *, file: str, line: int, integer: bool = False,
            minimum: float = 0.0):
    return parse_number(row[name], file=file, line=line, field=name, integer=integer, minimum=minimum)


def _first_row_error(n: int, *, file: str, line: int) -> InputError:
    """The error of a first row whose field count is no layout's."""
    known = "a Gavel trace row has 10 (current layout), 9 (2020) or 7 (2019) (not a Gavel trace?)"
    if n < 7:
        return InputError(f"missing: the first row has {n} tab-separated field(s); {known}",
                          file=file, line=line, field=LAYOUTS[7][n])
    if n > 10:
        return InputError(f"the first row has {n} tab-separated fields, {known}: extra value(s) after this field",
                          file=file, line=line, field=LAYOUTS[10][-1])
    return InputError(f"the first row has {n} tab-separated fields, which is no layout's; {known}",
                      file=file, line=line)     # 8: one too many or one too few, we cannot tell which


def _count_error(n: int, layout: int, first: int, *, file: str, line: int) -> InputError:
    """The error of a row with n fields in a file whose first row (line `first`) set `layout`."""
    names = LAYOUTS[layout]
    mixed = f" (a {_LAYOUT_NAMES[n]} row: the file mixes layouts)" if n in LAYOUTS else ""
    head = f"the row has {n} tab-separated fields, line {first} set the {_LAYOUT_NAMES[layout]} layout{mixed}"
    if n < layout:
        return InputError(f"missing: {head}", file=file, line=line, field=names[n])
    return InputError(f"{head}: extra value(s) after this field", file=file, line=line, field=names[-1])


def read_gavel_trace(path: str | Path, *, steps_per_s: StepsPerS | None = None,
                     file: str | None = None) -> list[tuple[int, JobSpec]]:
    """(line, JobSpec) of every job of a Gavel trace, in file order (see the module docstring).

    `steps_per_s` (job_type, scale_factor) -> steps/s alone on a V100 turns an SLO into a
    deadline; without it a row with an SLO (>= 0) is an error. Errors are InputErrors naming the
    file, the line and the field."""
    path = Path(path)
    file = file or str(path)
    layout = first = 0
    rows: list[tuple[int, str, float, int, int, float | None, float]] = []
    last_arrival = 0.0
    for line, text in _lines(path):
        if not text.strip():
            continue
        fields = text.split("\t")
        if "\0" in text:                      # e.g. the zero-filled tail a crash can leave
            raise InputError("NUL byte (a corrupt or binary file?)", file=file, line=line)
        if not layout:
            if len(fields) not in LAYOUTS:
                raise _first_row_error(len(fields), file=file, line=line)
            layout, first = len(fields), line
        elif len(fields) != layout:
            raise _count_error(len(fields), layout, first, file=file, line=line)
        row = dict(zip(LAYOUTS[layout], fields))
        num = functools.partial(_number, row, file=file, line=line)
        job_type = row["job_type"]
        if not job_type.strip():
            raise InputError("is required (the job type, e.g. 'ResNet-50 (batch size 64)')",
                             file=file, line=line, field="job_type")
        if num("needs_data_dir", integer=True) not in (0, 1):
            raise InputError(f"expected 0 or 1, got {row['needs_data_dir']!r}", file=file, line=line,
                             field="needs_data_dir")
        steps = num("total_steps", integer=True)
        gpus = num("scale_factor", integer=True, minimum=0 if layout == 7 else 1)
        arrival = num("arrival_time")
        if layout == 7:
            weight, slo = 1, None
        else:
            w = num("priority_weight", minimum=float("-inf"))
            if w <= 0 or w != int(w):
                raise InputError(
                    f"expected a whole weight > 0 (Gavel writes 1 or 5; dlsched priorities are integers), "
                    f"got {row['priority_weight']!r}", file=file, line=line, field="priority_weight")
            weight = int(w)
            s = num("SLO", minimum=float("-inf"))
            slo = None if s < 0 else s
        if gpus == 0:
            continue                          # Gavel's 2019 parser skips these rows
        if rows and arrival < last_arrival:
            raise InputError(f"arrivals must not decrease down the file (Gavel numbers jobs in file order "
                             f"and asserts it), got {row['arrival_time']!r} after {last_arrival:g}",
                             file=file, line=line, field="arrival_time")
        last_arrival = arrival
        deadline = None if slo is None else arrival + slo * steps / _reference_speed(
            steps_per_s, job_type, gpus, row["SLO"], file=file, line=line)
        rows.append((line, job_type, float(steps), gpus, weight, deadline, arrival))
    if not layout:
        raise DlschedError(f"{file}: empty workload file")
    width = len(str(max(len(rows) - 1, 0)))
    return [(line, JobSpec(job_id=f"gavel-{i:0{width}d}", submit_time_s=arrival, kind="dl", tasks=_tasks(gpus),
                           priority=weight, deadline_s=deadline, model=job_type, comm="allreduce",
                           iterations=steps, duration_s=None))
            for i, (line, job_type, steps, gpus, weight, deadline, arrival) in enumerate(rows)]


def _reference_speed(steps_per_s: StepsPerS | None, job_type: str, gpus: int, slo_text: str, *,
                     file: str, line: int) -> float:
    """The V100 steps/s an SLO is measured against, or the error saying why there is none."""
    if steps_per_s is None:
        raise InputError(
            f"SLO {slo_text.strip()!r} is a multiple of the job's run time alone on a V100, which the trace "
            f"does not record; no throughput table was given to compute it (use -1 for no SLO)",
            file=file, line=line, field="SLO")
    speed = steps_per_s(job_type, gpus)
    if speed is None or not speed > 0:
        raise InputError(f"no V100 throughput for ({job_type!r}, {gpus}) in the table, so its SLO has no "
                         f"deadline", file=file, line=line, field="job_type")
    return float(speed)


__all__ = ["LAYOUTS", "SUFFIXES", "is_gavel_trace", "read_gavel_trace"]
