"""The scheduler's typed event log: one record per thing that happened to a job or a node, the
same on both backends (the Scheduler writes it, whichever backend it drives).

    time_s      the backend's clock (simulated seconds; on the runtime, seconds since the store's
                epoch)
    kind        one of KINDS
    job_id      "" for node events
    detail      free text: a reason (stopped, held, rejected), "task@node;..." for placements,
                the node id for node events
    placements  TaskPlacements of a launch, resume, migrate or resize (empty otherwise)
    cost        the decision's switch cost (dlsched.workload.packing.SwitchCost), None when the
                backend's own cost applies
    packed      the job shares its GPUs with the job(s) already on them (GPU sharing)
    spec        the JobSpec (arrival records)
    stats       the backend's job_stats (STATS_KEYS) for the job (stats records); for round
                records, (wall seconds the round took, jobs waiting in it)

Records compare and unpack as tuples, so `for t, kind, job_id, *_ in log` reads the first four.
dlsched.metrics.result computes every metric of a run from this log, so both backends get the
same summary and tables. Utilisation is the one input beside it: allocated GPUs follow from the
log's placements (the runtime derives its samples from them), but the simulator's effective and
partly held GPUs come from its speed model, so its backend hands those samples over directly.
A `sink` given to the Scheduler sees each record as it is written (the runtime keeps them in its
store, so the log outlives a server restart).
"""
from __future__ import annotations

from typing import Any, NamedTuple

KINDS = {
    "arrival": "the job was submitted (arrived)",
    "rejected": "it can never run on this cluster (detail: why)",
    "launch": "tasks started for the first time",
    "resume": "restarted from its checkpoint after a suspend or a stop",
    "migrate": "moved to other placements",
    "resize": "restarted with another task list",
    "suspend": "suspended by the policy",
    "stopped": "stopped by the backend (a failure, a node lost): queued again (detail: why)",
    "held": "held (an operator, or a policy error: detail says)",
    "released": "released from hold",
    "finish": "finished (or cancelled, or failed for good, on the runtime)",
    "task_finish": "one task of a bag of tasks ended (detail: its index)",
    "stats": "the job's counters as the backend measured them (appended when a run's result is built)",
    "round": "a scheduling round whose plan was carried out (stats: (wall seconds, queued jobs); "
             "a store keeps them as the detail text \"<wall> <queued>\")",
    "NodeDown": "a node went down (detail: node id)",
    "NodeUp": "a node came (back) up (detail: node id)",
}


class LogRecord(NamedTuple):
    time_s: float
    kind: str
    job_id: str
    detail: str = ""
    placements: tuple = ()
    cost: Any = None
    packed: bool = False
    spec: Any = None
    stats: Any = None
