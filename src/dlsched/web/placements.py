"""Where each job ran and when: placement intervals from the scheduler's typed event log.

Both backends write the same log (dlsched.scheduler.eventlog): the runtime keeps it in its store
(table `schedlog`), a simulation writes it to `log.parquet`. Read in order, a launch or resume
adds task placements (a non-gang policy places a job in parts), a migrate or resize replaces the
job's placements, a suspend, stop, hold or finish ends them all, and a task_finish ends one task
of a bag. Each task placement becomes one interval

    {"job_id", "task", "node" (name), "gpus" (GPU ids on that node), "start", "end"}

with `end` None while it lasts. The GPU timeline (Gantt chart), the cluster at a time t and a
job's placement history are all read from these intervals, so the web view shows the same thing
for a live server and for a simulated run.
"""
from __future__ import annotations

import json
from typing import Iterable

PLACE = frozenset(("launch", "resume", "migrate", "resize"))
REPLACE = frozenset(("migrate", "resize"))
END = frozenset(("suspend", "stopped", "held", "finish"))
KINDS = tuple(sorted(PLACE | END | {"task_finish"}))    # the only kinds that move placements
MAX_INTERVALS = 100_000                                  # the most one answer carries


def intervals(rows: Iterable[dict], node_names: list[str], offset: float = 0.0) -> list[dict]:
    """Task placement intervals of a typed log (rows oldest first, each with time_s, kind, job_id,
    detail and placements: [[task, node index, [GPU ids]], ...] or that list as JSON text).
    `offset` is added to every time (the runtime's epoch, for wall-clock times)."""
    out: list[dict] = []
    held: dict[str, dict[int, dict]] = {}        # job -> task -> its open interval

    def end(job: str, tasks, t: float) -> None:
        mine = held.get(job, {})
        for task in list(tasks):
            iv = mine.pop(task, None)
            if iv is not None:
                iv["end"] = t

    for r in rows:
        kind, job, t = r["kind"], r["job_id"], float(r["time_s"]) + offset
        if kind in PLACE:
            mine = held.setdefault(job, {})
            pls = r["placements"]
            pls = json.loads(pls) if isinstance(pls, str) else pls
            end(job, list(mine) if kind in REPLACE else [int(p[0]) for p in pls], t)
            for task, node, gpus in pls:
                iv = {"job_id": job, "task": int(task), "node": _name(node_names, int(node)),
                      "gpus": [int(g) for g in gpus], "start": t, "end": None}
                mine[int(task)] = iv
                out.append(iv)
        elif kind in END:
            end(job, list(held.get(job, {})), t)
        elif kind == "task_finish" and str(r.get("detail", "")).isdigit():
            end(job, [int(r["detail"])], t)
    return out


def _name(names: list[str], i: int) -> str:
    return names[i] if 0 <= i < len(names) else f"node {i}"


def select(ivs: list[dict], since: float | None = None, until: float | None = None,
           job_id: str | None = None, limit: int = MAX_INTERVALS) -> tuple[list[dict], bool]:
    """The intervals that overlap [since, until] (of one job, if given); at most `limit`, the
    latest started. Returns (intervals, whether some were left out)."""
    keep = [iv for iv in ivs
            if (job_id is None or iv["job_id"] == job_id)
            and (since is None or iv["end"] is None or iv["end"] >= since)
            and (until is None or iv["start"] <= until)]
    limit = max(1, min(int(limit), MAX_INTERVALS))
    if len(keep) <= limit:
        return keep, False
    return sorted(keep, key=lambda iv: iv["start"])[-limit:], True


def at(ivs: list[dict], t: float) -> list[dict]:
    """The intervals that hold their GPUs at time t."""
    return [iv for iv in ivs if iv["start"] <= t and (iv["end"] is None or t < iv["end"])]


def allocations(ivs: list[dict]) -> dict[str, list[dict]]:
    """{job: [{rank, node, gpu_ids}]} of intervals, as GET /jobs/{id} names a job's allocation."""
    out: dict[str, list[dict]] = {}
    for iv in ivs:
        out.setdefault(iv["job_id"], []).append({"rank": iv["task"], "node": iv["node"], "gpu_ids": iv["gpus"]})
    for ranks in out.values():
        ranks.sort(key=lambda r: r["rank"])
    return out


def gpu_load(ivs: list[dict], nodes: list[tuple[str, int]]) -> dict[str, list[int]]:
    """Tasks on each GPU of each (name, GPUs) node, from the intervals that hold them."""
    load = {name: [0] * gpus for name, gpus in nodes}
    for iv in ivs:
        row = load.get(iv["node"])
        for g in iv["gpus"]:
            if row is not None and 0 <= g < len(row):
                row[g] += 1
    return load
