"""Victims: who is preempted so a job refused by quota is admitted, and why.

Every component returns a minimal set: candidates are taken greedily in the system's order
until the job is admissible (the engine's whole admission check, view.fits), then walked in
reverse, dropping each whose removal is not needed (Kueue's minimisation). Candidates are
whole running DL jobs (a suspended DL job keeps its progress), never a job whose priority is
at or above the mode's `non_preemptible_priority` (KAI: 100), never one that started less than
the mode's minimum runtime ago (`reclaim_min_runtime_s` between queues, `preempt_min_runtime_s`
within one: KAI's minruntime plugin, Slurm's PreemptExemptTime).

Reasons: `reclaim` (quota taken back from a queue above its own), `fair-share` (Kueue's S2-a /
S2-b predicates), `within-queue` (a higher-priority job of the same queue).

    none               nobody is preempted (Slurm's default PreemptType=preempt/none)
    kueue              Kueue classic: only a job that fits its own nominal may preempt;
                       `reclaim_within_cohort` (any | lower_priority | never) takes jobs of other
                       queues above their nominal; `within_queue` (lower_priority | never) lower-
                       priority jobs of its own queue; borrowers' jobs first, then the lowest
                       priority, then the most recently started
    kueue-fair         Kueue fair sharing: while the job does not fit, the queue with the highest
                       share gives its first job that the strategy allows: reclamation when the
                       preemptor's side borrows nothing, else S2-a DRS(x with job) <= DRS(y
                       without victim), and only when that yields nothing, S2-b DRS(x with job) <
                       DRS(y before) (x, y: the children of the two queues' lowest common ancestor)
    kai                KAI: within the queue by priority; between queues only while the reclaimer
                       stays within its fair share (at its queue and every ancestor), from queues
                       left at or above their fair share (MaintainFairShare) or, while the
                       reclaimer stays within quota, above their quota (GuaranteeDeservedQuota)
    volcano-proportion Volcano's reclaim with proportion: a queue within its deserved share takes
                       from queues whose allocation exceeds theirs, lower queue priority first
    volcano-capacity   Volcano's capacity: a reclaimer whose future use stays within its
                       deserved quota on some resource takes from queues above their deserved,
                       never below their guarantee
"""
from __future__ import annotations

from dlsched.scheduler.framework import Timeless, register
from dlsched.tenancy.orders import drs, within_nominal
from dlsched.tenancy.points import Victims
from dlsched.tenancy.tree import ROOT

_EPS = 1e-9


def minimal(view, job, leaf: str, req: dict, ordered) -> list[tuple[object, str]]:
    """Greedy over `ordered` (victim, its leaf, its request, reason) until the job fits, then
    Kueue's reverse walk. [] when even all of them do not make it fit."""
    book = view.book
    chosen = []
    for victim, vleaf, vreq, reason in ordered:
        book.add(vleaf, vreq, -1.0)
        chosen.append((victim, vleaf, vreq, reason))
        if not view.fits(leaf, job, req):
            break
    else:
        for _, vleaf, vreq, _ in chosen:
            book.add(vleaf, vreq)
        return []
    for item in reversed(list(chosen)):
        book.add(item[1], item[2])
        if not view.fits(leaf, job, req):
            chosen.remove(item)          # not needed
        else:
            book.add(item[1], item[2], -1.0)
    for _, vleaf, vreq, _ in chosen:
        book.add(vleaf, vreq)
    return [(v, reason) for v, _, _, reason in chosen]


def _recent_first(view, victim) -> float:
    return -(view.started(victim) or 0.0)


@register("victims", "none", source="Slurm PreemptType=preempt/none (default)")
class NoVictims(Timeless, Victims):
    """Nobody is preempted."""

    def __init__(self) -> None:
        pass

    def choose(self, view, job, leaf, req):
        return []


@register("victims", "kueue", source="Kueue preemption.md; pkg/scheduler/preemption/preemption.go")
class KueueVictims(Timeless, Victims):
    """Kueue classic preemption: reclaim within the cohort, then lower priority in the queue."""

    def __init__(self, reclaim_within_cohort: str = "any", within_queue: str = "lower_priority") -> None:
        if reclaim_within_cohort not in ("any", "lower_priority", "never"):
            raise ValueError(f"reclaim_within_cohort must be any, lower_priority or never, got {reclaim_within_cohort!r}")
        if within_queue not in ("lower_priority", "never"):
            raise ValueError(f"within_queue must be lower_priority or never, got {within_queue!r}")
        self.reclaim, self.within = reclaim_within_cohort, within_queue

    def choose(self, view, job, leaf, req):
        if not within_nominal(view, leaf, req):
            return []          # "only eligible to preempt if it fits fully within nominal quota"
        prio = job.spec.priority
        items = []
        for v, vleaf, vreq, kind in view.candidates(job):
            if vleaf == leaf:
                if self.within == "lower_priority" and v.spec.priority < prio:
                    items.append((1, v.spec.priority, _recent_first(view, v), v, vleaf, vreq, "within-queue"))
            elif self.reclaim != "never" and _over_nominal(view, vleaf, req):
                if self.reclaim == "any" or v.spec.priority < prio:
                    items.append((0, v.spec.priority, _recent_first(view, v), v, vleaf, vreq, "reclaim"))
        items.sort(key=lambda t: t[:3])
        return minimal(view, job, leaf, req, [t[3:] for t in items])


