"""NetShares compiled: the same region solve as dlsched.sim.network.NetShares, on arrays, in one
numba call per update.

Why: on a busy 1,500-node cluster the region a change reaches is a hundred flows or more, and
the Python region solve (dicts and sets, a heap of tuples) was two thirds of a simulation's time
(docs/decisions/0032). Here the flows, the links' users and the rates are
arrays, and `update` is one compiled call: the same steps, the same results.

Same results, not approximately but bit for bit (tests/unit/test_network_shares.py compares the
two on random add/remove/move sequences: every rate, every reported change, every remembered
bottleneck):
- a link's users are kept in the order they came (NetShares' ordered set), so the residual that
  the flows outside the region leave, `capacity - (r1 + r2 + ...)`, is summed in the same order,
  and so is a link's load in the fairness check;
- progressive filling pops the same (share, link) minimum with the same stale-entry test
  (`share != remaining / count`): the order in which one link's flows freeze does not matter, as
  they all subtract the same share;
- the region starts the same (a whole solve when NetShares' is, network.WHOLE_SHARE) and grows
  by the same rule, the same flows' last bottlenecks are remembered, and a rate
  that moved by less than REL_TOL keeps its old value;
- IEEE double everywhere, no fast-math.

Used where numba imports, `DLSCHED_JIT` is not "0" and the cluster has at least MIN_LINKS
links (`network.net_shares`); NetShares is the fallback and the reference. The kernel is compiled
at its first use and cached on disk by numba (`cache=True`).

Rooms: the kernel itself (the compiled functions, read for their arithmetic) is
dlsched.sim.netfast_kernel; this module holds the arrays it works on and the calls into it
(FastNetShares), and decides whether it is used (`available`).
"""
from __future__ import annotations

import numpy as np

from dlsched.sim import netfast_kernel, network

MIN_LINKS = 64      # below this NetShares is as fast and nothing needs compiling

_kernel = None
_missing = False


def available() -> bool:
    """numba imported and the kernel wrapped (compiled at its first call)."""
    global _kernel, _missing
    if _kernel is None and not _missing:
        try:
            import numba  # noqa: F401
        except ImportError:
            _missing = True
            return False
        _kernel = netfast_kernel.compiled()
    return _kernel is not None


