"""GET /queues and GET /queues/{queue}/pending (issue "Many tenants", section 4): each queue's
quota, use and entitlement, and one leaf's waiting jobs in the last round's order with why each
waits. `dlsched queues`, the web view's Queues page and the per-queue Prometheus series
(dlsched.runtime.metrics) read the same answers. Every user may read them, as GET /jobs.

With `--queues FILE` the answers are dlsched.tenancy.status's. Without, the server has one leaf,
`default`, with no quota: its use is what the running jobs hold, its pending jobs the
scheduler's queue, and `mode` is null.

Both are read from an API thread, as GET /jobs's waiting reasons are: copies of what the
scheduler thread replaces (never edits in place), taken at once.
"""
from __future__ import annotations

from dlsched.core.types import GPU

MAX_LIMIT = 1000                # jobs in one page of GET /queues/{queue}/pending


def queues_of(sched, tree) -> dict:
    """{mode, queues: [{name, parent, leaf, weight, priority, quotas, usage, entitled_gpus,
    borrowed_gpus, running, pending}]}: the scheduler's tenancy's, or the `default` queue's
    (`tree`: the server's tree, used without a tenancy)."""
    ten = sched.tenancy
    if ten is not None:
        from dlsched.tenancy.status import queues_status
        return queues_status(ten, sched)
    from dlsched.tenancy import DEFAULT_QUEUE
    node = tree.nodes[DEFAULT_QUEUE]
    running = list(sched.running.values())
    return {"mode": None, "queues": [{
        "name": node.name, "parent": None, "leaf": True, "weight": node.weight, "priority": node.priority,
        "quotas": {}, "usage": {"gpu": sum(rec.held_gpus() for rec in running)},
        "entitled_gpus": None, "borrowed_gpus": 0.0, "running": len(running), "pending": len(sched.queue)}]}


def leaves_of(sched, tree) -> tuple[list[str], dict]:
    """(the leaves, every queue's node) of the tree jobs are held in."""
    t = sched.tenancy.tree if sched.tenancy is not None else tree
    return t.leaves, t.nodes


def pending_of(sched, queue: str, offset: int = 0, limit: int = MAX_LIMIT) -> dict:
    """{queue, total, offset, limit, items: [{job_id, user, priority, gpus, position_in_queue,
    position_in_parent, reason}]} of leaf `queue` (checked by the caller)."""
    ten = sched.tenancy
    if ten is not None:
        from dlsched.tenancy.status import pending_jobs
        return pending_jobs(ten, sched, queue, offset, limit)
    # one top-level leaf: its place in the queue is its place in the cluster's
    order = list(sched.queue_order)
    seen = set(order)
    order += [r.job_id for r in list(sched.queue) if r.job_id not in seen]      # arrived since
    items = []
    for jid in order:
        rec = sched.jobs.get(jid)
        if rec is None or not rec.queued:
            continue
        n = len(items) + 1
        items.append({"job_id": jid, "user": rec.spec.user, "priority": rec.spec.priority,
                      "gpus": float(sum(t.demand[GPU] for t in rec.tasks)), "position_in_queue": n,
                      "position_in_parent": n, "reason": rec.why or "arrived after the last round"})
    return {"queue": queue, "total": len(items), "offset": offset, "limit": limit,
            "items": items[offset:offset + limit]}


def install_queues(api, server) -> None:
    """Add the two routes to `api` (the router behind the token)."""
    from fastapi import HTTPException

    @api.get("/queues")
    def queues():
        """Every queue of the tree, in its order: parent, weight, priority, quotas per resource
        (nominal, borrowing_limit, lending_limit, limit), usage, entitled and borrowed GPUs,
        running and pending jobs; and the tenancy mode (null without --queues: one `default`
        queue, no quota)."""
        return queues_of(server.scheduler, server.tree)

    @api.get("/queues/{queue}/pending")
    def pending(queue: str, offset: int = 0, limit: int = MAX_LIMIT):
        """A leaf's waiting jobs in the last round's order: position in the queue, position in
        the parent's subtree (the cluster's, for a top-level queue), user, priority, GPUs and
        why it waits; `offset` and `limit` (1 to 1000) page through them."""
        if offset < 0:
            raise HTTPException(422, f"offset: must be 0 or more, got {offset}")
        if not 1 <= limit <= MAX_LIMIT:
            raise HTTPException(422, f"limit: must be from 1 to {MAX_LIMIT}, got {limit}")
        leaves, nodes = leaves_of(server.scheduler, server.tree)
        if queue not in nodes:
            raise HTTPException(404, f"unknown queue {queue!r} (queues that hold jobs: {', '.join(leaves)})")
        if queue not in leaves:
            raise HTTPException(422, f"queue {queue!r} is an inner queue: only leaves hold jobs "
                                     f"(leaves: {', '.join(leaves)})")
        return pending_of(server.scheduler, queue, offset, limit)
