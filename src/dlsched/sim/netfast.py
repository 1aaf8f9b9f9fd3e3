"""NetShares compiled: the same region solve as dlsched.sim.network.NetShares, on arrays, in one
numba call per update.

Why: on a busy 1,500-node cluster the region a change reaches is a hundred flows or more, and
the Python region solve (dicts and sets, a heap of tuples) was two thirds of a simulation's time
(docs/design-notes.md, "Scale", fifth slice). Here the flows, the links' users and the rates are
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
- the region grows by the same rule, the same flows' last bottlenecks are remembered, and a rate
  that moved by less than REL_TOL keeps its old value;
- IEEE double everywhere, no fast-math.

Used where numba imports, `DLSCHED_JIT` is not "0" and the cluster has at least MIN_LINKS
links (`network.net_shares`); NetShares is the fallback and the reference. The kernel is compiled
at its first use and cached on disk by numba (`cache=True`).
"""
from __future__ import annotations

import numpy as np

from dlsched.sim.network import REL_TOL, TOL

MIN_LINKS = 64      # below this NetShares is as fast and nothing needs compiling

_kernel = None
_missing = False


def available() -> bool:
    """numba imported and the kernel wrapped (compiled at its first call)."""
    global _kernel, _missing
    if _kernel is None and not _missing:
        try:
            import numba
        except ImportError:
            _missing = True
            return False
        # No step calls a helper in a loop: numba counts references to every array a call
        # passes (an atomic add and subtract each), and with helpers called per link and per
        # flow that counting was 40 % of an update's time. The two steps are called once per
        # solve, as functions of their own (LLVM compiles them a little better than one
        # function with both inlined: 3 % on a replay of 56,778 updates).
        step = numba.njit(cache=True, nogil=True)
        global _solve, _violations
        _solve = step(_solve)
        _violations = step(_violations)
        _kernel = numba.njit(cache=True, nogil=True)(_update_py)
    return _kernel is not None


# -- the kernel (plain Python functions, compiled by available()) ---------------------------------
def _solve(cap, users, nusers, flinks, nlinks, rate, in_reg, stamp, region, nreg,
           lmark, lgen, reglinks, remaining, count, new, frozen_at, fmark, hs, hl, hpos, rmark, resid,
           pend, pflag, smark):
    """NetShares._solve + speed.max_min_shares: the region's max-min shares in what the flows
    outside leave of each link. Marks the region's links with lgen (lmark) and lists them in
    reglinks; returns how many. A link's residual is summed once per update (rmark == stamp,
    kept in resid) until a flow on it joins the region (the caller clears its mark): the same
    sum over the same flows in the same order."""
    nl = 0
    for i in range(nreg):
        f = region[i]
        for k in range(nlinks[f]):
            link = flinks[f, k]
            if lmark[link] != lgen:
                lmark[link] = lgen
                reglinks[nl] = link
                nl += 1
                if rmark[link] != stamp:
                    rmark[link] = stamp
                    used = 0.0
                    for j in range(nusers[link]):
                        g = users[link, j]
                        if in_reg[g] != stamp:
                            used += rate[g]
                    left = cap[link] - used
                    resid[link] = left if left > 0.0 else 0.0
                remaining[link] = resid[link]
                count[link] = 0
            count[link] += 1
    # Progressive filling over an indexed heap: one entry per link, keyed (remaining / count,
    # link). It pops the same links in the same order as speed.max_min_shares' heap of stale
    # entries, which pops the least current key (a stale entry fails its equality test). A link
    # whose flows are all frozen (the one popped among them) is keyed +inf and stays: the
    # filling ends when the least key is +inf. The keys a pop changes are written after its
    # flows are frozen (pend), each at one place: the heap is valid at every write, and the
    # next pop sees the same keys as if each had been written at once.
    for i in range(nl):
        pend[i] = reglinks[i]
    npend = nl
    size = 0
    while True:
        for q in range(npend):
            link = pend[q]
            pflag[link] = False
            c = count[link]
            s = remaining[link] / c if c > 0 else np.inf
            i = hpos[link]
            if i < 0:                      # a new entry, at the end
                i = size
                size += 1
            start = i
            while i > 0:                   # up while (s, link) is less than its parent's
                p = (i - 1) >> 1
                if hs[p] < s or (hs[p] == s and hl[p] < link):
                    break
                hs[i] = hs[p]
                hl[i] = hl[p]
                hpos[hl[i]] = i
                i = p
            if i == start:                 # down while a child's is less
                while True:
                    ch = 2 * i + 1
                    if ch >= size:
                        break
                    if ch + 1 < size and (hs[ch + 1] < hs[ch] or (hs[ch + 1] == hs[ch] and hl[ch + 1] < hl[ch])):
                        ch += 1
                    if hs[ch] < s or (hs[ch] == s and hl[ch] < link):
                        hs[i] = hs[ch]
                        hl[i] = hl[ch]
                        hpos[hl[i]] = i
                        i = ch
                    else:
                        break
            hs[i] = s
            hl[i] = link
            hpos[link] = i
        if size == 0 or hs[0] == np.inf:
            break
        share = hs[0]
        link = hl[0]
        pend[0] = link
        pflag[link] = True
        npend = 1
        for j in range(nusers[link]):
            f = users[link, j]
            if in_reg[f] != stamp or fmark[f] == lgen:
                continue
            fmark[f] = lgen
            # a value that moved since the last solve: its links' states (smark) are stale
            moved = new[f] != share
            new[f] = share
            frozen_at[f] = link
            for k in range(nlinks[f]):
                other = flinks[f, k]
                if moved:
                    smark[other] = 0
                left = remaining[other] - share
                remaining[other] = left if left > 0.0 else 0.0
                count[other] -= 1
                if not pflag[other]:
                    pflag[other] = True
                    pend[npend] = other
                    npend += 1
        count[link] = 0
    for i in range(nl):
        hpos[reglinks[i]] = -1
    return nl


