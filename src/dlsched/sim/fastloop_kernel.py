"""The kernel of dlsched.sim.fastloop: `_loop_py`, Scheduler._run over SimBackend.poll/apply for a
run of the FIFO family, written over arrays for numba (fastloop.available compiles it), and the
codes of the records and job states it writes.

A module of its own because it is read line by line against the Python loop it mirrors; what
it applies to, its inputs and its records are dlsched.sim.fastloop's, whose docstring says why
the results are the same exactly. The speed it buys: RESULTS.md, `fifo`, `policies`, `tenancy`.
"""
from __future__ import annotations

import numpy as np

from dlsched.core.types import GPU
from dlsched.scheduler import fastplace as _fp      # its compiled placement, for scored profiles
from dlsched.sim import fastloop_drf as _fd         # DRF's order
from dlsched.sim import fastloop_events as _fe      # the finish heap
from dlsched.sim import fastloop_gandiva as _fg     # Gandiva's getNodes
from dlsched.sim import fastloop_liquid as _flq     # Liquid's best fit
from dlsched.sim import fastloop_optimus as _fo     # Optimus's allocation and placement
from dlsched.sim import fastloop_preempt as _fpr    # preempt's gate
from dlsched.sim import fastloop_place as _fl       # co-location's placement
from dlsched.sim import fastloop_quota as _fq       # the admission walk and accounts under quotas

# the kernel's records (op codes)
ARRIVE, FINISH, ROUND, LAUNCH, RATE = range(5)
# job states (JobState's, by number)
PENDING, PARTIAL, RUNNING, DONE, REJECTED = range(5)


