"""The kernel of dlsched.sim.fastloop: `_loop_py`, Scheduler._run over SimBackend.poll/apply for a
run of the FIFO family, written over arrays for numba (fastloop.available compiles it), and the
codes of the records and job states it writes.

A module of its own because it is the part that is compiled and read line by line against the
Python loop it mirrors (each step names the method whose operations it repeats, in the same
order): what it applies to, its inputs and how its output becomes the two drivers' records stay
in dlsched.sim.fastloop, whose docstring says why the results are the same exactly. The speed it
buys is benchmarks/bench_sim.py's fifo on the whole Philly trace (and the FIFO family's rows of
benchmarks/bench_policies.py): RESULTS.md, block `fifo`.
"""
from __future__ import annotations

import numpy as np

from dlsched.core.types import GPU

# the kernel's records (op codes)
ARRIVE, FINISH, ROUND, LAUNCH, RATE = range(5)
# job states (JobState's, by number)
PENDING, PARTIAL, RUNNING, DONE, REJECTED = range(5)


def _loop_py(arr_order, arr_t, keyrank, idrank, rejected, work, ntask, toff, tdem, tgpu, dem, thr_n, thr_dim,
             thr_val, want, node_type, node_gpus, free, gload, gang, blocking,
             op, op_t, op_j, op_a, op_b, pl_task, pl_node, pl_goff, gbuf, tl_f, tl_n, jf, ji):
    """Scheduler._run over SimBackend.poll/apply for the jobs and cluster given as arrays (see
    `run` for each). Writes the records (op*: one per arrival, finish, round, launch and rate
    change, in the order the Python loop writes them), the placements (pl*, gbuf: the GPU ids),
    the timeline samples (tl_f: time, allocated, effective, partial; tl_n: running, queued), and
    per job jf (first start, finish, remaining, gpu_s, first progress, attained GPU-s) and ji
    (state, stats row). Returns (records, samples, now, effective GPU-s, effective GPUs, its
    time, rounds, jobs left unfinished)."""
    n = arr_order.shape[0]
    inf = np.inf
    nan = np.nan
    nodes = free.shape[0]
    nres = free.shape[1]
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
    while hn > 0 or ai < n:
        tf = ht[0] if hn > 0 else inf
        ta = arr_t[arr_order[ai]] if ai < n else inf
        t = tf if tf <= ta else ta
        if t > now:
            now = t
        dirty = False
        # -- finishes at now (SimBackend._handle Finish, then Scheduler.handle JobFinish)
        while hn > 0 and ht[0] <= now:
            j = hj[0]
            hn -= 1                          # pop: the last entry sifted down from the root
            if hn > 0:
                xt, xs, xj = ht[hn], hs[hn], hj[hn]
                i = 0
                while True:
                    c = 2 * i + 1
                    if c >= hn:
                        break
                    if c + 1 < hn and (ht[c + 1] < ht[c] or (ht[c + 1] == ht[c] and hs[c + 1] < hs[c])):
                        c += 1
                    if ht[c] < xt or (ht[c] == xt and hs[c] < xs):
                        ht[i], hs[i], hj[i] = ht[c], hs[c], hj[c]
                        i = c
                    else:
                        break
                ht[i], hs[i], hj[i] = xt, xs, xj
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
            for k in range(toff[j], toff[j] + ntask[j]):    # _give, task by task
                p = tk_pl[k]
                nd = pl_node[p]
                u = tdem[k]
                for r in range(nres):
                    free[nd, r] += dem[u, r]
                for x in range(pl_goff[p], pl_goff[p] + tgpu[k]):
                    gload[nd, gbuf[x]] -= 1
                    if gload[nd, gbuf[x]] == 0:
                        busy -= 1
            gpu_s[j] += hold[j] * (now - since[j])
            since[j] = now
            jf[j, 5] += (now - svc[j]) * hold[j]     # Scheduler._settle_service
            hold[j] = 0.0
            state[j] = DONE
            jf[j, 1] = now
            nrun -= 1
            ji[j, 1] = nrows
            nrows += 1
            op[nop], op_t[nop], op_j[nop] = FINISH, now, j
            nop += 1
            dirty = True
        # -- arrivals at now (SimBackend._handle Arrive, then Scheduler._on_arrival)
        while ai < n and arr_t[arr_order[ai]] <= now:
            j = arr_order[ai]
            ai += 1
            last_t[j] = now
            rem[j] = work[j]
            op[nop], op_t[nop], op_j[nop] = ARRIVE, now, j
            nop += 1
            if rejected[j]:
                state[j] = REJECTED
                continue
            lo, hi = 0, qn                   # bisect.insort by key
            while lo < hi:
                mid = (lo + hi) // 2
                if keyrank[j] < keyrank[q[mid]]:
                    hi = mid
                else:
                    lo = mid + 1
            for i in range(qn, lo, -1):
                q[i] = q[i - 1]
            q[lo] = j
            qn += 1
            dirty = True
        # -- the round (Scheduler.round: each waiting job in order, its tasks by first fit)
        if dirty and qn > 0:
            op[nop], op_t[nop], op_a[nop] = ROUND, now, qn
            nop += 1
            nrounds += 1
            nl = 0
            for qi in range(qn):
                j = q[qi]
                first = toff[j] + nplaced[j]
                end = toff[j] + ntask[j]
                ok = True
                if gang and end - first > 1:     # all or nothing: the cluster's free total first
                    for r in range(nres):
                        need[r] = 0.0
                        have[r] = 0.0
                    for k in range(first, end):
                        for r in range(nres):
                            need[r] += dem[tdem[k], r]
                    for nd in range(nodes):
                        for r in range(nres):
                            have[r] += free[nd, r]
                    for r in range(nres):
                        if need[r] > have[r] + 1e-9:
                            ok = False
                s0, g0 = npl, ng
                placed = 0
                if ok:
                    for k in range(first, end):
                        u = tdem[k]
                        w = want[j]
                        nd = -1
                        for cand in range(nodes):
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
                        for r in range(nres):        # Transaction.reserve
                            free[nd, r] -= dem[u, r]
                        pl_task[npl] = k - toff[j]
                        pl_node[npl] = nd
                        pl_goff[npl] = ng
                        kk = tgpu[k]
                        if kk > 0:                   # pick_gpus: least loaded, lowest index first
                            for x in range(kk):
                                best = -1
                                for g in range(node_gpus[nd]):
                                    taken = False
                                    for y in range(ng, ng + x):
                                        if gbuf[y] == g:
                                            taken = True
                                    if not taken and (best < 0 or gload[nd, g] < gload[nd, best]):
                                        best = g
                                gbuf[ng + x] = best
                            for x in range(kk):
                                gload[nd, gbuf[ng + x]] += 1
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
                        nplaced[j] = have_n
                    if have_n < ntask[j]:
                        ok = False
                if not ok and blocking:
                    break
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
            for li in range(nl):                     # touched jobs in job-id order
                touched[li] = launched[li]
            for li in range(1, nl):
                x = touched[li]
                y = li - 1
                while y >= 0 and idrank[touched[y]] > idrank[x]:
                    touched[y + 1] = touched[y]
                    y -= 1
                touched[y + 1] = x
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
                    fs = seq + li
                    i = hn                           # push: sift up
                    hn += 1
                    while i > 0:
                        par = (i - 1) // 2
                        if ft < ht[par] or (ft == ht[par] and fs < hs[par]):
                            ht[i], hs[i], hj[i] = ht[par], hs[par], hj[par]
                            i = par
                        else:
                            break
                    ht[i], hs[i], hj[i] = ft, fs, j
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
                    svc[j] = now
                    lo, hi = 0, qn                   # out of the queue
                    while lo < hi:
                        mid = (lo + hi) // 2
                        if keyrank[q[mid]] < keyrank[j]:
                            lo = mid + 1
                        else:
                            hi = mid
                    for i in range(lo, qn - 1):
                        q[i] = q[i + 1]
                    qn -= 1
                else:
                    state[j] = PARTIAL
        # -- the timeline's sample (Scheduler._run)
        a, e, pt = float(busy), effective, psum
        if ntl == 0:
            tl_f[0, 0], tl_f[0, 1], tl_f[0, 2], tl_f[0, 3] = now, a, e, pt
            tl_n[0, 0], tl_n[0, 1] = nrun, qn
            ntl = 1
        elif (tl_f[ntl - 1, 1] != a or tl_f[ntl - 1, 2] != e or tl_f[ntl - 1, 3] != pt
              or tl_n[ntl - 1, 0] != nrun or tl_n[ntl - 1, 1] != qn):
            if tl_f[ntl - 1, 0] != now:
                ntl += 1
            tl_f[ntl - 1, 0], tl_f[ntl - 1, 1], tl_f[ntl - 1, 2], tl_f[ntl - 1, 3] = now, a, e, pt
            tl_n[ntl - 1, 0], tl_n[ntl - 1, 1] = nrun, qn
    left = 0
    for j in range(n):
        ji[j, 0] = state[j]
        jf[j, 2] = rem[j]
        jf[j, 3] = gpu_s[j]
        if state[j] != DONE and state[j] != REJECTED:
            left += 1
    return nop, npl, ng, ntl, now, eff_gpu_s, effective, eff_t, nrounds, left