def _violations(cap, users, nusers, flinks, nlinks, rate, bneck, in_reg, stamp, region, nreg,
                lmark, lgen, reglinks, nl, new, frozen_at, smark, sgen, sfull, smost,
                omark, grow, cand, bhead, bnext, bprev):
    """NetShares._violations: the flows outside the region that must join it (into grow, marked
    with sgen in omark); returns how many. The flows to check are listed first (cand: those
    outside whose last bottleneck is one of the region's links, or who have none and cross
    one, then the region's), then checked in one loop: the links' states depend on the rates
    alone, which the check does not change, so the order of the checks changes nothing. Nor
    does the order of the flows that join: the solve pops links by (share, link), and a rate
    comes out keyed by its flow.

    The flows outside come from the bottleneck index (bhead/bnext/bprev: per link, the flows
    whose last bottleneck it is; list NEG = bhead's last entry, the flows without one), not
    from the links' users: a flow whose bottleneck is away from the region is as it was, still
    bottlenecked, and on a busy cluster nine users of a region's link in ten are such flows
    (an uplink has hundreds)."""
    NEG = bhead.shape[0] - 1
    nc = 0
    for i in range(nl):
        g = bhead[reglinks[i]]
        while g >= 0:
            if in_reg[g] != stamp:
                cand[nc] = g
                nc += 1
            g = bnext[g]
    g = bhead[NEG]
    while g >= 0:
        if in_reg[g] != stamp:
            for k in range(nlinks[g]):
                if lmark[flinks[g, k]] == lgen:
                    cand[nc] = g
                    nc += 1
                    break
        g = bnext[g]
    for i in range(nreg):
        cand[nc] = region[i]
        nc += 1
    ng = 0
    for c in range(nc):
        f = cand[c]
        inside = in_reg[f] == stamp
        r = new[f] if inside else rate[f]
        # its first candidate: the link it froze at (region) or was last bottlenecked at
        first = frozen_at[f] if inside else bneck[f]
        # Has f a bottleneck: a full link on which no flow gets more?
        found = False
        for k in range(-1, nlinks[f]):
            link = first if k < 0 else flinks[f, k]
            if link < 0 or (k >= 0 and link == first):
                continue
            if smark[link] != stamp:       # the link's (full, top rate), when stale
                total = 0.0
                most = -np.inf
                for j in range(nusers[link]):
                    g = users[link, j]
                    rg = new[g] if in_reg[g] == stamp else rate[g]
                    total += rg
                    if rg > most:
                        most = rg
                smark[link] = stamp
                sfull[link] = total >= cap[link] * (1.0 - TOL)
                smost[link] = most
            if sfull[link] and r >= smost[link] * (1.0 - TOL):
                old = bneck[f]
                if old != link:            # f moves from old's list (NEG: none) to link's
                    p = bprev[f]
                    q = bnext[f]
                    if p >= 0:
                        bnext[p] = q
                    else:
                        bhead[old if old >= 0 else NEG] = q
                    if q >= 0:
                        bprev[q] = p
                    q = bhead[link]
                    bnext[f] = q
                    bprev[f] = -1
                    if q >= 0:
                        bprev[q] = f
                    bhead[link] = f
                    bneck[f] = link
                found = True
                break
        if found:
            continue
        if not inside:
            omark[f] = sgen
            grow[ng] = f
            ng += 1
            continue
        # a region flow without one: those outside that get more on its links join
        for k in range(nlinks[f]):
            link = flinks[f, k]
            for j in range(nusers[link]):
                g = users[link, j]
                if in_reg[g] != stamp and omark[g] != sgen and rate[g] > r:
                    omark[g] = sgen
                    grow[ng] = g
                    ng += 1
    return ng


