"""The shared links of a simulated cluster: which running jobs use which links, and each one's
max-min fair share, kept up to date as jobs come and go.

A job inside one node crosses no shared link and is never a flow. When flows come, go or move,
only a region around them is solved again, never more than the connected component of the links
they change (flows linked through shared links; max-min shares of disjoint components are
independent):

1. the region starts as the flows on the changed links (or, when those are a tenth or more of
   at least 256 live flows, all of them: a whole solve, WHOLE_SHARE);
2. its max-min shares are solved in what the flows outside it leave of each link (progressive
   filling, dlsched.workload.speed.max_min_shares);
3. the result is checked against the definition of max-min fairness: every flow has a
   bottleneck, a full link on which no flow gets more. Flows outside the region that lost their
   bottleneck (the region took or freed capacity on it), and those that get more than a region
   flow on each of that flow's full links, join the region, and 2 runs again.

The allocation that passes 3 for every flow is the max-min allocation (it is unique), so this is
exact; on a large busy cluster, where one job's links chain most running jobs into one component,
the region stays a few flows where the component is hundreds (benchmarks/RESULTS.md, "scale").

`update` returns only the flows whose rate changed, so that the simulator re-rates just those
jobs.
"""
from __future__ import annotations

import os

from dlsched.workload.speed import max_min_shares


REL_TOL = 1e-12   # rates closer than this (relative) are the same rate
TOL = 1e-9        # a link this close to full is full; a rate this close to the top is the top
# Whole solves: an update whose first region (the flows on the links it changes) holds at least
# 1/WHOLE_SHARE of the live flows, with at least WHOLE_MIN_FLOWS live, solves all of them at once.
# On contended uplinks such a region grows through two or three solves to most flows anyway, and
# one solve of all of them costs a third of that (`python benchmarks/net_replay.py replay`, 8:1:
# 1.35 against 0.52 ms an update; docs/decisions/0062). The shares are the same max-min
# allocation (it is unique) up to rounding, which REL_TOL absorbs; below WHOLE_MIN_FLOWS nothing
# changes, bit for bit.
WHOLE_SHARE = 10
WHOLE_MIN_FLOWS = 256


def net_shares(capacity, *, jit: bool | None = None):
    """The shares' keeper for a cluster with links of `capacity`: the compiled one
    (dlsched.sim.netfast, the same numbers) where numba imports, DLSCHED_JIT is not "0" and the
    cluster has enough links for it to pay; NetShares otherwise. `jit`: force one (tests).
    Chosen at the first update that brings a flow (LazyShares): a run whose jobs never use a
    shared link (a trace without models, such as Philly's) never imports numba (0.3 s)."""
    if jit is None:
        return LazyShares(capacity)
    return _choose(capacity, jit)


class LazyShares:
    """A shares' keeper that is none until the first update: no flows, no shares. The first
    `update` (or any other attribute) makes the real one (net_shares' choice) and hands on."""
    __slots__ = ("_capacity", "_real")
    _NO_FLOWS: dict = {}

    def __init__(self, capacity) -> None:
        self._capacity = capacity
        self._real = None

    @property
    def flows(self) -> dict:
        return self._NO_FLOWS if self._real is None else self._real.flows

    def share(self, flow: str) -> float | None:
        return None if self._real is None else self._real.share(flow)

    def update(self, changes) -> dict:
        if self._real is None:
            self._real = _choose(self._capacity, None)
        return self._real.update(changes)

    def __getattr__(self, name):
        if name.startswith("__") or name in LazyShares.__slots__:
            raise AttributeError(name)
        if self._real is None:
            self._real = _choose(self._capacity, None)
        return getattr(self._real, name)


def _choose(capacity, jit: bool | None):
    if jit is None:
        from dlsched.sim import netfast
        jit = (len(capacity) >= netfast.MIN_LINKS and os.environ.get("DLSCHED_JIT", "1") != "0"
               and netfast.available())
    if jit:
        from dlsched.sim.netfast import FastNetShares
        return FastNetShares(capacity)
    return NetShares(capacity)


