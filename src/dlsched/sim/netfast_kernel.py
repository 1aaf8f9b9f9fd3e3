"""The compiled region solve of dlsched.sim.netfast, as plain Python functions: `_update_py` (one
NetShares.update on arrays) and the two steps it calls once per solve, `_solve` (progressive
filling over an indexed heap) and `_violations` (the flows outside the region that must join
it). What each computes, and why the results are the same bit for bit as NetShares', is in
dlsched.sim.netfast's docstring.

A module of its own because it is the part that numba compiles (`compiled`, called by
netfast.available) and the part that is read for its arithmetic, not for its interface: the
array state and the calls into it (FastNetShares) stay in netfast.py. Its speed is measured by
benchmarks/bench_scale.py's Poisson workloads over `v100-1500` (a busy 1,500-node cluster, where
the Python solve was two thirds of a run: docs/decisions/0032).
"""
from __future__ import annotations

import numpy as np

from dlsched.sim.network import REL_TOL, TOL


def compiled():
    """The kernel (`_update_py`) compiled by numba, with its two steps compiled first so that it
    calls them compiled (numba reads a function's globals when it compiles it). Cached on disk
    (`cache=True`); the caller has checked that numba imports."""
    import numba
    # No step calls a helper in a loop: numba counts references to every array a call
    # passes (an atomic add and subtract each), and with helpers called per link and per
    # flow that counting was 40 % of an update's time. The two steps are called once per
    # solve, as functions of their own (LLVM compiles them a little better than one
    # function with both inlined: 3 % on a replay of 56,778 updates).
    step = numba.njit(cache=True, nogil=True)
    global _solve, _violations
    _solve = step(_solve)
    _violations = step(_violations)
    return numba.njit(cache=True, nogil=True)(_update_py)


# -- the kernel (plain Python functions, compiled by `compiled`) ----------------------------------
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
               bhead, bnext, bprev, nlive, whole_min, whole_share):
    """NetShares.update on arrays: remove the flows `rem`, add the flows `add` (links
    add_links[add_off[i]:add_off[i + 1]]), re-share the region they reach. Writes the flows
    whose rate changed into out_slot/out_rate and returns how many; -1 when a link's user list
    is full (nothing changed: the caller grows `users` and calls again). `gen` is the first
    fresh generation for the scratch marks; counters[0] gets the next one; counters[1:4] add up
    the regions' flows, the solves and the re-shares (statistics). bhead/bnext/bprev: the
    bottleneck index (_violations); a flow removed leaves it, one added joins list NEG. nlive:
    the live flows after the update; whole_min, whole_share: network.WHOLE_MIN_FLOWS and
    WHOLE_SHARE (a whole solve; arguments, not globals, which numba would freeze)."""
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
    if nlive >= whole_min and nreg * whole_share >= nlive:
        for f in range(nlinks.shape[0]):      # a whole solve: every live flow
            if nlinks[f] > 0 and in_reg[f] != stamp:
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
