"""The common workload schema: one row per job, the same columns in CSV, Parquet and JSON lines.

| column              | type   | required | meaning |
| ---                 | ---    | ---      | --- |
| job_id              | str    | yes      | unique id |
| submit_time_s       | float  | yes      | arrival time, seconds from the start of the run |
| kind                | str    | no (dl)  | `dl`: synchronous gang of workers (+ PS); `tasks`: independent tasks |
| workers             | int    | no (1)   | workers of a DL job, or number of tasks of a `tasks` job |
| ps                  | int    | no (0)   | parameter servers (DL jobs with comm = ps) |
| gpus_per_worker     | float  | no (1 for dl, 0 for tasks) | GPUs per worker / task |
| cpus_per_worker     | float  | no (1)   | CPU cores per worker / task |
| mem_gb_per_worker   | float  | no (4)   | host memory per worker / task, GB |
| disk_mbps_per_worker| float  | no (0)   | disk bandwidth per worker / task, MB/s |
| net_gbps_per_worker | float  | no (0)   | NIC bandwidth reserved per worker / task, Gbps |
| ps_cpus             | float  | no (2)   | CPU cores per parameter server (PS use no GPU) |
| ps_mem_gb           | float  | no (8)   | memory per parameter server, GB |
| model               | str    | no       | a model zoo name (dlsched.workload.models.ZOO) |
| comm                | str    | no (allreduce) | `allreduce`, `ps` or `none` |
| batch_size          | int    | no       | global batch size |
| iterations          | float  | no       | training iterations (needs a known model) |
| duration_s          | float  | no       | run time at the ideal placement (dl) or per task (tasks) |
| deadline_s          | float  | no       | absolute deadline, seconds from the start |
| priority            | int    | no (0)   | larger runs first where a policy uses it |
| user                | str    | no (default) | owner, for fairness policies |
| queue               | str    | no       | the leaf of the queue tree it runs in (a trace's virtual cluster) |
| gpu_type            | str    | no       | required GPU type |
| gpu_types           | str    | no       | the GPU types the job may run on, `|`-separated (`V100M16|V100M32`); gpu_type wins |
| data_gb             | float  | no       | training data a DL job loads in its launch phase, GB (with the model: over its NICs) |
| launch_s            | float  | no       | launch phase (data and model transfer), seconds; wins over data_gb |
| save_s              | float  | no (0)   | saving phase after the last iteration, seconds |
| recorded_start_s    | float  | no       | when the trace says the job started (same clock as submit_time_s; may be < 0) |
| recorded_end_s      | float  | no       | when the trace says the job ended (same clock; may be < 0) |
| extra               | str    | no       | a JSON object of the trace's columns no other column holds |

A DL job needs `iterations` with a known `model`, or `duration_s`. A `tasks` job needs `duration_s`.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from dlsched.core.errors import InputError
from dlsched.core.types import JobSpec, Role, TaskSpec

# column -> (kind, default); kind: str, float, int
COLUMNS: dict[str, tuple[str, Any]] = {
    "job_id": ("str", None),
    "submit_time_s": ("float", None),
    "kind": ("str", "dl"),
    "workers": ("int", 1),
    "ps": ("int", 0),
    "gpus_per_worker": ("float", None),
    "cpus_per_worker": ("float", 1.0),
    "mem_gb_per_worker": ("float", 4.0),
    "disk_mbps_per_worker": ("float", 0.0),
    "net_gbps_per_worker": ("float", 0.0),
    "ps_cpus": ("float", 2.0),
    "ps_mem_gb": ("float", 8.0),
    "model": ("str", None),
    "comm": ("str", "allreduce"),
    "batch_size": ("int", None),
    "iterations": ("float", None),
    "duration_s": ("float", None),
    "deadline_s": ("float", None),
    "priority": ("int", 0),
    "user": ("str", "default"),
    "queue": ("str", None),
    "gpu_type": ("str", None),
    "gpu_types": ("str", None),
    "data_gb": ("float", None),
    "launch_s": ("float", None),
    "save_s": ("float", 0.0),
    "recorded_start_s": ("float", None),
    "recorded_end_s": ("float", None),
    "extra": ("str", None),
}
#: numbers that may be negative (a trace's record of a start before the first submission)
SIGNED = ("recorded_start_s", "recorded_end_s")
REQUIRED = ("job_id", "submit_time_s")
KINDS = ("dl", "tasks")
COMMS = ("allreduce", "ps", "none")


def _missing(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    return isinstance(v, str) and v.strip() == ""


def parse_number(value: Any, *, file, line, field: str, integer: bool = False, minimum: float = 0.0):
    """A finite number >= minimum (an int when `integer`), or an InputError naming file, line, field."""
    if _missing(value):
        raise InputError("is required", file=file, line=line, field=field)
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"expected a number, got {value!r}", file=file, line=line, field=field) from None
    if not math.isfinite(x):
        raise InputError(f"expected a finite number, got {value!r}", file=file, line=line, field=field)
    if integer and x != int(x):
        raise InputError(f"expected an integer, got {value!r}", file=file, line=line, field=field)
    if x < minimum:
        raise InputError(f"must be >= {minimum:g}, got {value!r}", file=file, line=line, field=field)
    return int(x) if integer else x


_NO_WORK = "a dl job needs iterations (with a known model) or duration_s"


def _column(row: dict[str, Any], col: str, file, line) -> Any:
    """Column `col` of a schema row, checked and converted (its default when missing)."""
    raw = row.get(col)
    kind, default = COLUMNS[col]
    if _missing(raw):
        if col in REQUIRED:
            raise InputError("is required", file=file, line=line, field=col)
        return default
    return _convert(kind, raw, file, line, col)


def _convert(kind: str, v: Any, file, line, col) -> Any:
    if kind == "str":
        return str(v).strip()
    return parse_number(v, file=file, line=line, field=col, integer=kind == "int",
                        minimum=-math.inf if col in SIGNED else 0.0)


_TASK_LISTS: dict[tuple, tuple] = {}


def _shared_tasks(tasks: tuple) -> tuple:
    """One tuple for every job with equal task lists (TaskSpecs are immutable): a generated
    workload of 1M jobs repeats a few dozen shapes, and a tuple of TaskSpecs each costs about
    400 bytes a job. (The Philly reader shares its lists the same way.)"""
    got = _TASK_LISTS.get(tasks)
    if got is None:
        if len(_TASK_LISTS) >= 65536:
            _TASK_LISTS.clear()
        got = _TASK_LISTS[tasks] = tasks
    return got


def job_from_row(row: dict[str, Any], *, file: str | None = None, line: int | None = None) -> JobSpec:
    """Validate one schema row and build its JobSpec. Errors name file, line and field."""
    unknown = [k for k in row if k not in COLUMNS]
    if unknown:
        raise InputError(f"unknown column (schema: {', '.join(COLUMNS)})", file=file, line=line, field=unknown[0])
    v = {col: _column(row, col, file, line) for col in COLUMNS}
    if v["kind"] not in KINDS:
        raise InputError(f"must be one of {', '.join(KINDS)}, got {v['kind']!r}", file=file, line=line, field="kind")
    if v["comm"] not in COMMS:
        raise InputError(f"must be one of {', '.join(COMMS)}, got {v['comm']!r}", file=file, line=line, field="comm")
    if v["extra"] is not None:
        try:
            ok = isinstance(json.loads(v["extra"]), dict)
        except ValueError:
            ok = False
        if not ok:
            raise InputError("expected a JSON object ({...})", file=file, line=line, field="extra")
    if v["workers"] < 1:
        raise InputError("must be >= 1", file=file, line=line, field="workers")
    is_dl = v["kind"] == "dl"
    gpw = v["gpus_per_worker"] if v["gpus_per_worker"] is not None else (1.0 if is_dl else 0.0)
    # (iterations of a model the zoo lacks are allowed: a throughput table may name it; a run
    # refuses them when neither knows the model, dlsched.api.check_work)
    if is_dl:
        if v["iterations"] is None and v["duration_s"] is None:
            raise InputError(_NO_WORK, file=file, line=line, field="duration_s")
        if v["iterations"] is not None and v["model"] is None:
            raise InputError("iterations need a model", file=file, line=line, field="model")
        if v["ps"] > 0 and v["comm"] != "ps":
            v["comm"] = "ps"
    else:
        if v["duration_s"] is None:
            raise InputError("a tasks job needs duration_s (per task)", file=file, line=line, field="duration_s")
        if v["ps"]:
            raise InputError("a tasks job has no parameter servers", file=file, line=line, field="ps")
        phased = [c for c in ("data_gb", "launch_s") if v[c] is not None] + (["save_s"] if v["save_s"] else [])
        if phased:
            raise InputError("launch and saving phases are for dl jobs", file=file, line=line, field=phased[0])
    demand = (gpw, v["cpus_per_worker"], v["mem_gb_per_worker"], v["disk_mbps_per_worker"], v["net_gbps_per_worker"])
    tasks: list[TaskSpec] = []
    role = Role.WORKER if is_dl else Role.TASK
    for i in range(v["workers"]):
        tasks.append(TaskSpec(i, role, demand, None if is_dl else v["duration_s"]))
    ps_demand = (0.0, v["ps_cpus"], v["ps_mem_gb"], 0.0, 0.0)
    for j in range(v["ps"]):
        tasks.append(TaskSpec(v["workers"] + j, Role.PS, ps_demand, None))
    model = v["model"].lower() if v["model"] else None
    allowed = tuple(t.strip() for t in v["gpu_types"].split("|") if t.strip()) if v["gpu_types"] else None
    return JobSpec(
        job_id=v["job_id"], submit_time_s=v["submit_time_s"], kind=v["kind"], tasks=_shared_tasks(tuple(tasks)),
        user=v["user"], priority=v["priority"], deadline_s=v["deadline_s"], model=model,
        comm=v["comm"] if is_dl else "none", batch_size=v["batch_size"], iterations=v["iterations"],
        duration_s=v["duration_s"], gpu_type=v["gpu_type"], gpu_types=allowed or None, data_gb=v["data_gb"], launch_s=v["launch_s"],
        save_s=v["save_s"], queue=v["queue"], recorded_start_s=v["recorded_start_s"],
        recorded_end_s=v["recorded_end_s"], extra=v["extra"])


#: what job_like takes from a row: each column is one JobSpec field, and for a dl job nothing else
#: (no other field, no other check) depends on it
LIKE_COLUMNS = ("job_id", "submit_time_s", "duration_s", "user")


def job_like(base: JobSpec, row: dict[str, Any], *, file: str | None = None,
             line: int | None = None) -> JobSpec:
    """job_from_row(row) for a row that differs from the one the dl job `base` was built from
    only in LIKE_COLUMNS: those are checked and converted as job_from_row does, the rest is
    base's. A generator's rows come in a few shapes (model x size): building each shape once
    and the rest like it generates the same jobs in 0.95 s per 100,000 instead of 1.64 s."""
    if base.kind != "dl":
        raise ValueError("job_like builds dl jobs only (a tasks job's duration is its tasks')")
    v = {col: _column(row, col, file, line) for col in LIKE_COLUMNS}
    if base.iterations is None and v["duration_s"] is None:
        raise InputError(_NO_WORK, file=file, line=line, field="duration_s")
    return dataclasses.replace(base, **v)


def job_to_row(job: JobSpec) -> dict[str, Any]:
    """The schema row of a JobSpec (inverse of job_from_row)."""
    first = job.tasks[0]
    ps = [t for t in job.tasks if t.role is Role.PS]
    return {
        "job_id": job.job_id, "submit_time_s": job.submit_time_s, "kind": job.kind,
        "workers": len(job.tasks) - len(ps), "ps": len(ps),
        "gpus_per_worker": first.demand[0], "cpus_per_worker": first.demand[1],
        "mem_gb_per_worker": first.demand[2], "disk_mbps_per_worker": first.demand[3],
        "net_gbps_per_worker": first.demand[4],
        "ps_cpus": ps[0].demand[1] if ps else 2.0, "ps_mem_gb": ps[0].demand[2] if ps else 8.0,
        "model": job.model, "comm": job.comm, "batch_size": job.batch_size, "iterations": job.iterations,
        "duration_s": job.duration_s, "deadline_s": job.deadline_s, "priority": job.priority,
        "user": job.user, "gpu_type": job.gpu_type,
        "gpu_types": "|".join(job.gpu_types) if job.gpu_types else None, "data_gb": job.data_gb, "launch_s": job.launch_s,
        "save_s": job.save_s, "queue": job.queue, "recorded_start_s": job.recorded_start_s,
        "recorded_end_s": job.recorded_end_s, "extra": job.extra,
    }
