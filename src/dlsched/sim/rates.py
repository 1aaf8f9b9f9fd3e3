"""Rates: how SimBackend brings a job's progress and speed up to date. `_advance` (work done since
the last update), `_set_rate` and `_push_finish` (a new rate and the finish entry it implies),
`_target_rate` and `_interference` (what the rate should be: the speed model, the link shares,
the GPU co-runners), and `_refresh`, which re-rates every job an event or a plan touched and
every job a re-share of the links moved.

A module of its own because this is the simulator's hot path, and where its hand-tuned code
lives: `_rerate` re-rates a job that only a re-share moved through `_rerate_shared`, in which
`_set_rate`, `_advance` and `_push_finish` are written out (tens of such jobs per arrival on a
busy cluster), and `_rerate_compiled` hands the jobs in array mode to the compiled re-rate
(dlsched.sim.fastrate). Both are justified by benchmarks/bench_scale.py's Poisson workloads over
`v100-1500` (RESULTS.md, block `scale`; docs/decisions/0032), and must
give the same event log as the plain path (tests/unit/test_fastrate.py,
benchmarks/eventlog_hash.py). `Rates` is mixed into SimBackend: its methods read and write
SimBackend's state, as before.
"""
from __future__ import annotations

import math
from array import array
from heapq import heappush

import numpy as np

from dlsched.sim import switch_cost
from dlsched.sim.engine import P_FINISH, P_RATE, Finish, RateChange, Reshare
from dlsched.sim.fastrate import VERSION as _VERSION
from dlsched.sim.run import JobRun


_RESHARE = Reshare()


