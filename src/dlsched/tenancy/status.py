"""What `dlsched queues`, GET /queues and GET /queues/{q}/pending show: each queue's quota, use
and entitlement, and its waiting jobs with their places and reasons (Kueue's pending-workloads
view). Read from another thread than the scheduler's: every read takes a copy of what the
scheduler replaces (never edits in place) or of a dict at once."""
from __future__ import annotations

from dlsched.tenancy.tree import ROOT

_FIELDS = ("nominal", "borrowing_limit", "lending_limit", "limit")


def queues_status(tenancy, sched) -> dict:
    """{mode, queues: [{name, parent, leaf, weight, priority, quotas, usage, entitled_gpus,
    borrowed_gpus, running, pending}]} in the tree's order."""
    tree = tenancy.tree
    leaf_use = {k: dict(v) for k, v in list(tenancy._leaf_use.items())}
    view = getattr(tenancy, "_view", None)
    entitled = dict(view.entitled) if view is not None else {}
    running: dict[str, int] = {}
    for leaf, *_ in list(tenancy._hold.values()):
        running[leaf] = running.get(leaf, 0) + 1
    pending: dict[str, int] = {}
    for rec in list(sched.queue):
        leaf = tenancy.leaf_of(rec)
        pending[leaf] = pending.get(leaf, 0) + 1

    from dlsched.tenancy.book import Book
    book = Book(tree, None, tenancy.resources)          # (its quota tables: subtree_quota)
    out = []
    for name, node in tree.nodes.items():
        leaves = _leaves(tree, name)
        use = {r: sum(leaf_use.get(lf, {}).get(r, 0.0) for lf in leaves) for r in tenancy.resources}
        sub_nominal = {r: book.subtree_quota(name, r) for r in tenancy.resources}
        out.append({
            "name": name, "parent": node.parent or None, "leaf": not tree.children.get(name),
            "weight": node.weight, "priority": node.priority,
            "quotas": {r: {f: getattr(q, f) for f in _FIELDS} for r, q in node.quotas.items()},
            "usage": use,
            "entitled_gpus": entitled.get(name),
            "borrowed_gpus": max(0.0, use.get("gpu", 0.0) - sub_nominal.get("gpu", 0.0)) if "gpu" in use else 0.0,
            "running": sum(running.get(lf, 0) for lf in leaves),
            "pending": sum(pending.get(lf, 0) for lf in leaves),
        })
    return {"mode": tenancy.mode.name, "queues": out}


def pending_jobs(tenancy, sched, queue: str, offset: int = 0, limit: int = 1000) -> dict:
    """The waiting jobs of leaf `queue` in the last round's order: position_in_queue (among the
    queue's own), position_in_parent (among the waiting jobs of the parent's whole subtree; the
    cluster's for a top-level queue), and why each waits."""
    tree = tenancy.tree
    parent = tree.nodes[queue].parent
    under = set(_leaves(tree, parent)) if parent != ROOT else None
    order = list(sched.queue_order)
    seen = set(order)
    order += [r.job_id for r in list(sched.queue) if r.job_id not in seen]   # arrived since
    jobs = sched.jobs
    items, in_parent, in_queue = [], 0, 0
    for jid in order:
        rec = jobs.get(jid)
        if rec is None or not rec.queued:
            continue
        leaf = tenancy.leaf_of(rec)
        if under is not None and leaf not in under:
            continue
        in_parent += 1
        if leaf != queue:
            continue
        in_queue += 1
        items.append({"job_id": jid, "user": rec.spec.user, "priority": rec.spec.priority,
                      "gpus": tenancy.gpus(rec), "position_in_queue": in_queue,
                      "position_in_parent": in_parent, "reason": rec.why or "arrived after the last round"})
    return {"queue": queue, "total": len(items), "offset": offset, "limit": limit,
            "items": items[offset:offset + limit]}


def _leaves(tree, name: str) -> list[str]:
    kids = tree.children.get(name, [])
    return [name] if not kids else [x for k in kids for x in _leaves(tree, k)]
