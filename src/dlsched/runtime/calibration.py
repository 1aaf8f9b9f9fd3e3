"""The calibration file the runtime produces: what its jobs' steps and switches really cost, for
the simulator to run the same models at the same speeds (dlsched.workload.calibrated).

`calibration_from_store(store, epoch)` reads a runtime's store (dlsched.runtime.store: the jobs'
step records, their run events and the scheduler's event log) and returns the calibration as a
dict; `write_calibration(path, cal)` writes it as JSON; `merge_calibrations(cals)` pools the
measurements of several runs (several stores: one per policy in runtime-fidelity).

Schema (`"schema": "dlsched-calibration"`, `"version": 1`; times in seconds):

    {"schema": "dlsched-calibration", "version": 1,
     "created": "2025-01-01T00:00:00Z",          # UTC, when the file was made
     "source": {"stores": 1, "policies": ["fifo"], "jobs": 16, "runs": 18},
     "cluster": {"name": "ray", "nodes": [NodeSpec fields...], "racks": [...], "domains": ["d0"]},
                                                  # the runtime's cluster as its scheduler saw it
                                                  # (only when the nodes were given; else null)
     "models": {MODEL: {GPU_TYPE: {WORKERS: {
         "iter_s":   0.2013,   # wall seconds per step while the run trains: the time between
                               # consecutive step records of one run (step, the gang's stop-flag
                               # all-reduce, periodic checkpoints: all a step costs)
         "step_s":   0.2001,   # median step time the SDK measured (the step's own body)
         "steps":    412,      # step records
         "intervals": 400, "wall_s": 80.5}}}},    # the sums iter_s is made of (for merging)
     "switch": {
         "start":   {"n": 16, "mean_s": 1.1, "median_s": 1.0, "p90_s": 1.6, "samples_s": [...],
                     "by_workers": {"1": {...same keys...}, ...}},
                     # first start of a job: from the decision that made it whole (the log's
                     # launch / resume / migrate / resize record) to the beginning of its first
                     # step (first record's time - its step_s): placement group, rank start,
                     # rendezvous, restore, and the earlier starts of the same plan
         "restart": {..., "by_kind": {"resume": {...}, "resize": {...}, "migrate": {...}}},
                     # every later run, measured the same way (includes stopping the job's own
                     # previous run for a migrate or a resize)
         "stop":    {...},   # the `stop_s` events: asking a running gang to stop until its
                             # checkpoint is written and its GPUs are free
         "finish":  {...}},  # a job's last step's end to its finish in the log (final
                             # checkpoint, the ranks' exit, the scheduler seeing it)
     "simulator": {"start_delay_s": 1.3, "restart_delay_s": 1.5}}
                             # what dlsched.workload.calibrated gives the simulator: a job's
                             # one-off costs (start + finish: both hold its GPUs without
                             # progress, once per job) and the mean restart (start's mean when
                             # no restart was measured)

MODEL is the spec's `model` (its `name` when it has none); GPU_TYPE the GPU types of the run's
ranks joined by "+" ("*" when the nodes were not given); WORKERS the run's worker ranks.
"""
from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

SCHEMA = "dlsched-calibration"
VERSION = 1
_TAKE = ("launch", "resume", "migrate", "resize")
_RUN_END = ("stopped", "finished", "gang_broken", "requeued", "start_failed", "cancelled")


def _summary(samples: list[float], *, keep: bool = True) -> dict:
    s = sorted(float(x) for x in samples)
    out = {"n": len(s), "mean_s": statistics.fmean(s) if s else None,
           "median_s": statistics.median(s) if s else None,
           "p90_s": s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))] if s else None}
    if keep:
        out["samples_s"] = [round(x, 4) for x in samples]
    return out


def _cluster_dict(nodes: list[dict]) -> dict:
    """The cluster the runtime's scheduler builds from these nodes (dlsched.runtime.nodes.cluster_of),
    as plain fields."""
    from dataclasses import asdict

    from dlsched.runtime.nodes import NodeInfo, cluster_of
    infos = [NodeInfo(str(n["name"]), str(n.get("ray_id", "")), str(n.get("rack", "r0")),
                      str(n.get("gpu_type", "gpu")), int(n.get("gpus", 0)), float(n.get("cpus", 0)),
                      float(n.get("mem_gb", 0.0))) for n in sorted(nodes, key=lambda n: str(n["name"]))]
    c = cluster_of(infos)
    return {"name": c.name, "nodes": [asdict(n) for n in c.nodes],
            "racks": [{"name": r, "domain": d, "uplink_gbps": u}
                      for r, d, u in zip(c.rack_names, c.rack_domain, c.rack_uplink_gbps)],
            "domains": list(c.domain_names)}