class Rates:
    """SimBackend's rates and re-rates (mixed in; see the module)."""
    _adaptive = False        # a job runs with its own batch (JobRun.adapt, dlsched.sim.adaptive)
    _interfere = False       # and one of them may be slowed by interference (adaptive.interfered)

    def _advance(self, r: JobRun, now: float) -> None:
        dt = now - r.last_t
        if dt > 0 and r.rate > 0:
            done = min(r.rate * dt, r.remaining)
            r.remaining -= done
            if r.prof is not None:
                per = 1.0 if r.prof.iteration_based else 1.0 / r.prof.ideal_iter_s
                r.nic_bytes += done * per * r.prof.nic_bytes
                r.cross_rack_bytes += done * per * r.prof.cross_rack_bytes
        r.last_t = now

    def _set_rate(self, r: JobRun, rate: float, now: float, seq: int | None = None) -> None:
        if r.spec.kind == "dl":
            # Effective GPUs: held by jobs making progress; a GPU that k progressing jobs share
            # (packing, over-subscription) counts once: 1/k to each.
            c = r.hold_gpus / r.share if rate > 0 else 0.0
            if c != r.eff_gpus:
                self._add_effective(c - r.eff_gpus)
                r.eff_gpus = c
        if rate == r.rate:
            return
        self._advance(r, now)
        r.rate = rate
        r.version += 1
        if rate > 0:
            if r.first_progress_s is None:
                r.first_progress_s = now
            self._push_finish(r, now + max(r.remaining, 0.0) / rate, seq)
        if self.record_rates:
            if self._rec_buf is not None:      # in _rerate with the compiled re-rate: in job order
                self._rec_buf.append((r.spec.job_id, rate))
            else:
                self.log.append((now, "rate", r.spec.job_id, f"{rate:.9g}"))

    def _push_finish(self, r: JobRun, t: float, seq: int | None = None) -> None:
        """The job's finish entry for its current version at time t. A re-rated job's earlier
        entries are stale; most re-rates slow a job down (a new flow on its links), and an entry
        at or after the job's live one waits outside the heap: it is pushed, with the sequence
        number taken now, when the live one pops (stale). So the heap pops the same events in
        the same order as if every entry were pushed at once, without a push and a stale pop
        per re-rate. A waiting entry that goes stale is never pushed; its time still counts
        where the clock ends (poll). `seq`: the sequence number reserved for it (None: the next)."""
        if seq is None:
            seq = self.heap.reserve()
        d = r.deferred
        if d is not None:
            r.deferred = None
            if d[0] > self._ghost_t:
                self._ghost_t = d[0]
        if self.defer_finishes and r.fin_ev is not None and r.fin_at <= t:
            r.deferred = (t, seq, r.version)
        else:
            r.fin_ev = Finish(r.spec.job_id, r.version)
            r.fin_at = t
            self.heap.push_seq(t, P_FINISH, seq, r.fin_ev)

    def _interference(self, r: JobRun) -> float:
        if not self._gpu_jobs:
            return 1.0
        others: dict[str, str | None] = {}       # job id -> model, in the order met
        for tp in r.placements.values():
            for g in tp.gpu_ids:
                for other in self._gpu_jobs.get((tp.node, g), ()):
                    if other != r.spec.job_id and other not in others:
                        others[other] = self.runs[other].spec.model
        r.share = 1 + len(others)
        if not others:
            return 1.0       # sharing_factor of a job alone on its GPUs
        table = self.speed.params.throughputs
        if table is not None and len(others) == 1:
            pair = _pair_factor(table, self.speed.cluster, r, next(iter(others.values())))
            if pair is not None:
                return pair
        packed = r.packed or any(self.runs[o].packed for o in others)
        return switch_cost.sharing_factor(r.spec.model, list(others.items()), packed,
                                          self.speed.params.factor)

    def _target_rate(self, r: JobRun, shares) -> float:
        r.factor = None
        if r.finished or r.saving or not r.whole or r.spec.kind != "dl" or self._now < r.restart_until:
            return 0.0
        prof = r.prof
        base = 1.0 if prof is None else prof.rate(shares if prof.link_bytes else {})
        f = self._interference(r)
        if shares is not None:
            r.factor = f     # kept for the re-rates that only a re-share causes (_refresh)
            # and the rate formula's constants (JobComm.rate_at), in the order _rerate reads them
            it = prof.iteration_based
            r.consts = (prof.local_comm_s, prof.max_link_bytes, prof.compute_s, prof.overlap,
                        1.0 if it else prof.ideal_iter_s, 1.0 if it else 1.0 / prof.ideal_iter_s,
                        prof.nic_bytes, prof.cross_rack_bytes, f)
        return base * f

    def _refresh(self) -> None:
        """Bring every touched job's rate up to date (and all link-sharing jobs if needed)."""
        if not self._touched and not self._net_dirty and not self._reshare_due:
            return
        now = self._now
        runs = self.runs
        touched = self._touched
        flows_rt = self._flows
        if flows_rt is not None:
            # out of array mode (fastrate) before Python reads them: a touched job is re-rated
            # in Python, and a changed flow may be removed (its slot given to another)
            for jid in touched | self._net_dirty:
                self._own(runs[jid])
        for jid in (sorted(touched) if len(touched) > 1 else touched):
            r = runs[jid]
            if r.finished:
                continue
            if r.placements and len(r.placements) + r.done_tasks == len(r.tasks):   # r.whole
                if r.restoring or r.starting:
                    delay = switch_cost.restart_hold_s(r.restoring, self.restart_delay_s,
                                                       self.start_delay_s, r.restore_s)
                    r.restore_s = None
                    r.lost_s += delay
                    r.lost_gpu_s += delay * r.hold_gpus
                    r.restoring = r.starting = False
                    r.restart_until = now + delay
                    if delay > 0:
                        self.heap.push(r.restart_until, P_RATE, RateChange(jid, r.version))
                if r.adapt is not None:           # its own batch: re-picked at every re-rate
                    self._advance(r, now)
                    r.prof = r.adapt.profile(r)
                elif r.prof is None:
                    r.prof = self.speed.profile(r.spec, tuple(r.placements.values()), r.tasks)
                    if r.prof is not None and r.prof.link_bytes:
                        self._net_dirty.add(jid)
            elif r.prof is not None:
                r.prof = None
        # Gang jobs holding part of their tasks: the partial-hold waste.
        partial_jobs = self._partial_jobs
        for jid in touched:
            r = runs[jid]
            if r.spec.kind == "dl" and not r.finished and r.placements and not r.whole:
                partial_jobs.add(jid)
            else:
                partial_jobs.discard(jid)
        todo = touched
        changed: dict[str, float] = {}
        self._seq0 = None
        if self._net_dirty or self._reshare_due:
            # Flows: jobs that use shared links and are not restarting. Only the components
            # of the links they change are re-shared, and only jobs whose share moved re-rated.
            # A job with no flow now and none before changes nothing: it is left out (most jobs
            # of a trace without models never have one).
            changes = {}
            flows, pend = self.net.flows, self._net_pend
            for jid in (sorted(self._net_dirty) if len(self._net_dirty) > 1 else self._net_dirty):
                r = runs[jid]
                use = (not r.finished and not r.saving and r.prof is not None and r.prof.link_bytes
                       and now >= r.restart_until)
                if use:
                    changes[jid] = self.speed.solver_links(r.prof)
                elif jid in flows or jid in pend:
                    changes[jid] = None
            if self._net_batch and not self._reshare_due:
                if changes:
                    self._hold_changes(changes, now)
            elif changes or pend:
                changes = self._held_changes(changes, touched) if pend else changes
                if flows_rt is not None:
                    changed = self._rerate_compiled(changes, now)
                else:
                    changed = self.net.update(changes)
                    if self.compiled_rerate and self._ranked:
                        self._start_flows()
                # on after an update re-shared more than reshare_region flows, off once fewer flows
                # than that are live (no update could re-share more)
                net, most = self.net, self.reshare_region
                self._net_batch = self.reshare_window_s > 0 and (
                    net.last_region > most or (self._net_batch and len(net.flows) > most))
                if changed:
                    todo = todo | changed.keys()
            self._reshare_due = False
        order = sorted(todo) if len(todo) > 1 else todo
        if flows_rt is not None:
            # sequence numbers seq + rank (a block _rerate_compiled reserved, if it ran)
            seq0 = self._seq0 if self._seq0 is not None else self.heap.reserve(len(self._rank))
            self._rerate(order, seq0, changed, now, self._rank)
        else:
            # One sequence number per job, in this order, for a finish it may push: the same
            # order of entries as taking them one at a time (gaps do not matter).
            self._rerate(order, self.heap.reserve(len(order)), changed, now)
        if self._adaptive:
            self._epoch_edges(order, now)
        if partial_jobs or self._partial:
            self._partial = float(sum(runs[j].hold_gpus for j in partial_jobs))
        self._touched.clear()
        self._net_dirty.clear()
        if self._done:
            self._drop_done()

    def _hold_changes(self, changes: dict, now: float) -> None:
        """Re-share windows: the last update re-shared more than `reshare_region` flows, so a
        re-share costs about as much as the flows it reaches. `changes` waits with those
        held before it for the next multiple of `reshare_window_s` (a Reshare event), where they
        are applied in one update. Until then every other flow keeps its rate, and a job that
        starts keeps a provisional share on each of its links (`_job_shares`)."""
        self._net_pend.update(changes)
        if self._reshare_at is None:
            w = self.reshare_window_s
            t = self._reshare_at = (math.floor(now / w) + 1.0) * w
            self.heap.push(t, P_RATE, _RESHARE)

    def _held_changes(self, changes: dict, touched: set) -> dict:
        """The held changes with `changes` after them, for one update; each job among them still
        running is out of array mode and re-rated from its new share as a touched job is."""
        pend = self._net_pend
        self._net_pend = {}
        pend.update(changes)
        runs = self.runs
        for jid in pend:
            r = runs.get(jid)
            if type(r) is JobRun and not r.finished:
                self._own(r)
                touched.add(jid)
        return pend

    def _epoch_edges(self, order, now: float) -> None:
        """A re-rate at the end of the current epoch of each adaptive job just re-rated (it
        picks its batch again there; dlsched.sim.adaptive)."""
        for jid in order:
            r = self.runs[jid]
            if r.adapt is not None and not r.finished:
                t = r.adapt.boundary(r, now)
                if t is not None:
                    self.heap.push(t, P_RATE, RateChange(jid, r.version))

    def _job_shares(self, r: JobRun) -> dict | None:
        """{link: the job's share} for a job with link bytes (its flow's rate on every link it
        crosses; a link's capacity without a flow), else None."""
        if r.prof is None or not r.prof.link_bytes:
            return None
        jid = r.spec.job_id
        s = self.net.share(jid)
        cap = self.speed.link_capacity
        if s is None and jid in self._net_pend:
            # held for a re-share window (_hold_changes): a provisional share, an equal part of
            # each link with the flows on it now
            net = self.net
            return {link: float(cap[link]) / (net.crowd(link) + 1) for link in r.prof.link_bytes}
        return {link: (float(cap[link]) if s is None else s) for link in r.prof.link_bytes}

    def _start_flows(self) -> None:
        """Turn the compiled re-rate on (dlsched.sim.fastrate) once the shares are compiled:
        each job's rank among all job ids in sorted order, for its sequence numbers."""
        from dlsched.sim import fastrate, netfast
        real = getattr(self.net, "_real", self.net)
        if type(real) is not netfast.FastNetShares or not fastrate.available():
            self.compiled_rerate = False          # (this backend's: not to be asked again)
            return
        ids = [job.job_id for job in self._jobs]
        rank = np.empty(len(ids), dtype=np.int64)
        rank[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
        self._rank = array("q", rank.tobytes())     # read as Python ints, 8 bytes a job
        self._flows = fastrate.FlowRuns(real)

    def _unrank(self) -> None:
        """A job came from outside the list (no rank): back to Python re-rates for good."""
        self._ranked = False
        fl = self._flows
        if fl is not None:
            for r in list(fl.runs):
                if r is not None:
                    fl.own(r)
            self._flows = None
            self._rank = None

    def _rerate_compiled(self, changes: dict, now: float) -> dict:
        """The re-share and the compiled re-rate of the jobs in array mode it moved
        (fastrate.FlowRuns.rerate); {job: share} for those Python must re-rate. Reserves the
        update's block of sequence numbers (self._seq0; a job's is seq0 + its rank)."""
        net, fl = self.net, self._flows
        n = net.update_slots(changes)
        seq0 = self._seq0 = self.heap.reserve(len(self._rank))
        real = fl.net
        npy, npush, nrec, self._ghost_t = fl.rerate(n, real._out_slot, real._out_rate, now, seq0,
                                                    self.defer_finishes, self.record_rates, self._ghost_t)
        names, runs_at, rank = real._names, fl.runs, self._rank
        if npush:
            heap = self.heap._heap
            for s, t in zip(fl._push_slot[:npush].tolist(), fl._push_t[:npush].tolist()):
                r = runs_at[s]
                jid = r.spec.job_id
                r.fin_ev = ev = Finish(jid, int(fl.is_[s, _VERSION]))
                heappush(heap, (t, P_FINISH, seq0 + rank[r.k], ev))
        if nrec:
            self._rec_buf = [(names[s], rt) for s, rt in zip(fl._rec_slot[:nrec].tolist(),
                                                              fl._rec_rate[:nrec].tolist())]
        return dict(zip(map(names.__getitem__, fl._py_slot[:npy].tolist()), fl._py_share[:npy].tolist()))

    def _rerate(self, order, seq: int, changed: dict, now: float, rank=None) -> None:
        """_refresh's last loop: each job of `order` brought to its rate, the i-th with sequence
        number seq + i for a finish it pushes (with `rank`, a job's list position -> its rank:
        seq + its rank, the same order). A touched job (its placement, co-runners or state
        changed) through _target_rate and _set_rate. A job that only a re-share moved is the
        most frequent on a busy cluster (tens per arrival): its interference factor is the one
        last computed, and its rate is rate(shares) * factor for one share on every link, as
        JobComm.rate_at computes; _set_rate, _advance and _push_finish are written out here for
        it, the same operations in the same order. With the compiled re-rate on (self._flows),
        most of those were re-rated there already; the jobs here enter its array mode after."""
        runs, touched = self.runs, self._touched
        heap = self.heap._heap
        defer, record = self.defer_finishes, self.record_rates
        flows_rt = self._flows if rank is not None else None    # (on from the next _refresh)
        if flows_rt is not None and record:
            # rate records in job order with the compiled re-rate's (_rerate_compiled)
            if self._rec_buf is None:
                self._rec_buf = []
            record = False
        for i, jid in enumerate(order):
            r = runs[jid]
            sq = seq + i if rank is None else seq + rank[r.k]
            self._own(r)                    # the compiled re-rate gave it back (its rate is 0)
            if r.factor is None or jid in touched:     # (otherwise in `changed`)
                self._set_rate(r, self._target_rate(r, self._job_shares(r)), now, sq)
            else:
                self._rerate_shared(r, jid, changed[jid], now, sq, heap, defer, record)
            if flows_rt is not None and r.factor is not None and not r.finished:
                flows_rt.enter(r, rank[r.k])
        buf = self._rec_buf
        if buf is not None:
            self._rec_buf = None
            buf.sort()
            for jid, rate in buf:
                self.log.append((now, "rate", jid, f"{rate:.9g}"))

    def _rerate_shared(self, r: JobRun, jid: str, share: float, now: float, seq: int, heap, defer: bool,
                       record: bool) -> None:
        """_rerate for a job that only a re-share moved (see there)."""
        # JobComm.rate_at(share) * factor, the same operations (constants: _target_rate)
        local, most, c, overlap, num, per, nic, cross, factor = r.consts
        comm = local + most / share
        t = c + comm - overlap * (c if c <= comm else comm)
        rate = num / t * factor
        eff = r.hold_gpus / r.share if rate > 0 else 0.0
        if eff != r.eff_gpus:
            self._add_effective(eff - r.eff_gpus)
            r.eff_gpus = eff
        old = r.rate
        if rate == old:
            return
        dt = now - r.last_t           # _advance
        if dt > 0 and old > 0:
            done = old * dt
            rem = r.remaining
            if done > rem:
                done = rem
            r.remaining = rem - done
            r.nic_bytes += done * per * nic
            r.cross_rack_bytes += done * per * cross
        r.last_t = now
        r.rate = rate
        r.version += 1
        if rate > 0:
            if r.first_progress_s is None:
                r.first_progress_s = now
            t = now + max(r.remaining, 0.0) / rate     # _push_finish(r, t) with this seq
            d = r.deferred
            if d is not None:
                r.deferred = None
                if d[0] > self._ghost_t:
                    self._ghost_t = d[0]
            if defer and r.fin_ev is not None and r.fin_at <= t:
                r.deferred = (t, seq, r.version)
            else:
                r.fin_ev = Finish(jid, r.version)
                r.fin_at = t
                heappush(heap, (t, P_FINISH, seq, r.fin_ev))
        if record:
            self.log.append((now, "rate", jid, f"{rate:.9g}"))
        elif self._rec_buf is not None:
            self._rec_buf.append((jid, rate))


def _pair_factor(table, cluster, r: JobRun, other_model) -> float | None:
    """A job sharing its GPUs with one other, both of job types of the throughput table that
    measured them as a pair on this GPU type and count (Gavel's pairs): its pair throughput over
    its throughput alone. None where the table has no such pair (the speed model's factors then)."""
    from dlsched.core.types import GPU
    from dlsched.workload.speed import table_rate
    if not (table.has(r.spec.model) and table.has(other_model)):
        return None
    gpus = max(int(round(sum(r.tasks[tp.task].demand[GPU] for tp in r.placements.values()))), 1)
    gpu_type = cluster.nodes[next(iter(r.placements.values())).node].gpu_type
    pair = table.pair(r.spec.model, gpus, other_model, gpu_type)
    alone = table_rate(table, r.spec.model, gpus, gpu_type)
    if not pair or not alone:
        return None
    return pair[0] / alone
