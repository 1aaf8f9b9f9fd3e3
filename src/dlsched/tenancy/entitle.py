"""Entitlements: what each queue deserves now (GPUs), one component per system.

    nominal             Kueue: the nominal quota (an inner node: its subtree's), nothing computed
    kai                 KAI-Scheduler's proportion plugin, top-down per level: each queue gets
                        min(quota, requestable), then the rest by priority level (highest
                        first), in rounds of C * P'_i with P_i = max(0, W'_i + k (W'_i - U'_i))
                        (W' the over-quota weight and U' the decayed usage normalised by the
                        cluster's capacity, both over the unsatisfied queues), each taking the
                        floor of its offer up to its request, while someone took less; then the
                        leftover one GPU at a time by weight
    volcano-proportion  Volcano's proportion plugin, per level: in rounds each unmet queue gets
                        remaining * w / sum(w), clipped to min(realCapability, request) and
                        raised to its guarantee; realCapability = min(capability, total - sum of
                        guarantees + own guarantee); a queue admits only within its deserved
    volcano-capacity    Volcano's capacity plugin: deserved is configured (the nominal); a queue
                        admits up to its realCapability

"requestable" is min(limit, what the subtree holds plus what it waits for). Here `quota` is the
queue's nominal, `limit` its limit, `weight` its weight, `priority` its priority, and Volcano's
guarantee the nominal less the lending limit (tree.Quota.guaranteed).
"""
from __future__ import annotations

import math

from dlsched.scheduler.framework import Timeless, register
from dlsched.tenancy.book import INF
from dlsched.tenancy.points import Entitlement
from dlsched.tenancy.tree import ROOT

_EPS = 1e-9


def _gpu(view, x: str, what: str) -> float:
    b = view.book
    if "gpu" not in b.resources:
        return {"nominal": 0.0, "limit": INF, "guarantee": 0.0}[what]
    if what == "nominal":
        return b.subtree_quota(x, "gpu") if x != ROOT else view.capacity.get("gpu", 0.0)
    if what == "limit":
        return b.limit(x, "gpu") if x != ROOT else INF
    q = b.tree.nodes[x].quotas.get("gpu")
    return q.guaranteed if q is not None else 0.0


@register("entitlement", "nominal", source="Kueue ClusterQueue nominalQuota")
class Nominal(Timeless, Entitlement):
    """The nominal quota: what a queue is guaranteed, nothing computed."""

    def __init__(self) -> None:
        self._kept: tuple | None = None

    def compute(self, view) -> dict[str, float]:
        # the same tables give the same answer: kept, and the same dict returned, which tells
        # the accounts nothing changed (benchmarks/bench_tenancy.py)
        t = view.book._t
        if self._kept is None or self._kept[0] is not t:
            self._kept = (t, {x: _gpu(view, x, "nominal") for x in view.tree.nodes})
        return self._kept[1]


def kai_split(total: float, queues: list[dict], k: float = 1.0) -> dict[str, float]:
    """One level of KAI's division: queues are {name, quota, limit, request, weight, priority,
    usage} (usage normalised by capacity); returns each queue's fair share."""
    share: dict[str, float] = {}
    want = {}
    for q in queues:
        want[q["name"]] = min(q["limit"], q["request"])
        share[q["name"]] = min(q["quota"], want[q["name"]])
    left = max(0.0, total - sum(share.values()))
    for prio in sorted({q["priority"] for q in queues}, reverse=True):
        level = [q for q in queues if q["priority"] == prio and q["weight"] > 0]
        while left >= 1 - _EPS:
            open_ = [q for q in level if share[q["name"]] < want[q["name"]] - _EPS]
            if not open_:
                break
            wsum = sum(q["weight"] for q in open_)
            p = {q["name"]: max(0.0, q["weight"] / wsum + k * (q["weight"] / wsum - q["usage"])) for q in open_}
            psum = sum(p.values()) or 1.0
            took_less, given = False, 0.0
            for q in open_:
                offer = math.floor(left * p[q["name"]] / psum + _EPS)
                take = min(want[q["name"]] - share[q["name"]], offer)
                took_less = took_less or take < offer
                share[q["name"]] += take
                given += take
            left -= given
            if not took_less or given <= _EPS:
                break
        # the leftover, one GPU at a time, to the unsatisfied queues by over-quota weight
        for q in sorted(level, key=lambda q: (-q["weight"], q["name"])):
            while left >= 1 - _EPS and share[q["name"]] < want[q["name"]] - _EPS:
                share[q["name"]] += 1.0
                left -= 1.0
    return share