def _update_py(cap, users, nusers, flinks, nlinks, rate, has_rate, bneck, rem, add, add_off, add_links,
               gen, in_reg, lmark, fmark, smark, omark, sfull, smost, remaining, count, new, frozen_at,
               region, reglinks, grow, hs, hl, hpos, out_slot, out_rate, counters, rmark, resid, pend, pflag, cand,
               bhead, bnext, bprev):
    """NetShares.update on arrays: remove the flows `rem`, add the flows `add` (links
    add_links[add_off[i]:add_off[i + 1]]), re-share the region they reach. Writes the flows
    whose rate changed into out_slot/out_rate and returns how many; -1 when a link's user list
    is full (nothing changed: the caller grows `users` and calls again). `gen` is the first
    fresh generation for the scratch marks; counters[0] gets the next one; counters[1:4] add up
    the regions' flows, the solves and the re-shares (statistics). bhead/bnext/bprev: the
    bottleneck index (_violations); a flow removed leaves it, one added joins list NEG."""
    U = users.shape[1]
    NEG = bhead.shape[0] - 1
    # room first, so that nothing changes unless everything fits
    gen0 = gen
    for i in range(add.shape[0]):
        for k in range(add_off[i], add_off[i + 1]):
            link = add_links[k]
            if lmark[link] != gen0:
                lmark[link] = gen0
                count[link] = nusers[link]
            count[link] += 1
            if count[link] > U:
                counters[0] = gen0 + 1
                return -1
    seed_gen = gen0 + 1
    nseed = 0
    for i in range(rem.shape[0]):
        f = rem[i]
        for k in range(nlinks[f]):
            link = flinks[f, k]
            if lmark[link] != seed_gen:
                lmark[link] = seed_gen
                reglinks[nseed] = link
                nseed += 1
            n = nusers[link]
            j = 0
            while users[link, j] != f:
                j += 1
            for m in range(j, n - 1):
                users[link, m] = users[link, m + 1]
            nusers[link] = n - 1
        nlinks[f] = 0
        has_rate[f] = False
        p = bprev[f]                       # out of the bottleneck index
        q = bnext[f]
        if p >= 0:
            bnext[p] = q
        else:
            b = bneck[f]
            bhead[b if b >= 0 else NEG] = q
        if q >= 0:
            bprev[q] = p
        bnext[f] = -1
        bprev[f] = -1
        bneck[f] = -1
    for i in range(add.shape[0]):
        f = add[i]
        nlinks[f] = add_off[i + 1] - add_off[i]
        for k in range(add_off[i], add_off[i + 1]):
            link = add_links[k]
            flinks[f, k - add_off[i]] = link
            users[link, nusers[link]] = f
            nusers[link] += 1
            if lmark[link] != seed_gen:
                lmark[link] = seed_gen
                reglinks[nseed] = link
                nseed += 1
        has_rate[f] = False
        bneck[f] = -1
        q = bhead[NEG]                     # into the index's list of flows without a bottleneck
        bnext[f] = q
        bprev[f] = -1
        if q >= 0:
            bprev[q] = f
        bhead[NEG] = f
    stamp = seed_gen     # in_reg[f] == stamp: f is in this update's region
    gen = seed_gen + 1
    if nseed == 0:
        counters[0] = gen
        return 0
    nreg = 0
    for i in range(nseed):
        link = reglinks[i]
        for j in range(nusers[link]):
            f = users[link, j]
            if in_reg[f] != stamp:
                in_reg[f] = stamp
                region[nreg] = f
                nreg += 1
    solves = 0
    while True:
        solves += 1
        lgen = gen
        gen += 1
        nl = _solve(cap, users, nusers, flinks, nlinks, rate, in_reg, stamp, region, nreg,
                    lmark, lgen, reglinks, remaining, count, new, frozen_at, fmark, hs, hl, hpos, rmark, resid,
                    pend, pflag, smark)
        sgen = gen
        gen += 1
        ng = _violations(cap, users, nusers, flinks, nlinks, rate, bneck, in_reg, stamp, region, nreg,
                         lmark, lgen, reglinks, nl, new, frozen_at, smark, sgen, sfull, smost, omark, grow, cand,
                         bhead, bnext, bprev)
        if ng == 0:
            break
        for i in range(ng):
            g = grow[i]
            in_reg[g] = stamp
            new[g] = rate[g]                 # its value in the link states so far
            region[nreg] = g
            nreg += 1
            for k in range(nlinks[g]):
                rmark[flinks[g, k]] = 0      # its links' residuals lose g: summed again
    nout = 0
    for i in range(nreg):
        f = region[i]
        r = new[f]
        if not has_rate[f]:
            rate[f] = r
            has_rate[f] = True
            out_slot[nout] = f
            out_rate[nout] = r
            nout += 1
        else:
            old = rate[f]
            # A flow solved again keeps its rate up to rounding: keep the old value then (no
            # re-rate, no new finish event for float noise).
            if abs(r - old) > REL_TOL * old:
                rate[f] = r
                out_slot[nout] = f
                out_rate[nout] = r
                nout += 1
    counters[0] = gen
    counters[1] += nreg
    counters[2] += solves
    counters[3] += 1
    return nout


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
        while True:
            n = _kernel(self.capacity, self._users, self._nusers, self._flinks, self._nlinks, self._rate,
                        self._has_rate, self._bneck, rem_a, add_a, off_a, links_a, self._gen,
                        self._in_reg, self._lmark, self._fmark, self._smark, self._omark, self._sfull,
                        self._smost, self._remaining, self._count, self._new, self._frozen_at,
                        self._region, self._reglinks, self._grow, self._hs, self._hl, self._hpos,
                        self._out_slot, self._out_rate, self._counters, self._rmark, self._resid,
                        self._pend, self._pflag, self._cand, self._bhead, self._bnext, self._bprev)
            self._gen = int(self._counters[0])
            if n >= 0:
                break
            users = np.zeros((len(self.capacity), 2 * self._users.shape[1]), dtype=np.int64)
            users[:, :self._users.shape[1]] = self._users
            self._users = users
        for s in freed:
            names[s] = None
        self._free.extend(freed)
        return n
