"""The CLI's tenancy options (`--queues`, `--tenancy`) and their checks, shared by simulate,
compare and the experiments."""
from __future__ import annotations

from typing import Optional

import typer

QUEUES_HELP = ("a queue tree (YAML: queues with quotas, docs/tenancy.md), or a bundled one: philly, "
               "philly-isolated; none: one tenant, no quotas")
TENANCY_HELP = ("how the queues share the cluster: kueue, kueue-fair, kai, volcano-proportion, "
                "volcano-capacity, slurm-fairtree (with --queues; default: the queue file's "
                "`tenancy: {mode: ...}`, else kueue)")
QUEUES_OPTION = typer.Option(None, "--queues", help=QUEUES_HELP)
TENANCY_OPTION = typer.Option(None, "--tenancy", help=TENANCY_HELP)


def load_tenancy(queues: Optional[str], mode: Optional[str], jobs, workload: str | None = None):
    """(queue tree or None, mode or None: the file's), every job's queue and the mode checked:
    ConfigErrors name the file, the line and the field."""
    from dlsched.core.errors import DlschedError
    from dlsched.scheduler.framework import REGISTRY
    from dlsched.tenancy import load_queues
    from dlsched.tenancy.engine import Tenancy
    import dlsched.tenancy.modes  # noqa: F401  (the modes register themselves)
    if mode is not None and mode not in REGISTRY.names("tenancy"):
        raise DlschedError(f"--tenancy: unknown mode {mode!r} (modes: {', '.join(REGISTRY.names('tenancy'))})")
    if queues is None:
        if mode is not None:
            raise DlschedError("--tenancy: needs --queues (a queue tree to share the cluster by)")
        return None, mode
    tree = load_queues(queues)
    Tenancy(tree, mode).check_jobs(jobs, workload)
    return tree, mode


def whatif_queues(doc: dict, names: list[str], horizon_s: float, queues: str, mode: str | None) -> dict:
    """"What if the queues were these?" from a live state document: each policy run under the
    server's own queues (the document's; none: one tenant) and under `queues`, and each queue's
    mean predicted wait of its waiting jobs in both."""
    from dlsched.runtime.whatif import predict
    from dlsched.tenancy import load_queues
    tree = load_queues(queues)
    mode = mode or tree.settings.get("mode") or doc.get("tenancy") or "kueue"
    queue_of = {r["job_id"]: r.get("queue") or "default" for r in doc["jobs"]}
    waiting = {r["job_id"] for r in doc["jobs"] if r.get("state") != "running"}
    now = predict(doc, names, horizon_s)
    new = predict(doc, names, horizon_s, queues=tree, tenancy=mode)

    def per_queue(pred) -> dict:
        out: dict[str, list] = {}
        for jid, j in pred["jobs"].items():
            if jid in waiting and j["start_s"] is not None:
                out.setdefault(queue_of.get(jid, "default"), []).append(j["start_s"] - j["submit_s"])
        return {q: sum(v) / len(v) for q, v in out.items()}
    rows = []
    for p in names:
        a, b = per_queue(now["policies"][p]), per_queue(new["policies"][p])
        for q in sorted(set(a) | set(b)):
            rows.append({"policy": p, "queue": q, "wait_now_s": a.get(q), "wait_with_new_queues_s": b.get(q)})
    return {"mode": mode, "queues_file": str(queues), "rows": rows, "now": now, "with_new_queues": new}