def _loop_py(arr_order, arr_t, keyrank, idrank, rejected, work, ntask, toff, tdem, tgpu, dem, thr_n, thr_dim,
             thr_val, want, node_type, node_gpus, free, gload, gang, blocking, kinds, weights, ra_w, ra_most,
             ra_res, inv, tmask, gused, coloc, dyn, juser, capv, gand, gsz, gval, gover, gmax, gact, round_s, quiet, acts, pgate,
             lqf, lqi, lqc, jcomm, lqb, sub, evr, tthr, opt, tq, trank, tg, tnom, tcap, tstrict,
             op, op_t, op_j, op_a, op_b, pl_task, pl_node, pl_goff, gbuf, tl_f, tl_n, jf, ji,
             r_t, r_dem, r_nq, r_npl, r_h, r_flag, w_dt, w_h, w_r):
    """Scheduler._run over SimBackend.poll/apply for the jobs and cluster given as arrays (see
    `run` for each). Writes the records (op*: one per arrival, finish, round, launch and rate
    change, in the order the Python loop writes them), the placements (pl*, gbuf: the GPU ids),
    the timeline samples (tl_f: time, allocated, effective, partial; tl_n: running, queued), and
    per job jf (first start, finish, remaining, gpu_s, first progress, attained GPU-s) and ji
    (state, stats row). Returns (records, samples, now, effective GPU-s, effective GPUs, its
    time, rounds, jobs left unfinished, the accounts' rows, the time of their last, rounds skipped).

    A scored profile's placement (kinds > 0) is scheduler/fastplace's, called here (co-location's
    through dlsched.sim.fastloop_place; Liquid's, lqf, is dlsched.sim.fastloop_liquid's, whose batch
    strategy, lqb, runs its genetic algorithm in Python); DRF's order (dyn) is dlsched.sim.fastloop_drf's;
    Gandiva's getNodes (gand: each job's size gsz, as a column of the affinity, and gval) is
    dlsched.sim.fastloop_gandiva's, whose OVER ends the run (aborted: the Python loop's), as
    do the `gandiva` profile's actions (gact) where they could act, `preempt` (pgate) where its
    gate opens (fastloop_preempt) and Optimus's allocation (opt) where it would suspend. With round_s, the periodic tick as
    Scheduler._run arms it, its round skipped where quiet (every component timeless); acts: the
    profile has actions or placers (a round even with nobody waiting).

    Under quotas (L = len(tnom) leaves > 0; dlsched.sim.fastloop_tenancy says where): each job's
    leaf tq, rank in Kueue's order of heads trank (its lanes keep the profile's order) and GPUs
    tg, each leaf's nominal tnom and limit, borrowing and lending limits tcap. A round is then
    Tenancy.admit's walk (the head of least Kueue key: within nominal first, then the queue's
    order; admitted while its leaf stays within its cap; a refused head blocks its leaf where
    tstrict) and Placing._place_per_queue over the admitted; per round (r_*: time, demand,
    jobs refused, admitted but not placed, the accounts' held GPUs, the idle flag) and per
    interval of Accounts.advance (w_*: length, held GPUs, the round in force) what
    Accounts.round and Accounts.advance keep, for dlsched.sim.fastloop_tenancy to sum."""
    n = arr_order.shape[0]
    inf, nan = np.inf, np.nan
    nodes, nres = free.shape
    # per job
    nplaced = np.zeros(n, np.int64)
    hold = np.zeros(n, np.float64)
    since = np.zeros(n, np.float64)
    gpu_s = np.zeros(n, np.float64)
    last_t = np.zeros(n, np.float64)
    rem = np.zeros(n, np.float64)
    rate = np.zeros(n, np.float64)
    eff_gpus = np.zeros(n, np.float64)
    svc = np.zeros(n, np.float64)
    pcount = np.zeros(n, np.float64)
    state = np.zeros(n, np.int64)
    tk_pl = np.zeros(tdem.shape[0], np.int64)      # each task's placement record
    for j in range(n):
        jf[j, 0] = nan
        jf[j, 1] = nan
        jf[j, 4] = nan
        jf[j, 5] = 0.0
        ji[j, 1] = -1
    # the finish heap: (time, sequence number, job)
    ht = np.empty(n, np.float64)
    hs = np.empty(n, np.int64)
    hj = np.empty(n, np.int64)
    hn = 0
    # the queue, in key order
    q = np.empty(n, np.int64)
    qn = 0
    launched = np.empty(n, np.int64)
    lstart = np.empty(n, np.int64)
    lcount = np.empty(n, np.int64)
    touched = np.empty(n, np.int64)
    need = np.empty(nres, np.float64)
    have = np.empty(nres, np.float64)
    now = 0.0
    ai = 0
    seq = 0
    eff_gpu_s = 0.0
    effective = 0.0
    eff_t = 0.0
    psum = 0.0
    busy = 0
    nrun = 0
    nop = 0
    npl = 0
    ng = 0
    ntl = 0
    nrows = 0
    nrounds = 0
    lq = lqf.shape[0] > 0                      # Liquid's best fit (fastloop_liquid)
    scored = kinds.shape[0] > 0 or gand or lq or opt      # a scored profile's placement (else first fit)
    lon, lrack = np.zeros(nodes if lq else 0, np.int64), np.zeros(lqi[:, 0].max() + 1 if lq else 0, np.int64)
    ldom = np.zeros(lqi[:, 1].max() + 1 if lq else 0, np.int64)     # (its partners' counters)
    bjobs, bnode = np.empty(n if lqb.shape[0] else 0, np.int64), np.empty(tdem.shape[0] if lqb.shape[0] else 0, np.int64)
    aff = np.zeros((nodes, gsz.max() + 1 if gand and n > 0 else 0), np.int64)    # Gandiva's affinity
    njobs = np.zeros(nodes, np.int64)
    mt = 1
    for j in range(n):
        mt = max(mt, ntask[j])
    dbuf = np.empty((mt, nres), np.float64)
    outn = np.empty(mt, np.int64)
    outg = np.empty((mt, gload.shape[1]), np.int64)
    cmask = np.empty(nodes, np.bool_)
    slots = np.empty(gload.shape[1], np.bool_)
    # DRF's order (dyn): each user's holding and share, the round's users and their candidates
    NU = juser.max() + 1 if dyn and n > 0 else 0
    uused = np.zeros((NU, nres), np.float64)
    share = np.zeros(NU, np.float64)
    ucnt = np.zeros(NU, np.int64)
    uoff = np.zeros(NU, np.int64)
    uhead = np.zeros(NU, np.int64)
    users = np.empty(NU, np.int64)
    ubuf = np.empty(n if dyn else 0, np.int64)
    qs = np.empty(n if dyn else 0, np.int64)
    ks = np.empty(mt, np.int64)
    # under quotas: per leaf the holders' requests, the GPUs held, the accounts' held GPUs, the
    # walk's usage, its lanes (count, offset, head), refused, decided and asked; per job whether
    # it holds and the round it was decided (or admitted) in
    L = tnom.shape[0]
    tused = np.zeros(L, np.float64)
    theld = np.zeros(L, np.float64)
    acc_h = np.zeros(L, np.float64)
    tw = np.zeros(L, np.float64)
    asked = np.zeros(L, np.float64)
    lcnt = np.zeros(L, np.int64)
    loff = np.zeros(L, np.int64)
    lhead = np.zeros(L, np.int64)
    nref = np.zeros(L, np.int64)
    ndec = np.zeros(L, np.int64)
    blk = np.zeros(L, np.bool_)
    holder = np.zeros(n if L > 0 else 0, np.bool_)
    decr = np.full(n if L > 0 else 0, -1, np.int64)
    lbuf = np.empty(n if L > 0 else 0, np.int64)
    adm = np.empty(n if L > 0 else 0, np.int64)
    nw = 0
    cur_r = -1
    t_last = -1.0
    t_set = False
    aborted = False
    tick = inf                         # the periodic round's tick pending (Scheduler._next_tick)
    qsince = False                     # Scheduler._quiet_since is set: the last round decided nothing
    skipped = 0
    capn = free.copy()                 # each node's capacity (the run starts with every node free)
    srun = np.zeros(aff.shape[1], np.int64)     # (gact: jobs of each size placed and not finished)
    rl = np.empty(n, np.int64)         # the running jobs (rpos: each one's place there), for
    rpos = np.empty(n, np.int64)       # the quiet time of Tiresias's order (tthr: its thresholds)
    rs = np.empty(n if opt else 0, np.int64)      # (opt: the running jobs in arrival order, nrs)
    nrl, nrs = 0, 0
    qt = inf
    dirty = False
    while hn > 0 or ai < n or tick < inf:
        if max(nrounds, ntl) >= tl_f.shape[0]:     # a batch adds a round and a sample at most: past
            aborted = True                   # fastloop_events.rounds (never: checked, not assumed), Python's
            break
        tf = ht[0] if hn > 0 else inf
        ta = arr_t[arr_order[ai]] if ai < n else inf
        t = min(tf, ta, tick)
        if t > now:
            now = t
        fin = False
        ticked = False
        # -- finishes at now (SimBackend._handle Finish, then Scheduler.handle JobFinish)
        while hn > 0 and ht[0] <= now:
            j = hj[0]
            hn = _fe.pop(ht, hs, hj, hn)
            dt = now - last_t[j]             # _advance
            if dt > 0 and rate[j] > 0:
                done = rate[j] * dt
                if rem[j] < done:
                    done = rem[j]
                rem[j] -= done
            last_t[j] = now
            if eff_gpus[j] != 0.0:           # _set_rate(0): _add_effective
                eff_gpu_s += effective * (now - eff_t)
                eff_t = now
                effective += 0.0 - eff_gpus[j]
                eff_gpus[j] = 0.0
            rate[j] = 0.0
            busy -= _fe.give(j, toff, ntask, tk_pl, pl_node, pl_goff, tdem, tgpu, dem, gbuf, free, gload)
            if opt:                                  # (out of Optimus's running jobs)
                nrs = _fe.dequeue(rs, nrs, keyrank, j)
            if gand:                                 # GandivaPlace.observe: its size leaves the nodes
                _fg.hold(aff, njobs, srun, gsz[j], pl_node, tk_pl, toff[j], ntask[j], -1)
            gpu_s[j] += hold[j] * (now - since[j])
            since[j] = now
            if dyn:                                  # DrfOrder: the user holds less
                for k in range(toff[j], toff[j] + ntask[j]):
                    ks[k - toff[j]] = k
                _fd.charge(juser[j], -1.0, ks, ntask[j], tdem, dem, uused, share, capv)
            if L > 0 and holder[j]:                  # Tenancy._update: it holds nothing now
                tused[tq[j]] -= tg[j]
                theld[tq[j]] -= hold[j]
                holder[j] = False
            fin = True
            jf[j, 5] += (now - svc[j]) * hold[j]     # Scheduler._settle_service
            hold[j] = 0.0
            state[j] = DONE
            jf[j, 1] = now
            nrun -= 1
            nrl -= 1                                 # (out of the running list)
            rl[rpos[j]] = rl[nrl]
            rpos[rl[nrl]] = rpos[j]
            ji[j, 1] = nrows
            nrows += 1
            op[nop], op_t[nop], op_j[nop] = FINISH, now, j
            nop += 1
            dirty = True
            qsince = False
        # -- arrivals at now (SimBackend._handle Arrive, then Scheduler._on_arrival)
        while ai < n and arr_t[arr_order[ai]] <= now:
            j = arr_order[ai]
            ai += 1
            last_t[j] = now
            rem[j] = work[j]
            op[nop], op_t[nop], op_j[nop] = ARRIVE, now, j
            nop += 1
            qsince = False
            if rejected[j]:
                state[j] = REJECTED
                continue
            qn = _fe.enqueue(q, qn, keyrank, j)      # bisect.insort by key
            dirty = True
        if tick <= now:                      # the periodic tick (Scheduler.handle RoundTick)
            tick = inf
            dirty = True
            ticked = True
        rnd = evr or ticked or (round_s > 0 and now % round_s == 0)    # (else rounds wait for a tick)
        # -- Tenancy.observe: the accounts integrate up to now where what is held changed
        if L > 0 and (fin or not t_set):
            nw = _fq.interval(now, t_last, t_set, acc_h, cur_r, w_dt, w_h, w_r, nw)
            t_set = True
            t_last = now
            acc_h[:] = theld
        # -- the round (Scheduler.round: each waiting job in order, its tasks by first fit)
        if rnd and dirty and quiet and qsince and (qn > 0 or acts) and now < qt:    # (Scheduler._is_quiet)
            skipped += 1
        elif rnd and dirty and (qn > 0 or acts):     # (with actions or placers: even with nobody waiting)
            op[nop], op_t[nop], op_a[nop] = ROUND, now, qn
            nop += 1
            nrounds += 1
            nl = 0
            na = qn
            nu = 0
            if dyn:                          # the queue in DRF's order at the round's start
                _fd.order(q, qn, juser, share, qs)
            if L > 0:                        # Tenancy.admit: the lanes, then the walk
                na = _fq.walk(qs if dyn else q, qn, tq, trank, tg, tnom, tcap, tstrict, tused, tw, asked, lcnt,
                              loff, lhead, nref, ndec, blk, lbuf, adm)
                if na < 0:                   # victims it would take: the Python loop's
                    aborted = True
                    break
                op_a[nop - 1] = na
            if dyn:                          # progressive filling over the admitted (all: no quotas)
                for qi in range(na if L > 0 else 0):
                    decr[adm[qi]] = -2 - nrounds          # (marked as this round's admitted)
                nu = _fd.lanes(q, qn, decr, -2 - nrounds, L == 0, juser, ucnt, uoff, uhead, ubuf, users)
            if opt:                          # Optimus's allocation: the waiting jobs it grants
                na = _fo.grant(free, rs, nrs, q if L == 0 else adm, na, keyrank, toff, ntask, tdem, dem, touched,
                               need, have)
                if na < 0:
                    aborted = True
                    break
            if pgate and _fpr.need_exceeds(q if L == 0 else adm, na, toff, ntask, nplaced, tgpu, free):
                aborted = True               # preempt would walk for victims: Python's
                break
            for qi in range(na if gact else 0):      # GandivaMigrate would defragment: Python's
                j = q[qi] if L == 0 else adm[qi]
                w = want[j]
                if _fg.defrag(free, capn, tmask[0 if w == -1 else (w + 1 if w >= 0 else tmask.shape[0] - 1)],
                              dem[tdem[toff[j]]], ntask[j], gval[j]):
                    aborted = True
            if aborted:
                break
            mb = _flq.batch(lqb, sub, q if L == 0 else adm, na, now, free, bjobs, bnode)   # Liquid's GA, if fast
            if mb > 0:
                npl, ng, nl = _flq.commit(mb, bjobs, bnode, toff, ntask, tdem, dem, tgpu, free, gload, node_gpus, slots,
                                          outg, pl_task, pl_node, pl_goff, gbuf, tk_pl, npl, ng, launched, lstart,
                                          lcount, nl, nplaced)
            for qi in range(na):
                j = (_fd.pick(users, nu, ucnt, uoff, uhead, ubuf, share, keyrank) if dyn
                     else touched[qi] if opt else q[qi] if L == 0 else adm[qi])
                if L > 0 and blk[tq[j]]:
                    continue
                first = toff[j] + nplaced[j]
                end = toff[j] + ntask[j]
                ok = True
                if gang and end - first > 1 and not gand:     # all or nothing: the free total first
                    ok = not _fe.short(first, end, tdem, dem, free, need, have)
                s0, g0 = npl, ng
                placed = 0
                if ok:
                    m = 0
                    if scored:                       # Placing.place through scheduler/fastplace
                        for k in range(first, end):
                            dbuf[k - first, :] = dem[tdem[k]]
                        w = want[j]
                        row = tmask[0 if w == -1 else (w + 1 if w >= 0 else tmask.shape[0] - 1)]
                        if gand:                     # Gandiva's getNodes (fastloop_gandiva)
                            m = _fg.place(free, gload, node_gpus, row, aff, njobs, gsz[j], gval[j], dbuf[0],
                                          end - first, tgpu[first], gover, gmax, outn, outg, slots)
                            if m < 0:
                                aborted = True
                                break
                        elif lq:
                            m = _flq.place(free, capn, row, tdem, first, end - first, dem, thr_n, thr_dim, thr_val, lqf,
                                           lqi, lqc, jcomm[j], gload, node_gpus, outn, outg, slots, lon, lrack, ldom)
                        elif opt:
                            m = _fo.place(free, gload, node_gpus, dbuf[0], end - first, tgpu[first],
                                          thr_dim[tdem[first]], thr_n[tdem[first]], outn, outg, slots)
                        elif coloc:                  # every task on one node (fastloop_place)
                            m = _fl.colocate(free, row, inv, dbuf, end - first, kinds, weights, ra_w, ra_most,
                                             ra_res, gload, gused, node_gpus, outn, outg, cmask, slots)
                        else:
                            m = _fp._kernel(free, row, inv, dbuf[:end - first], kinds, weights, ra_w, ra_most,
                                            ra_res, gload, gused, False, node_gpus, outn, outg)
                    for k in range(first, end):
                        u = tdem[k]
                        w = want[j]
                        nd = -1
                        if scored:
                            if k - first >= m:
                                ok = False
                                break
                            nd = outn[k - first]
                        for cand in range(nodes if not scored else 0):
                            if w != -1 and node_type[cand] != w:
                                continue
                            fits = True
                            for x in range(thr_n[u]):
                                if not free[cand, thr_dim[u, x]] >= thr_val[u, x]:
                                    fits = False
                                    break
                            if fits:
                                nd = cand
                                break
                        if nd < 0:
                            ok = False
                            break
                        for r in range(nres if not scored else 0):    # Transaction.reserve
                            free[nd, r] -= dem[u, r]
                        pl_task[npl] = k - toff[j]
                        pl_node[npl] = nd
                        pl_goff[npl] = ng
                        kk = tgpu[k]
                        if kk > 0 and scored:        # (reserved and GPUs taken by fastplace)
                            for x in range(kk):
                                gbuf[ng + x] = outg[k - first, x]
                            ng += kk
                        elif kk > 0:                 # pick_gpus: least loaded, lowest index first
                            _fp._take_gpus(nd, float(kk), gload, gused, False, node_gpus, slots, outg[0])
                            gbuf[ng:ng + kk] = outg[0, :kk]
                            ng += kk
                        tk_pl[k] = npl
                        npl += 1
                        placed += 1
                have_n = nplaced[j] + placed
                if gang and have_n < ntask[j]:       # Transaction.discard
                    for p in range(s0, npl):
                        k = toff[j] + pl_task[p]
                        nd = pl_node[p]
                        for r in range(nres):
                            free[nd, r] += dem[tdem[k], r]
                        for x in range(pl_goff[p], pl_goff[p] + tgpu[k]):
                            gload[nd, gbuf[x]] -= 1
                    npl, ng = s0, g0
                    ok = False
                else:
                    if placed > 0:
                        launched[nl], lstart[nl], lcount[nl] = j, s0, placed
                        nl += 1
                        if dyn:                      # DrfOrder._fold_decisions: it holds more
                            for p in range(s0, npl):
                                ks[p - s0] = toff[j] + pl_task[p]
                            _fd.charge(juser[j], 1.0, ks, npl - s0, tdem, dem, uused, share, capv)
                        nplaced[j] = have_n
                        if gand:                     # _NodeView.add_job: its size on its nodes
                            _fg.hold(aff, njobs, srun, gsz[j], pl_node, tk_pl, toff[j], ntask[j], 1)
                    if have_n < ntask[j]:
                        ok = False
                if not ok and L == 0 and blocking:
                    break
                if not ok and L > 0 and tstrict and not gand:    # (GandivaPlace tries every job)
                    blk[tq[j]] = True
                if not ok and gact and srun[gsz[j]] > 0:        # GandivaTimeslice may ring it: Python's
                    aborted = True
                    break
            if aborted:
                break
            for i in range(nu):
                ucnt[users[i]] = 0
            if L > 0:                        # Accounts.round, then its advance
                r = nrounds - 1
                _fq.account(r, now, nl, launched, tq, tg, tnom, tused, tw, asked, lcnt, loff, nref, ndec, lbuf, decr,
                            acc_h, r_t, r_dem, r_nq, r_npl, r_h, r_flag)
                nw = _fq.interval(now, t_last, True, acc_h, cur_r, w_dt, w_h, w_r, nw)
                t_last = now
                cur_r = r
            # -- SimBackend.apply: each launch's _take, then _refresh
            for li in range(nl):
                j = launched[li]
                op[nop], op_t[nop], op_j[nop], op_a[nop], op_b[nop] = LAUNCH, now, j, lstart[li], lcount[li]
                nop += 1
                add = 0.0
                for p in range(lstart[li], lstart[li] + lcount[li]):
                    k = toff[j] + pl_task[p]
                    busy += tgpu[k]
                    add += dem[tdem[k], GPU]
                gpu_s[j] += hold[j] * (now - since[j])
                since[j] = now
                hold[j] += add
                if L > 0:                            # Tenancy._update (observe after the apply)
                    theld[tq[j]] += add
                    if not holder[j]:
                        tused[tq[j]] += tg[j]
                        holder[j] = True
            if L > 0 and nl > 0:
                acc_h[:] = theld
            _fe.by_id(launched, nl, idrank, touched)     # touched jobs in job-id order
            for li in range(nl):
                j = touched[li]
                if nplaced[j] == ntask[j]:           # whole: rate 1 (_set_rate)
                    c = hold[j]
                    if c != eff_gpus[j]:
                        eff_gpu_s += effective * (now - eff_t)
                        eff_t = now
                        effective += c - eff_gpus[j]
                        eff_gpus[j] = c
                    last_t[j] = now
                    rate[j] = 1.0
                    if jf[j, 4] != jf[j, 4]:
                        jf[j, 4] = now
                    ft = now + max(rem[j], 0.0) / 1.0
                    hn = _fe.push(ht, hs, hj, hn, ft, seq + li, j)
                    op[nop], op_t[nop], op_j[nop] = RATE, now, j
                    nop += 1
                    psum -= pcount[j]
                    pcount[j] = 0.0
                else:                                # a partial hold
                    psum += hold[j] - pcount[j]
                    pcount[j] = hold[j]
            seq += nl
            # -- Scheduler._after_apply
            for li in range(nl):
                j = launched[li]
                if nplaced[j] == ntask[j]:
                    if jf[j, 0] != jf[j, 0]:
                        jf[j, 0] = now
                    state[j] = RUNNING
                    nrun += 1
                    rl[nrl], rpos[j] = j, nrl
                    nrl += 1
                    if opt:
                        nrs = _fe.enqueue(rs, nrs, keyrank, j)
                    svc[j] = now
                    qn = _fe.dequeue(q, qn, keyrank, j)      # out of the queue
                else:
                    state[j] = PARTIAL
            qsince = nl == 0
            qt = _fpr.quiet(rl, nrl, jf, svc, hold, tthr, now) if qsince else inf      # (_quiet_until)
        if rnd:
            dirty = False
        if round_s > 0 and tick == inf and (qn > 0 or nrun > 0) and (nrun > 0 or not (quiet and qsince)):
            tick = now + round_s if evr else (np.floor(now / round_s) + 1.0) * round_s    # (Scheduler._run)
        ntl = _fe.sample(tl_f, tl_n, ntl, now, float(busy), effective, psum, nrun, qn)   # (Scheduler._run)
    left = 0
    for j in range(n):
        ji[j, 0] = state[j]
        jf[j, 2] = rem[j]
        jf[j, 3] = gpu_s[j]
        if state[j] != DONE and state[j] != REJECTED or aborted:
            left += 1
    return nop, npl, ng, ntl, now, eff_gpu_s, effective, eff_t, nrounds, left, nw, t_last, skipped
