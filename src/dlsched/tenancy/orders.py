"""Queue orders: which queue's head goes next in the admission walk (smallest key first).

    kueue     Kueue classic, within a cohort: heads that fit their queue's nominal quota first;
              among borrowers, higher job priority first; then submission time
    drs       Kueue fair sharing: the lowest dominant-resource share with the incoming job,
              decided root to leaf (each node's share, top-level first), then priority and time
    usage     Kueue admission fair sharing (and Volcano's fairshare plugin): the lowest decayed
              usage of the queue divided by its weight, then priority and time
    kai       KAI's chain: queues at or under their fair share first; then those that stay within
              quota with the job; higher queue priority; the smaller dominant share with the job
              (allocated / allocatable, allocatable = min(limit, max(quota, fair share))); time
    volcano   Volcano's proportion: higher queue priority, then the lower share (allocated /
              deserved), then time
    fairtree  Slurm's Fair Tree: siblings ranked by level fairness LF = S / U (shares over the
              siblings' shares, decayed usage over theirs; no usage: infinite), depth first; a
              queue's rank is its place in that traversal (equal LF, equal rank)

Within a queue the profile's order holds: only its head is asked about.
"""
from __future__ import annotations

import math

from dlsched.scheduler.framework import Timeless, register
from dlsched.tenancy.book import INF
from dlsched.tenancy.points import QueueOrder
from dlsched.tenancy.tree import ROOT

_EPS = 1e-9


def _tail(job) -> tuple:
    return (-job.spec.priority, job.submit_time_s, job.job_id)


def _time(job) -> tuple:
    return (job.submit_time_s, job.job_id)


def within_nominal(view, leaf: str, req: dict[str, float]) -> bool:
    """Would the queue stay within its nominal quota with this request? (Kept in view.cache per
    (leaf, request) while the book is unchanged: under a deep queue Kueue's order and victims
    ask it of every waiting job, most of one of a few shapes; benchmarks/bench_policies.py
    --deep --queues.)"""
    b = view.book
    k = (leaf, *req.items())
    got = view.cache.get(k)
    if got is not None and got[0] == b.version:
        return got[1]
    use, nom = b.usage[leaf], b._t["nom"][leaf]
    ok = True
    for r, x in req.items():             # (a loop, not all() over a generator: asked per shape
        if x > _EPS and not use[r] + x <= nom[r] + _EPS:      # after every admission)
            ok = False
            break
    view.cache[k] = (b.version, ok)
    return ok


@register("queue_order", "kueue", source="Kueue cluster_queue.md (PrioritySortingWithinCohort)")
class KueueOrder(Timeless, QueueOrder):
    """Heads within nominal first, then higher priority, then earlier submission."""
    local = split = True

    def __init__(self) -> None:
        pass

    def part(self, view, leaf, req) -> tuple:
        return (0 if within_nominal(view, leaf, req) else 1,)

    tail = staticmethod(_tail)

    def key(self, view, leaf, job, req) -> tuple:
        return (*self.part(view, leaf, req), *_tail(job))


def drs(view, node: str, leaf: str | None = None, req: dict | None = None) -> float:
    """Kueue's dominant resource share of `node` (x1000, over its weight), with `req` added to
    `leaf` when given: max over resources of what it borrows above its subtree's quota over what
    its parent could lend. 0 when not borrowing; infinite for weight 0 and borrowing."""
    b = view.book
    parent = b.tree.nodes[node].parent
    best = 0.0
    for r in b.resources:
        extra = (req or {}).get(r, 0.0) if leaf is not None and node in b.path(leaf) else 0.0
        borrowed = max(0.0, b.usage[node][r] + extra - b.subtree_quota(node, r))
        if borrowed <= _EPS:
            continue
        lendable = b.lendable(parent, r)
        best = max(best, borrowed * 1000.0 / lendable if lendable > _EPS else INF)
    w = b.tree.nodes[node].weight
    if best <= 0:
        return 0.0
    return best / w if w > 0 else INF


@register("queue_order", "drs", source="Kueue KEP-1714 fair sharing; pkg/cache/scheduler/fair_sharing.go")
class DrsOrder(Timeless, QueueOrder):
    """The lowest dominant-resource share (with the job), root to leaf."""
    split = True

    def __init__(self) -> None:
        pass

    def part(self, view, leaf, req) -> tuple:
        path = [n for n in reversed(view.book.path(leaf)) if n != ROOT]
        return (tuple(drs(view, n, leaf, req) for n in path),)

    tail = staticmethod(_tail)

    def key(self, view, leaf, job, req) -> tuple:
        return (*self.part(view, leaf, req), *_tail(job))