class FastNetShares:
    """dlsched.sim.network.NetShares on arrays: the same interface (`update`, `share`, `flows`,
    `rate`, `bneck`) and the same numbers. Flows are job ids outside, slots (array rows) inside;
    a removed flow's slot is reused by a later flow."""

    def __init__(self, capacity) -> None:
        if not available():
            raise RuntimeError("FastNetShares needs numba")
        self.capacity = np.array([float(c) for c in capacity], dtype=np.float64)
        self.flows: dict[str, tuple[int, ...]] = {}
        self._slot: dict[str, int] = {}
        self._names: list[str | None] = []
        self._free: list[int] = []
        self._gen = 1
        L = len(self.capacity)
        self._users = np.zeros((L, 8), dtype=np.int64)
        self._nusers = np.zeros(L, dtype=np.int64)
        self._lmark = np.zeros(L, dtype=np.int64)
        self._smark = np.zeros(L, dtype=np.int64)
        self._sfull = np.zeros(L, dtype=np.bool_)
        self._smost = np.zeros(L, dtype=np.float64)
        self._remaining = np.zeros(L, dtype=np.float64)
        self._rmark = np.zeros(L, dtype=np.int64)       # resid[link] holds this update's residual
        self._resid = np.zeros(L, dtype=np.float64)
        self._pend = np.zeros(L, dtype=np.int64)        # links whose heap key a pop changed
        self._pflag = np.zeros(L, dtype=np.bool_)
        self._count = np.zeros(L, dtype=np.int64)
        self._reglinks = np.zeros(L, dtype=np.int64)
        self._hs = np.zeros(L, dtype=np.float64)      # the filling's heap: keys, links by position
        self._hl = np.zeros(L, dtype=np.int64)
        self._hpos = np.full(L, -1, dtype=np.int64)   # link -> its heap position, -1: not in it
        self._counters = np.zeros(4, dtype=np.int64)   # next generation; region flows, solves, re-shares
        self._bhead = np.full(L + 1, -1, dtype=np.int64)  # per link (and none: L), its bottlenecked flows
        self.last_region = 0      # the flows the last update re-shared (its region)
        self._F = 0
        self._K = 4
        self._flinks = np.zeros((0, self._K), dtype=np.int64)
        self._grow_flows(256)

    def _grow_flows(self, F: int, K: int | None = None) -> None:
        """Room for F flows of up to K links each (arrays copied into larger ones)."""
        K = self._K if K is None else K
        old = self._F
        flinks = np.zeros((F, K), dtype=np.int64)
        flinks[:old, :self._K] = self._flinks
        self._flinks, self._K = flinks, K

        def grown(name, dtype, fill=0):
            a = np.full(F, fill, dtype=dtype)
            if old:
                a[:old] = getattr(self, name)
            setattr(self, name, a)
        grown("_nlinks", np.int64)
        grown("_rate", np.float64)
        grown("_has_rate", np.bool_)
        grown("_bneck", np.int64, -1)
        grown("_bnext", np.int64, -1)                  # the bottleneck index's lists
        grown("_bprev", np.int64, -1)
        grown("_in_reg", np.int64)
        grown("_fmark", np.int64)
        grown("_omark", np.int64)
        grown("_new", np.float64)
        grown("_frozen_at", np.int64)
        grown("_region", np.int64)
        grown("_grow", np.int64)
        grown("_cand", np.int64)
        grown("_out_slot", np.int64)
        grown("_out_rate", np.float64)
        if F > old:
            self._names.extend([None] * (F - old))
            self._free.extend(range(F - 1, old - 1, -1))   # popped from the end: lowest first
        self._F = F

    def share(self, flow: str) -> float | None:
        s = self._slot.get(flow)
        return None if s is None else float(self._rate[s])

    def crowd(self, link: int) -> int:
        """The number of flows on `link`."""
        return int(self._nusers[link])

    @property
    def rate(self) -> dict[str, float]:
        return {f: float(self._rate[s]) for f, s in self._slot.items()}

    @property
    def bneck(self) -> dict[str, int]:
        return {f: int(self._bneck[s]) for f, s in self._slot.items() if self._bneck[s] >= 0}

    def update(self, changes: dict[str, tuple[int, ...] | None]) -> dict[str, float]:
        """NetShares.update: apply `changes` (flow -> its links, or None to remove it), re-share
        the region they reach; {flow: new rate} for the flows whose rate changed."""
        n = self.update_slots(changes)
        names = self._names
        return dict(zip(map(names.__getitem__, self._out_slot[:n].tolist()), self._out_rate[:n].tolist()))

    def update_slots(self, changes: dict[str, tuple[int, ...] | None]) -> int:
        """update(), with the flows whose rate changed left in arrays: their slots in
        `_out_slot[:n]` and rates in `_out_rate[:n]`; returns n (the compiled re-rate,
        dlsched.sim.fastrate, reads them as they are)."""
        flows, slot, names = self.flows, self._slot, self._names
        rem: list[int] = []
        add: list[int] = []
        off = [0]
        links_all: list[int] = []
        freed: list[int] = []
        k_max = 0
        for f, links in changes.items():
            old = flows.get(f)
            if old == links:
                continue
            if old is not None:
                s = slot.pop(f)
                del flows[f]
                rem.append(s)
                freed.append(s)
            if links:
                if not self._free:
                    self._grow_flows(2 * self._F)
                s = self._free.pop()
                flows[f] = links
                slot[f] = s
                names[s] = f
                add.append(s)
                links_all.extend(links)
                off.append(len(links_all))
                if len(links) > k_max:
                    k_max = len(links)
        if not rem and not add:
            return 0
        if k_max > self._K:
            self._grow_flows(self._F, max(k_max, 2 * self._K))
        rem_a = np.array(rem, dtype=np.int64)
        add_a = np.array(add, dtype=np.int64)
        off_a = np.array(off, dtype=np.int64)
        links_a = np.array(links_all, dtype=np.int64)
        before = int(self._counters[1])
        while True:
            n = _kernel(self.capacity, self._users, self._nusers, self._flinks, self._nlinks, self._rate,
                        self._has_rate, self._bneck, rem_a, add_a, off_a, links_a, self._gen,
                        self._in_reg, self._lmark, self._fmark, self._smark, self._omark, self._sfull,
                        self._smost, self._remaining, self._count, self._new, self._frozen_at,
                        self._region, self._reglinks, self._grow, self._hs, self._hl, self._hpos,
                        self._out_slot, self._out_rate, self._counters, self._rmark, self._resid,
                        self._pend, self._pflag, self._cand, self._bhead, self._bnext, self._bprev,
                        len(flows), network.WHOLE_MIN_FLOWS, network.WHOLE_SHARE)
            self._gen = int(self._counters[0])
            if n >= 0:
                self.last_region = int(self._counters[1]) - before
                break
            users = np.zeros((len(self.capacity), 2 * self._users.shape[1]), dtype=np.int64)
            users[:, :self._users.shape[1]] = self._users
            self._users = users
        for s in freed:
            names[s] = None
        self._free.extend(freed)
        return n