def _over_nominal(view, leaf: str, req: dict) -> bool:
    b = view.book
    return any(b.usage[leaf][r] > b.nominal(leaf, r) + _EPS for r, x in req.items() if x > _EPS)


def almost_lca(view, a: str, b: str) -> tuple[str, str]:
    """The children of the lowest common ancestor of leaves a and b, on each side."""
    pa, pb = view.book.path(a)[::-1], view.book.path(b)[::-1]      # root first
    i = 0
    while i < min(len(pa), len(pb)) and pa[i] == pb[i]:
        i += 1
    return pa[min(i, len(pa) - 1)], pb[min(i, len(pb) - 1)]


@register("victims", "kueue-fair", source="Kueue KEP-1714; pkg/scheduler/preemption/fairsharing/strategy.go")
class KueueFairVictims(Timeless, Victims):
    """Kueue fair-sharing preemption: reclamation, then S2-a, then S2-b."""

    def __init__(self, strategies: list | None = None) -> None:
        allowed = (["LessThanOrEqualToFinalShare", "LessThanInitialShare"], ["LessThanOrEqualToFinalShare"],
                   ["LessThanInitialShare"])
        strategies = list(strategies) if strategies is not None else list(allowed[0])
        if strategies not in [list(a) for a in allowed]:
            raise ValueError("strategies must be [LessThanOrEqualToFinalShare], [LessThanInitialShare] or both "
                             f"in that order, got {strategies}")
        self.strategies = strategies

    def choose(self, view, job, leaf, req):
        book = view.book
        pool = [(v, vl, vr) for v, vl, vr, _ in view.candidates(job) if vl != leaf]
        taken: list = []
        for strategy in self.strategies:
            while view.fits(leaf, job, req):
                best = None
                for v, vl, vr in pool:
                    if any(v is t[0] for t in taken):
                        continue
                    x, y = almost_lca(view, leaf, vl)
                    if book.borrowed(y, "gpu") <= _EPS and drs(view, y) <= 0:
                        continue          # a node that borrows nothing is never a target
                    share_y = drs(view, y)
                    if drs(view, x, leaf, req) <= 0 and drs(view, y) > 0:
                        reason = "reclaim"                       # S1: x borrows nothing
                    else:
                        book.add(vl, vr, -1.0)
                        after = drs(view, y)
                        book.add(vl, vr)
                        ok = (drs(view, x, leaf, req) <= after + _EPS if strategy == "LessThanOrEqualToFinalShare"
                              else drs(view, x, leaf, req) < share_y - _EPS)
                        if not ok:
                            continue
                        reason = "fair-share"
                    rank = (-share_y, v.spec.priority, _recent_first(view, v))
                    if best is None or rank < best[0]:
                        best = (rank, v, vl, vr, reason)
                if best is None:
                    break
                _, v, vl, vr, reason = best
                book.add(vl, vr, -1.0)
                taken.append((v, vl, vr, reason))
            if not view.fits(leaf, job, req):
                break
        for _, vl, vr, _ in taken:
            book.add(vl, vr)
        if not taken:
            return []
        return minimal(view, job, leaf, req, taken)