@register("queue_order", "usage", source="Kueue KEP-4136 admission fair sharing; Volcano fairshare plugin")
class UsageOrder(QueueOrder):
    """The lowest decayed usage over weight."""
    local = split = True

    def __init__(self) -> None:
        pass

    def part(self, view, leaf, req) -> tuple:
        w = view.tree.nodes[leaf].weight
        u = view.ledger.value(f"queue:{leaf}") if view.ledger is not None else 0.0
        return ((u / w) if w > 0 else INF,)

    tail = staticmethod(_tail)

    def key(self, view, leaf, job, req) -> tuple:
        return (*self.part(view, leaf, req), *_tail(job))


@register("queue_order", "kai", source="NVIDIA KAI-Scheduler proportion/queue_order/queue_order.go")
class KaiOrder(Timeless, QueueOrder):
    """KAI's chain: under fair share, within quota, queue priority, dominant share, time."""
    local = split = True

    def __init__(self) -> None:
        pass

    def part(self, view, leaf, req) -> tuple:
        b = view.book
        used = b.usage[leaf].get("gpu", 0.0)
        need = req.get("gpu", 0.0)
        fs = view.entitled.get(leaf, 0.0)
        nominal = b.nominal(leaf, "gpu") if "gpu" in b.resources else 0.0
        allocatable = min(b.limit(leaf, "gpu") if "gpu" in b.resources else INF, max(nominal, fs))
        share = (used + need) / allocatable if allocatable > _EPS else INF
        return (0 if used <= fs + _EPS else 1, 0 if used + need <= nominal + _EPS else 1,
                -view.tree.nodes[leaf].priority, share)

    tail = staticmethod(_time)

    def key(self, view, leaf, job, req) -> tuple:
        return (*self.part(view, leaf, req), *_time(job))


@register("queue_order", "volcano", source="volcano-sh/volcano pkg/scheduler/plugins/proportion (QueueOrderFn)")
class VolcanoOrder(Timeless, QueueOrder):
    """Higher queue priority, then the lower share of the deserved."""
    local = split = True

    def __init__(self) -> None:
        pass

    def part(self, view, leaf, req) -> tuple:
        used = view.book.usage[leaf].get("gpu", 0.0)
        d = view.entitled.get(leaf, 0.0)
        share = used / d if d > _EPS else (0.0 if used <= _EPS else INF)
        return (-view.tree.nodes[leaf].priority, share)

    tail = staticmethod(_time)

    def key(self, view, leaf, job, req) -> tuple:
        return (*self.part(view, leaf, req), *_time(job))


def fair_tree_ranks(view) -> dict[str, int]:
    """Slurm's Fair Tree: each leaf's rank (0 first) from level fairness, depth first."""
    tree = view.tree
    ranks: dict[str, int] = {}

    def lf(node: str, sibs: list[str]) -> float:
        s = tree.nodes[node].weight / (sum(tree.nodes[x].weight for x in sibs) or 1.0)
        usage = {x: _usage(view, x) for x in sibs}
        total = sum(usage.values())
        u = usage[node] / total if total > 0 else 0.0
        return math.inf if u <= 0 else s / u

    def walk(parent: str, start: int) -> int:
        kids = tree.children.get(parent, [])
        scored = sorted(((lf(c, kids), c) for c in kids), key=lambda t: (-t[0], t[1]))
        nxt, last = start, None
        for score, c in scored:
            if tree.children.get(c):
                nxt = walk(c, nxt)
                last = None
                continue
            if last is not None and last[0] == score:
                ranks[c] = last[1]             # equal level fairness: an equal rank
            else:
                ranks[c] = nxt
                last = (score, nxt)
            nxt += 1
        return nxt

    walk(ROOT, 0)
    return ranks


def _usage(view, node: str) -> float:
    kids = view.tree.children.get(node, [])
    if not kids:
        return view.ledger.value(f"queue:{node}") if view.ledger is not None else 0.0
    return sum(_usage(view, c) for c in kids)


@register("queue_order", "fairtree", source="Slurm doc/html/fair_tree.shtml")
class FairTreeOrder(QueueOrder):
    """Slurm's Fair Tree rank from decayed usage and shares."""
    local = split = True

    def __init__(self) -> None:
        pass

    def part(self, view, leaf, req) -> tuple:
        ranks = view.cache.get("fairtree")
        if ranks is None:
            ranks = view.cache["fairtree"] = fair_tree_ranks(view)
        return (ranks.get(leaf, 0),)

    tail = staticmethod(_tail)

    def key(self, view, leaf, job, req) -> tuple:
        return (*self.part(view, leaf, req), *_tail(job))