def _runs(events: list[dict]) -> list[dict]:
    """The job's runs from its events, oldest first: start time, end time (None: still going),
    the ranks' nodes ("0@n0, 1@n1" of the `started` event)."""
    runs: list[dict] = []
    for e in events:
        kind = e["kind"]
        if kind == "started":
            ranks = {}
            for part in (e["detail"] or "").split(" on ", 1)[-1].split(","):
                if "@" in part:
                    r, n = part.strip().split("@", 1)
                    ranks[int(r)] = n
            runs.append({"start": e["time"], "end": None, "ranks": ranks})
        elif kind in _RUN_END and runs and runs[-1]["end"] is None:
            runs[-1]["end"] = e["time"]
    return runs


def calibration_from_store(store, epoch: float | None = None, *, nodes: list[dict] | None = None,
                           policy: str | None = None) -> dict:
    """The calibration (module docstring) measured in one runtime store. `epoch`: the store's
    clock origin (RayBackend.epoch; read from the store when None); `nodes`: the runtime's nodes
    (GET /nodes: name, rack, gpu_type, gpus, cpus), which give the GPU types and the cluster."""
    if epoch is None:
        epoch = float(store.meta("epoch"))
    gtype = {str(n["name"]): str(n.get("gpu_type", "*")) for n in (nodes or [])}
    log = store.schedlog_all()
    takes: dict[str, list[tuple[float, str]]] = {}
    finishes: dict[str, float] = {}
    for r in log:
        if r["kind"] in _TAKE:
            takes.setdefault(r["job_id"], []).append((epoch + r["time_s"], r["kind"]))
        elif r["kind"] == "finish":
            finishes[r["job_id"]] = epoch + r["time_s"]
    table: dict = {}
    start, restart, stop, finish = [], [], [], []
    by_workers: dict[str, list[float]] = {}
    by_kind: dict[str, list[float]] = {}
    n_runs = 0
    jobs = store.jobs()
    for j in jobs:
        jid, spec = j["job_id"], j["spec"]
        model = str(spec.get("model") or spec.get("name"))
        ps = int(spec.get("ps") or 0)
        recs = sorted(store.stats(jid), key=lambda r: r["time"] or 0.0)
        events = store.events(jid, limit=1_000_000)
        stop += [float(e["detail"]) for e in events if e["kind"] == "stop_s" and _num(e["detail"])]
        prev_end, started = float("-inf"), False
        for run in _runs(events):
            end = run["end"] if run["end"] is not None else float("inf")
            mine = [r for r in recs if r["time"] is not None and prev_end < r["time"] <= end]
            prev_end = end
            if not mine:
                continue
            n_runs += 1
            workers = max(len(run["ranks"]) - ps, 1)
            types = sorted({gtype.get(n, "*") for n in run["ranks"].values()}) or ["*"]
            cell = table.setdefault(model, {}).setdefault("+".join(types), {}).setdefault(
                str(workers), {"steps": 0, "intervals": 0, "wall_s": 0.0, "_step_s": []})
            by_step = {r["step"]: r for r in mine}
            cell["steps"] += len(mine)
            cell["_step_s"] += [r["step_s"] for r in mine if r["step_s"] is not None]
            for s, r in by_step.items():
                nxt = by_step.get(s + 1)
                if nxt is not None and nxt["time"] > r["time"]:
                    cell["intervals"] += 1
                    cell["wall_s"] += nxt["time"] - r["time"]
            # the decision this run carried out: the job's last placement decision before it
            dec = [t for t in takes.get(jid, []) if t[0] <= run["start"]]
            if dec:
                first = mine[0]
                hold = first["time"] - (first["step_s"] or 0.0) - dec[-1][0]
                if not started:
                    start.append(hold)
                    by_workers.setdefault(str(workers), []).append(hold)
                else:
                    restart.append(hold)
                    by_kind.setdefault(dec[-1][1], []).append(hold)
            started = True
        if j["state"] == "done" and jid in finishes and recs:
            finish.append(finishes[jid] - recs[-1]["time"])
    models: dict = {}
    for model, per_type in table.items():
        for gt, per_w in per_type.items():
            for w, c in per_w.items():
                steps = c.pop("_step_s")
                c["step_s"] = statistics.median(steps) if steps else None
                c["iter_s"] = c["wall_s"] / c["intervals"] if c["intervals"] else c["step_s"]
                models.setdefault(model, {}).setdefault(gt, {})[w] = c
    switch = {"start": {**_summary(start), "by_workers": {w: _summary(v) for w, v in sorted(by_workers.items())}},
              "restart": {**_summary(restart), "by_kind": {k: _summary(v) for k, v in sorted(by_kind.items())}},
              "stop": _summary(stop), "finish": _summary(finish)}
    return {"schema": SCHEMA, "version": VERSION, "created": _utc(),
            "source": {"stores": 1, "policies": [policy] if policy else [], "jobs": len(jobs), "runs": n_runs},
            "cluster": _cluster_dict(nodes) if nodes else None,
            "models": models, "switch": switch, "simulator": _simulator(switch)}


