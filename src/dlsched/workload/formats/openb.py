"""Alibaba OpenB pod lists (Weng et al., "Beware of Fragmentation", ATC'23; alibaba/clusterdata
`cluster-trace-gpu-v2023/csv/openb_pod_list_*.csv`).

Header (the trace's README): `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,
pod_phase,creation_time,deletion_time,scheduled_time`. Times are seconds from the start of the
trace; `gpu_milli` is the share of one GPU a GPU-sharing pod asks for (in thousandths, with
`num_gpu` 1); `gpu_spec` the GPU types the pod may run on, `|`-separated (`V100M16|V100M32`),
empty for any. One row per Kubernetes pod; a pod runs on one node.

| column                 | dlsched                                                           |
| ---                    | ---                                                               |
| name                   | job_id (as written: `openb-pod-0017`)                             |
| num_gpu, gpu_milli     | one worker with num_gpu GPUs; with num_gpu 1, gpu_milli / 1000 of a GPU (a fraction) |
| cpu_milli, memory_mib  | cores (cpu_milli / 1000) and GB (memory_mib / 1024) of the worker |
| gpu_spec               | one type: gpu_type; several: gpu_types (the allowed set)          |
| creation_time          | submit_time_s (seconds from the earliest creation)                |
| scheduled_time, deletion_time | recorded_start_s, recorded_end_s (same clock)              |
| deletion_time - scheduled_time | duration_s (the time it held its node)                    |
| qos, pod_phase, others | extra (OpenB has no users or tenants: user `default`, no queue)   |

Dropped (counted): CPU pods (num_gpu 0) and pods never scheduled (no scheduled_time: Pending).
Running pods are kept with the time they had when the trace ended (their deletion_time is the
trace's end), Failed ones with the time they ran. Bad rows: a time that is not a number >= 0, a
deletion before the scheduling, a num_gpu that is not a whole number >= 0, a gpu_milli outside
0..1000 (or 0 for a GPU pod).
"""
from __future__ import annotations

import numpy as np

from dlsched.workload.formats import common as c

NAME = "openb"
COLUMNS = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time")
MAPPED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "creation_time", "deletion_time",
          "scheduled_time")


def _allowed(frame) -> tuple[list, list]:
    """(gpu_type, gpu_types) per row from gpu_spec: one type, or the tuple of several."""
    n = len(frame)
    if "gpu_spec" not in frame.columns:
        return [None] * n, [None] * n
    empty = c.blank(frame, "gpu_spec")
    parts = frame["gpu_spec"].astype(str).str.strip().str.split("|").tolist()
    one: list = [None] * n
    many: list = [None] * n
    for i in np.flatnonzero(~empty).tolist():
        types = tuple(t.strip() for t in parts[i] if t.strip())
        if len(types) == 1:
            one[i] = types[0]
        elif types:
            many[i] = types
    return one, many


def read(frame, lines: np.ndarray, *, file=None) -> c.Trace:
    c.require(frame, COLUMNS, file)
    num = {k: c.numbers(frame, k) for k in ("num_gpu", "gpu_milli", "creation_time", "deletion_time")}
    sched = c.numbers(frame, "scheduled_time") if "scheduled_time" in frame.columns else np.full(len(frame), np.nan)
    s_empty = c.blank(frame, "scheduled_time") if "scheduled_time" in frame.columns else np.ones(len(frame), bool)
    with np.errstate(invalid="ignore"):
        milli_bad = (num["gpu_milli"] > 1000) | ((num["num_gpu"] >= 1) & (num["gpu_milli"] <= 0))
        before = np.isfinite(sched) & (num["deletion_time"] < sched)
    checks = [
        ("num_gpu", c.bad_number(num["num_gpu"], c.blank(frame, "num_gpu"), integer=True),
         "expected a whole number of GPUs >= 0"),
        ("gpu_milli", c.bad_number(num["gpu_milli"], c.blank(frame, "gpu_milli")) | milli_bad,
         "expected thousandths of a GPU, 0..1000 (above 0 for a GPU pod)"),
        ("creation_time", c.bad_number(num["creation_time"], c.blank(frame, "creation_time")), "expected seconds >= 0"),
        ("deletion_time", c.bad_number(num["deletion_time"], c.blank(frame, "deletion_time")) | before,
         "expected seconds >= 0, not before scheduled_time"),
    ]
    if "scheduled_time" in frame.columns:
        checks.append(("scheduled_time", c.bad_number(sched, s_empty, optional=True), "expected seconds >= 0 or nothing"))
    for col in ("cpu_milli", "memory_mib"):
        if col in frame.columns:
            checks.append((col, c.bad_number(c.numbers(frame, col), c.blank(frame, col), optional=True),
                           "expected a number >= 0 or nothing"))
    c.first_bad(checks, frame, lines, file)

    dropped: dict[str, int] = {}
    cpu = num["num_gpu"] == 0
    never = ~cpu & ~np.isfinite(sched)
    c.count(dropped, "CPU pod (num_gpu 0)", cpu)
    c.count(dropped, "never scheduled (no scheduled_time: Pending)", never)
    keep = ~(cpu | never)
    f, ln = frame[keep], lines[keep]
    k = int(np.count_nonzero(keep))
    gpus = np.where(num["num_gpu"][keep] == 1, num["gpu_milli"][keep] / 1000.0, num["num_gpu"][keep])
    host = {}
    for col, scale, default in (("cpu_milli", 1000.0, c.CPUS_PER_WORKER), ("memory_mib", 1024.0, c.MEM_GB_PER_WORKER)):
        v = c.numbers(f, col) / scale if col in f.columns else np.full(k, np.nan)
        host[col] = np.where(np.isfinite(v), v, default)
    one, many = _allowed(f)
    start, end = sched[keep], num["deletion_time"][keep]
    pairs = c.build_jobs(origin=c.origin(num["creation_time"]),
        job_ids=f["name"].astype(str).str.strip().tolist(), submit=num["creation_time"][keep],
        duration=end - start, workers=np.ones(k), gpus_per_worker=gpus, lines=ln, gpu_types=one,
        allowed_types=many, start=start, end=end, cpus_per_worker=host["cpu_milli"],
        mem_gb_per_worker=host["memory_mib"], extra=c.extra_json(f, [col for col in f.columns if col not in MAPPED]))
    return c.Trace(NAME, pairs, dropped)
