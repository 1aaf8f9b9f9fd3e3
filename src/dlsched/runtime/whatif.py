"""What if: the live cluster as a simulator state (dlsched.sim.midflight), and runs of it.

`live_state(backend)` runs on the scheduler thread (a command, `_op_state`: a consistent view of
the scheduler's records, the ledger and the store) and returns a "dlsched-state" document:
- the cluster as the runtime's scheduler sees it (its nodes by name);
- the calibration measured in this store (dlsched.runtime.calibration): each model's seconds per
  step, so the simulator runs the jobs at the speeds they really have here;
- every job not finished: its spec as a common-schema row whose work is the steps it has left
  (the store's step count: what its ranks reported), its submission time, and for a running job
  its placement, its first start and the service it had.
  A job whose model this store never measured and the zoo does not know gets `duration_s`: its
  steps left times the mean measured seconds per step (1 s when nothing was measured), and is
  marked `estimated`.

`predict(doc, policies, horizon_s)` runs each policy from the document (`simulate_state`) and
returns, per policy, the mean wait, mean JCT and utilisation, and each job's predicted start and
finish, as times relative to now and as absolute UNIX times.
"""
from __future__ import annotations

import time

MAX_POLICIES = 8
MAX_HORIZON_S = 30 * 86400.0


def cluster_doc(cluster) -> dict:
    """A Cluster in the state's runtime form (nodes by name, racks, domains)."""
    from dataclasses import asdict
    return {"name": cluster.name, "nodes": [asdict(n) for n in cluster.nodes],
            "racks": [{"name": r, "domain": int(d), "uplink_gbps": float(u)}
                      for r, d, u in zip(cluster.rack_names, cluster.rack_domain, cluster.rack_uplink_gbps)],
            "domains": list(cluster.domain_names)}


def live_state(backend) -> dict:
    """The state document of the running server (scheduler thread only)."""
    from dlsched.runtime.calibration import calibration_from_store
    from dlsched.scheduler.context import JobState
    from dlsched.workload.models import get_model
    from dlsched.workload.schema import job_to_row
    sched, store, cl = backend.scheduler, backend.store, backend.cluster
    now = backend.now()
    nodes = [{"name": n.name, "gpu_type": n.gpu_type} for n in backend.nodes]
    cal = calibration_from_store(store, backend.epoch, nodes=nodes)
    measured = [c["iter_s"] for per_t in (cal.get("models") or {}).values() for per_w in per_t.values()
                for c in per_w.values() if c.get("iter_s")]
    mean_step = sum(measured) / len(measured) if measured else 1.0
    jobs = []
    for rec in list(sched.jobs.values()):
        if rec.state in (JobState.DONE, JobState.HELD, JobState.REJECTED):
            continue
        j = store.job(rec.job_id)
        if j is None or j["state"] not in ("queued", "starting", "running"):
            continue
        row = {k: v for k, v in job_to_row(rec.spec).items() if v is not None}
        row["submit_time_s"] = min(rec.spec.submit_time_s - now, 0.0)
        row.pop("deadline_s", None)
        total = rec.spec.iterations or 0.0
        left = max(total - float(j["step"] or 0), 1.0)
        model = rec.spec.model or (j["spec"] or {}).get("name")
        known = model is not None and (get_model(str(model)) is not None or str(model) in (cal.get("models") or {}))
        if known:
            row.update(model=str(model), iterations=left)
            row.pop("duration_s", None)
        else:
            row.pop("iterations", None)
            row.pop("model", None)
            row.update(duration_s=left * mean_step, estimated=True)
        if rec.state is JobState.RUNNING and rec.placed and rec.first_start_s is not None:
            row.update(state="running", started_s=min(rec.first_start_s - now, 0.0),
                       attained_gpu_s=rec.attained(now),
                       placement=[{"task": tp.task, "node": cl.nodes[tp.node].name, "gpus": list(tp.gpu_ids)}
                                  for tp in sorted(rec.placed.values(), key=lambda tp: tp.task)])
        jobs.append(row)
    ten = sched.tenancy
    return {"schema": "dlsched-state", "version": 1, "time": time.time(), "policy": sched.profile.name,
            "cluster": cluster_doc(cl), "calibration": cal if cal.get("models") else None, "jobs": jobs,
            **({"queues": ten.tree.to_dict(), "tenancy": ten.mode.name} if ten is not None else {})}


def predict(doc: dict, policies: list[str], horizon_s: float, *, runtime: bool = True, queues=None,
            tenancy: str | None = None) -> dict:
    """Each policy run from the state document: {time, horizon_s, policies: {name: Prediction
    as a dict, with each job's start and finish also as UNIX times}}. `queues` (a QueueTree):
    under that tree and `tenancy` mode instead of the document's own (its `queues` and
    `tenancy`, kept by a server with quotas; none: one tenant)."""
    from dlsched.sim.midflight import load_state, simulate_state
    at = float(doc.get("time") or time.time())
    rows = [{k: v for k, v in r.items() if k != "estimated"} for r in doc["jobs"]]
    state = load_state({**doc, "jobs": rows})
    estimated = {r["job_id"] for r in doc["jobs"] if r.get("estimated")}
    out = {}
    if queues is None and doc.get("queues"):
        from dlsched.tenancy import tree_from_dict
        queues, tenancy = tree_from_dict(doc["queues"]), tenancy or doc.get("tenancy") or "kueue"
    for p in policies:
        ten = None
        if queues is not None:
            from dlsched.tenancy.engine import Tenancy
            ten = Tenancy(queues, tenancy or "kueue")
        pred = simulate_state(state, p, horizon_s=horizon_s, runtime=runtime, tenancy=ten).to_dict()
        for jid, j in pred["jobs"].items():
            j["start_time"] = None if j["start_s"] is None else at + j["start_s"]
            j["finish_time"] = None if j["finish_s"] is None else at + j["finish_s"]
            j["estimated"] = jid in estimated
        out[p] = pred
    return {"time": at, "horizon_s": horizon_s, "policies": out}


def history(store) -> dict:
    """The store's jobs as a workload in the common schema (GET /export): each job's arrival,
    relative to the first, and its measured run time (the sum of its runs, from its events) as
    `duration_s`. A job that has not finished gets the run time its steps so far project; one
    that never ran a step is left out (counted in `skipped`)."""
    from dlsched.runtime.calibration import _runs
    from dlsched.runtime.spec import RuntimeJobSpec
    from dlsched.workload.schema import job_to_row
    jobs = store.jobs()
    if not jobs:
        return {"jobs": [], "skipped": 0}
    t0 = min(j["submit_time"] for j in jobs)
    rows, skipped, now = [], 0, time.time()
    for j in jobs:
        spec = RuntimeJobSpec(**j["spec"])
        ran = sum((r["end"] if r["end"] is not None else now) - r["start"]
                  for r in _runs(store.events(j["job_id"], limit=100000)))     # (oldest first)
        steps, total = float(j["step"] or 0), float(spec.iterations or 0)
        if j["state"] != "done":
            if steps <= 0 or ran <= 0 or total <= 0:
                skipped += 1
                continue
            ran *= total / steps
        if ran <= 0:
            skipped += 1
            continue
        js = spec.to_jobspec(j["job_id"], j["submit_time"] - t0)
        row = {k: v for k, v in job_to_row(js).items() if v is not None and k not in ("model", "iterations", "deadline_s")}
        row["duration_s"] = round(ran, 3)
        rows.append(row)
    return {"jobs": rows, "skipped": skipped}