def merge_calibrations(cals: list[dict]) -> dict:
    """One calibration pooling the measurements of several (same schema version): step records
    and wall time summed per (model, GPU type, workers), switch samples put together; the
    cluster of the first that has one."""
    if not cals:
        raise ValueError("nothing to merge")
    for c in cals:
        if c.get("schema") != SCHEMA or c.get("version") != VERSION:
            raise ValueError(f"not a {SCHEMA} version {VERSION} file")
    models: dict = {}
    for c in cals:
        for model, per_type in c["models"].items():
            for gt, per_w in per_type.items():
                for w, cell in per_w.items():
                    m = models.setdefault(model, {}).setdefault(gt, {}).setdefault(
                        w, {"steps": 0, "intervals": 0, "wall_s": 0.0, "_step_s": []})
                    m["steps"] += cell["steps"]
                    m["intervals"] += cell["intervals"]
                    m["wall_s"] += cell["wall_s"]
                    if cell.get("step_s") is not None:
                        m["_step_s"].append((cell["step_s"], cell["steps"]))
    for per_type in models.values():
        for per_w in per_type.values():
            for m in per_w.values():
                pairs = m.pop("_step_s")
                n = sum(k for _, k in pairs)
                m["step_s"] = sum(s * k for s, k in pairs) / n if n else None   # step-weighted
                m["iter_s"] = m["wall_s"] / m["intervals"] if m["intervals"] else m["step_s"]

    def pool(key: str, sub: str | None = None) -> dict:
        out: dict[str, list[float]] = {}
        for c in cals:
            part = c["switch"][key]
            if sub is None:
                out.setdefault("", []).extend(part.get("samples_s", []))
            else:
                for k, v in part.get(sub, {}).items():
                    out.setdefault(k, []).extend(v.get("samples_s", []))
        return out

    switch = {"start": {**_summary(pool("start").get("", [])),
                        "by_workers": {k: _summary(v) for k, v in sorted(pool("start", "by_workers").items())}},
              "restart": {**_summary(pool("restart").get("", [])),
                          "by_kind": {k: _summary(v) for k, v in sorted(pool("restart", "by_kind").items())}},
              "stop": _summary(pool("stop").get("", [])), "finish": _summary(pool("finish").get("", []))}
    return {"schema": SCHEMA, "version": VERSION, "created": _utc(),
            "source": {"stores": sum(c["source"].get("stores", 1) for c in cals),
                       "policies": [p for c in cals for p in c["source"].get("policies", [])],
                       "jobs": sum(c["source"].get("jobs", 0) for c in cals),
                       "runs": sum(c["source"].get("runs", 0) for c in cals)},
            "cluster": next((c["cluster"] for c in cals if c.get("cluster")), None),
            "models": models, "switch": switch, "simulator": _simulator(switch)}


def _simulator(switch: dict) -> dict:
    start = switch["start"]["mean_s"] or 0.0
    fin = switch["finish"]["mean_s"] or 0.0
    restart = switch["restart"]["mean_s"]
    return {"start_delay_s": max(start + fin, 0.0),
            "restart_delay_s": max(restart if restart is not None else start, 0.0)}


def write_calibration(path: str | Path, cal: dict) -> Path:
    """Write the calibration as JSON (atomically: a temp file renamed into place)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cal, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, p)
    return p


def _num(x) -> bool:
    try:
        float(x)
        return True
    except (TypeError, ValueError):
        return False


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