@register("entitlement", "kai", source="NVIDIA KAI-Scheduler pkg/scheduler/plugins/proportion/resource_division")
class KaiFairShare(Entitlement):
    """KAI's fair share: quota first, then over-quota by priority, weight and decayed usage."""

    def __init__(self, k: float = 1.0) -> None:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self.k = float(k)

    def compute(self, view) -> dict[str, float]:
        out: dict[str, float] = {}

        def divide(parent: str, total: float) -> None:
            kids = view.tree.children.get(parent, [])
            qs = [{"name": c, "quota": _gpu(view, c, "nominal"), "limit": _gpu(view, c, "limit"),
                   "request": view.demand.get(c, 0.0), "weight": view.tree.nodes[c].weight,
                   "priority": view.tree.nodes[c].priority,
                   "usage": view.ledger.value(f"queue:{c}") if view.ledger is not None else 0.0} for c in kids]
            for c, s in kai_split(total, qs, self.k).items():
                out[c] = s
                divide(c, s)
        divide(ROOT, view.capacity.get("gpu", 0.0))
        return out


def volcano_split(total: float, queues: list[dict]) -> dict[str, float]:
    """One level of Volcano's proportion: queues are {name, weight, request, guarantee,
    capability}; returns each queue's deserved share."""
    guarantees = sum(q["guarantee"] for q in queues)
    real = {q["name"]: min(q["capability"], total - guarantees + q["guarantee"]) for q in queues}
    deserved = {q["name"]: 0.0 for q in queues}
    met: set[str] = set()
    left = total
    for _ in range(64):
        unmet = [q for q in queues if q["name"] not in met]
        wsum = sum(q["weight"] for q in unmet)
        if left <= _EPS or not unmet or wsum <= 0:
            break
        for q in unmet:
            n = q["name"]
            old = deserved[n]
            d = old + left * q["weight"] / wsum
            d = max(min(d, real[n], q["request"]), q["guarantee"])
            deserved[n] = d
            if q["request"] <= d + _EPS or abs(d - old) <= _EPS:
                met.add(n)
        new_left = total - sum(deserved.values())
        if abs(new_left - left) <= _EPS:
            break
        left = new_left
    return deserved


@register("entitlement", "volcano-proportion", source="volcano-sh/volcano pkg/scheduler/plugins/proportion")
class VolcanoProportion(Timeless, Entitlement):
    """Volcano's proportion: deserved shares by weight, within guarantee and capability."""

    def __init__(self) -> None:
        pass

    def compute(self, view) -> dict[str, float]:
        out: dict[str, float] = {}

        def divide(parent: str, total: float) -> None:
            kids = view.tree.children.get(parent, [])
            qs = [{"name": c, "weight": view.tree.nodes[c].weight, "request": view.demand.get(c, 0.0),
                   "guarantee": _gpu(view, c, "guarantee"), "capability": _gpu(view, c, "limit")} for c in kids]
            for c, s in volcano_split(total, qs).items():
                out[c] = s
                divide(c, s)
        divide(ROOT, view.capacity.get("gpu", 0.0))
        return out

    def admits(self, view, leaf: str, job, req: dict[str, float]) -> str:
        used = view.book.usage[leaf].get("gpu", 0.0)
        need = req.get("gpu", 0.0)
        d = view.entitled.get(leaf, 0.0)
        if need > 0 and used + need > d + _EPS:
            return (f"over its deserved share: {leaf} uses {used:g} of {d:g} GPUs deserved now "
                    f"and asks {need:g} more")
        return ""


@register("entitlement", "volcano-capacity", source="volcano-sh/volcano pkg/scheduler/plugins/capacity")
class VolcanoCapacity(Timeless, Entitlement):
    """Volcano's capacity: deserved is configured; admission up to the real capability."""

    def __init__(self) -> None:
        self._kept: tuple | None = None

    def compute(self, view) -> dict[str, float]:
        # the same tables give the same answer: kept, and the same dict returned, which tells
        # the accounts nothing changed (benchmarks/bench_tenancy.py)
        t = view.book._t
        if self._kept is None or self._kept[0] is not t:
            self._kept = (t, {x: _gpu(view, x, "nominal") for x in view.tree.nodes})
        return self._kept[1]

    def admits(self, view, leaf: str, job, req: dict[str, float]) -> str:
        b = view.book
        for r, need in req.items():
            if need <= _EPS:
                continue
            guarantees = sum(n.quotas[r].guaranteed for n in b.tree.nodes.values()
                             if r in n.quotas and not b.tree.children.get(n.name))
            q = b.tree.nodes[leaf].quotas.get(r)
            own = q.guaranteed if q is not None else 0.0
            real = min(b.limit(leaf, r), view.capacity.get(r, INF) - guarantees + own)
            if b.usage[leaf][r] + need > real + _EPS:
                return (f"over its capability: {leaf} uses {b.usage[leaf][r]:g} and asks {need:g} more of "
                        f"at most {real:g} {r}")
        return ""