@register("victims", "kai", source="NVIDIA KAI-Scheduler proportion/reclaimable; docs/fairness")
class KaiVictims(Timeless, Victims):
    """KAI: preempt within the queue by priority; reclaim while within the fair share."""

    def __init__(self, multiplier: float = 1.0) -> None:
        if multiplier < 1:
            raise ValueError(f"multiplier must be >= 1 (below 1 allows cycles), got {multiplier}")
        self.multiplier = float(multiplier)

    def choose(self, view, job, leaf, req):
        book, fs = view.book, view.entitled
        need = req.get("gpu", 0.0)
        prio = job.spec.priority
        own = [(v.spec.priority, _recent_first(view, v), v, vl, vr, "within-queue")
               for v, vl, vr, kind in view.candidates(job) if vl == leaf and v.spec.priority < prio]
        own.sort(key=lambda t: t[:2])
        got = minimal(view, job, leaf, req, [t[2:] for t in own])
        if got:
            return got
        path = [n for n in book.path(leaf) if n != ROOT]
        if any(book.usage[n].get("gpu", 0.0) + need > fs.get(n, 0.0) + _EPS for n in path):
            return []               # the reclaimer would go above its fair share
        within_quota = all(book.usage[n].get("gpu", 0.0) + need <= book.nominal(n, "gpu") + _EPS for n in path)
        ratio_q = (book.usage[leaf].get("gpu", 0.0) + need) / max(fs.get(leaf, 0.0), _EPS)
        items = []
        for v, vl, vr, kind in view.candidates(job):
            if vl == leaf:
                continue
            _, y = almost_lca(view, leaf, vl)
            g = vr.get("gpu", 0.0)
            remaining = book.usage[y].get("gpu", 0.0) - g
            fair = remaining >= fs.get(y, 0.0) - _EPS
            quota = within_quota and remaining >= book.nominal(y, "gpu") - _EPS
            if not (fair or quota):
                continue
            ratio_s = remaining / max(fs.get(y, 0.0), _EPS)
            if ratio_q > 1 and not ratio_q * self.multiplier < ratio_s:
                continue            # the saturation check: the order of the two must not flip
            over = book.usage[y].get("gpu", 0.0) / max(fs.get(y, 0.0), _EPS)
            items.append((-over, v.spec.priority, _recent_first(view, v), v, vl, vr, "reclaim"))
        items.sort(key=lambda t: t[:3])
        return minimal(view, job, leaf, req, [t[3:] for t in items])


@register("victims", "volcano-proportion", source="volcano-sh/volcano actions/reclaim; plugins/proportion")
class VolcanoProportionVictims(Timeless, Victims):
    """Volcano reclaim: from queues above their deserved share, lower queue priority first."""

    def __init__(self) -> None:
        pass

    def choose(self, view, job, leaf, req):
        book, d = view.book, view.entitled
        need = req.get("gpu", 0.0)
        if book.usage[leaf].get("gpu", 0.0) + need > d.get(leaf, 0.0) + _EPS:
            return []               # overused or not allocatable: may not reclaim
        left = {}
        items = []
        for v, vl, vr, kind in view.candidates(job):
            if vl == leaf:
                continue
            left.setdefault(vl, book.usage[vl].get("gpu", 0.0))
            items.append((view.tree.nodes[vl].priority, -left[vl] / max(d.get(vl, 0.0), _EPS),
                          v.spec.priority, _recent_first(view, v), v, vl, vr))
        items.sort(key=lambda t: t[:4])
        ordered = []
        for *_, v, vl, vr in items:
            if left[vl] > d.get(vl, 0.0) + _EPS:            # take while the queue is above deserved
                left[vl] -= vr.get("gpu", 0.0)
                ordered.append((v, vl, vr, "reclaim"))
        return minimal(view, job, leaf, req, ordered)


@register("victims", "volcano-capacity", source="volcano-sh/volcano plugins/capacity (preemptive, reclaimable)")
class VolcanoCapacityVictims(Timeless, Victims):
    """Volcano capacity reclaim: within deserved on some resource; victims above deserved."""

    def __init__(self) -> None:
        pass

    def choose(self, view, job, leaf, req):
        book = view.book
        dims = [r for r, x in req.items() if x > _EPS]
        if not any(book.usage[leaf][r] + req[r] <= book.nominal(leaf, r) + _EPS for r in dims):
            return []               # not preemptive: over its deserved on every requested resource
        items = []
        for v, vl, vr, kind in view.candidates(job):
            if vl == leaf:
                continue
            used = [r for r in dims if vr.get(r, 0.0) > _EPS]
            if not any(book.usage[vl][r] > book.nominal(vl, r) + _EPS for r in used):
                continue            # its queue is not above deserved on what it would give
            items.append((view.tree.nodes[vl].priority, v.spec.priority, _recent_first(view, v), v, vl, vr))
        items.sort(key=lambda t: t[:3])
        ordered, left = [], {}
        for *_, v, vl, vr in items:
            u = left.setdefault(vl, dict(book.usage[vl]))
            q = book.tree.nodes[vl].quotas
            if all(u[r] - vr.get(r, 0.0) >= (q[r].guaranteed if r in q else 0.0) - _EPS for r in u):
                for r in u:
                    u[r] -= vr.get(r, 0.0)
                ordered.append((v, vl, vr, "reclaim"))
        return minimal(view, job, leaf, req, ordered)