class NetShares:
    """Flows (job id -> the links it crosses) and their max-min rates over `capacity`."""

    def __init__(self, capacity) -> None:
        self.capacity = [float(c) for c in capacity]
        self.flows: dict[str, tuple[int, ...]] = {}
        self.users: dict[int, dict[str, None]] = {}   # link -> its flows (an ordered set)
        self.rate: dict[str, float] = {}
        self.bneck: dict[str, int] = {}   # flow -> a link that was its bottleneck when last checked
        self.last_region = 0              # the flows the last update re-shared (its region)

    def share(self, flow: str) -> float | None:
        return self.rate.get(flow)

    def crowd(self, link: int) -> int:
        """The number of flows on `link`."""
        return len(self.users.get(link, ()))

    def update(self, changes: dict[str, tuple[int, ...] | None]) -> dict[str, float]:
        """Apply `changes` (flow -> its links, or None to remove it) and re-share the components
        they touch. Returns {flow: new rate} for the flows whose rate changed (removed flows are
        not in it)."""
        seeds: set[int] = set()
        for f, links in changes.items():
            old = self.flows.get(f)
            if old == links:
                continue
            if old is not None:
                self._remove(f, old)
                seeds.update(old)
            if links:
                self.flows[f] = links
                for link in links:
                    self.users.setdefault(link, {})[f] = None
                seeds.update(links)
        if not seeds:
            return {}
        users, rate = self.users, self.rate
        region = {f for link in seeds for f in users.get(link, ())}
        live = len(self.flows)
        if live >= WHOLE_MIN_FLOWS and len(region) * WHOLE_SHARE >= live:
            region = set(self.flows)          # a whole solve (WHOLE_SHARE)
        while True:
            new, frozen_at = self._solve(region)
            grow = self._violations(region, new, frozen_at)
            if not grow:
                break
            region |= grow
        self.last_region = len(region)
        changed = {}
        for f in sorted(region):
            r = new[f]
            old = rate.get(f)
            # A flow solved again keeps its rate up to rounding: keep the old value then (no
            # re-rate, no new finish event for float noise).
            if old is None or abs(r - old) > REL_TOL * old:
                changed[f] = r
            rate[f] = r if old is None or abs(r - old) > REL_TOL * old else old
        return changed

    def _solve(self, region: set[str]) -> tuple[dict[str, float], dict[str, int]]:
        """Max-min shares of the region's flows in what the flows outside it leave of each link,
        and the link each one froze at."""
        users, flows, rate = self.users, self.flows, self.rate
        residual: dict[int, float] = {}
        for f in region:
            for link in flows[f]:
                if link not in residual:
                    left = self.capacity[link] - sum(rate[g] for g in users[link] if g not in region)
                    residual[link] = left if left > 0.0 else 0.0
        frozen_at: dict[str, int] = {}
        return max_min_shares({f: flows[f] for f in sorted(region)}, residual, frozen_at), frozen_at

    def _violations(self, region: set[str], new: dict[str, float], frozen_at: dict[str, int]) -> set[str]:
        """Flows outside the region that must join it for the region's solution to be the
        max-min allocation of all flows: every flow needs a bottleneck, a full link on which no
        flow gets more. Those outside whose bottleneck the region took or freed, and those that
        get more than a region flow on each of its full links."""
        users, flows, rate, cap = self.users, self.flows, self.rate, self.capacity
        touched = {link for f in region for link in flows[f]}
        state: dict[int, tuple[bool, float]] = {}    # link -> (full, top rate), computed once

        def link_state(link: int) -> tuple[bool, float]:
            st = state.get(link)
            if st is None:
                rates = [new[g] if g in new else rate[g] for g in users[link]]
                st = state[link] = (sum(rates) >= cap[link] * (1.0 - TOL), max(rates))
            return st

        bneck = self.bneck

        def bottlenecked(f: str, r: float, first: int | None) -> bool:
            # the link it was bottlenecked at (or froze at) first: most often still the one
            if first is not None:
                full, most = link_state(first)
                if full and r >= most * (1.0 - TOL):
                    bneck[f] = first
                    return True
            for link in flows[f]:
                if link == first:
                    continue
                full, most = link_state(link)
                if full and r >= most * (1.0 - TOL):
                    bneck[f] = link
                    return True
            return False

        grow: set[str] = set()
        outside = {g for link in touched for g in users[link] if g not in region}
        for g in outside:
            b = bneck.get(g)
            # A bottleneck away from the region's links is as it was: still one.
            if b is not None and b not in touched:
                continue
            if not bottlenecked(g, rate[g], b):
                grow.add(g)
        for f in region:
            r = new[f]
            if not bottlenecked(f, r, frozen_at.get(f)):
                grow.update(g for link in flows[f] for g in users[link] if g not in region and rate[g] > r)
        return grow

    def _remove(self, f: str, links: tuple[int, ...]) -> None:
        del self.flows[f]
        self.rate.pop(f, None)
        self.bneck.pop(f, None)
        for link in links:
            users = self.users[link]
            del users[f]
            if not users:
                del self.users[link]
