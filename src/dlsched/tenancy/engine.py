"""The tenancy engine: quotas, queue order and victims in every round of the Scheduler, on both
backends (the parts and the walk are described in dlsched.tenancy.points).

`Scheduler(profile, tenancy=Tenancy(tree, "kueue"))`: each round, after the profile has sorted
the waiting jobs, `admit(queue, ctx)` walks them queue by queue and returns those admitted, in
the walk's order; the profile's allocation and placement see only those. Jobs refused wait
"blocked by quota" with the walk's reason; admitted jobs the placement cannot place wait
"blocked by placement" (Philly's fair-share delay and fragmentation delay). Victims are
suspended in the round's transaction with their reason, which goes into the event log.

Only whole running DL jobs are victims, and only when the refused job would then fit on the
nodes as well (tried on a fork of the transaction with the profile's filters, first node that
passes): a preemption never frees quota the job could not use.
"""
from __future__ import annotations

import math
from heapq import heappop, heappush

from dlsched.core.errors import ConfigError
from dlsched.core.types import CPU, GPU, MEM, Launch, Migrate, Resize, Resume
from dlsched.scheduler import events as ev
from dlsched.scheduler.context import _SETTLED
from dlsched.tenancy.accounts import Accounts
from dlsched.tenancy.book import Book, request_of
from dlsched.tenancy.modes import Mode
from dlsched.tenancy.tree import DEFAULT_QUEUE, ROOT, QueueTree, line_of, with_default  # noqa: F401 (with_default: the runtime imports it from here)
from dlsched.tenancy.view import (Refused, Shapes, View, VictimList, build_lanes, choose_kept, feasible,
                                  fits_kept, refuse_rest, refuses_kept)

_EPS = 1e-9


class Tenancy:
    """Quotas and fair share over a queue tree, in one of the named modes (see the module)."""

    def __init__(self, tree: QueueTree, mode: str | None = None, overrides: dict | None = None):
        self.tree = with_default(tree)
        # the mode: as given, else the queue file's (`tenancy: {mode: ...}`), else kueue; the
        # file's settings apply when the file names that mode (or none), under `overrides`
        own = dict(tree.settings)
        file_mode = own.pop("mode", None)
        mode = mode or file_mode or "kueue"
        if file_mode not in (None, mode):
            own = {}
        self.mode = Mode(mode, {**own, **(overrides or {})})
        # the constrained resources: the tree's, and GPUs always where the whole cluster is divided
        res = self.tree.resources()
        self.resources = res if self.mode.spec.pool == "none" or "gpu" in res else ["gpu", *res]
        self.started: dict[str, float] = {}          # job -> its last launch / resume / move
        self._req: dict[str, tuple] = {}
        self._gpus: dict[str, tuple] = {}
        self._lane: dict[str, tuple] = {}               # job -> what the walk reads of it (_lane_of)
        self._sid: dict[tuple, int] = {}                # shape -> its number, and back (_by_sid)
        self._by_sid: list[tuple] = []
        self._lanes_kept: dict = {}                     # the last walk's queue and lanes (build_lanes)
        self._tail: dict[str, tuple] = {}               # job -> (spec, the queue order's tail of its key)
        self._hold: dict[str, tuple] = {}               # job -> (leaf, request, GPUs held, user)
        self._leaf_use: dict[str, dict[str, float]] = {}   # leaf -> its holders' requests, summed
        self._held: dict[str, float] = {}               # "queue:<leaf>" / "user:<name>" -> GPUs held
        self._last_held: dict[str, float] = {}
        self._changed = False
        self._cap_cache: dict[bytes, dict] = {}      # the nodes up -> capacity per resource
        self._pool_for: tuple | None = None             # (capacity, the root's pool for it)
        self._base: Book | None = None                  # the holders' usage, kept by _update
        self._fit_caps: dict[str, list] = {}            # leaf -> (node, resource, cap, what)
        self.accounts = Accounts(self)
        self.sched = None
        self.refused: Refused | set[str] = set()

    # -- identity ----------------------------------------------------------------------------
    def leaf_of(self, rec) -> str:
        return getattr(rec, "spec", rec).queue or DEFAULT_QUEUE

    def request(self, rec) -> dict[str, float]:
        got = self._req.get(rec.job_id)
        if got is None or got[0] is not rec.tasks:
            req = request_of(rec.spec, rec.tasks, self.resources)
            got = self._req[rec.job_id] = (rec.tasks, req, tuple(req.items()))   # (the memo's key: Shapes)
        return got[1]

    def never_fits(self, job) -> str:
        """Why `job` can never be admitted in its queue ("" when it may be): more than a limit,
        or than a nominal plus a borrowing limit, of its queue or an ancestor, on some resource.
        (A non-preemptible job above its KAI quota waits, unschedulable, as KAI leaves it.)"""
        from dlsched.tenancy.book import unit
        leaf = self.leaf_of(job)
        if leaf not in self.tree.nodes:
            return ""
        caps = self._fit_caps.get(leaf)
        if caps is None:                 # the tree's bounds on the leaf's path, once per leaf
            b, caps = Book(self.tree, None, self.resources), []
            for r in self.resources:
                for n in b.path(leaf)[:-1]:
                    lim, nb = b.limit(n, r), b.nominal(n, r) + b.borrowing_limit(n, r)
                    if min(lim, nb) < math.inf:
                        caps.append((n, r, min(lim, nb), "limit" if lim <= nb else "nominal quota plus borrowing limit"))
            self._fit_caps[leaf] = caps
        if not caps:
            return ""
        req = request_of(job, job.tasks, self.resources)
        for n, r, cap, what in caps:
            x = req.get(r, 0.0)
            if x > _EPS and x > cap + _EPS:
                return (f"field 'queue': the job asks {x:g} {unit(r)} at once; queue {n}'s {what} is {cap:g}"
                        + ("" if n == leaf else f" (an ancestor of {leaf})"))
        return ""

    def _lane_of(self, rec) -> tuple:
        """(tasks, leaf, GPUs asked, shape, record, shape number) of a waiting job, kept
        while its tasks are the same object: the admission walk reads them of every waiting job
        every round (view.build_lanes). The shape is Shapes' key (leaf, request items, priority)."""
        leaf = rec.spec.queue or DEFAULT_QUEUE
        self.request(rec)
        k = (leaf, self._req[rec.job_id][2], rec.spec.priority)
        sid = self._sid.get(k)
        if sid is None:
            sid = self._sid[k] = len(self._by_sid)
            self._by_sid.append(k)
        a = self._lane[rec.job_id] = (rec.tasks, leaf, self.gpus(rec), k, rec, sid)
        return a

    def gpus(self, rec) -> float:
        """The GPUs a job asks for (all its tasks; kept per job)."""
        g = self._gpus.get(rec.job_id)
        if g is None or g[0] is not rec.tasks:
            g = self._gpus[rec.job_id] = (rec.tasks, float(sum(t.demand[GPU] for t in rec.tasks)))
        return g[1]

    def check_jobs(self, jobs, file: str | None = None) -> None:
        """Every job names a leaf of the tree (or none): one ConfigError naming the first that
        does not."""
        leaves = set(self.tree.leaves)
        for i, job in enumerate(jobs):
            q = job.queue
            if q is not None and q not in leaves:
                what = "an inner queue (only leaves hold jobs)" if q in self.tree.nodes else "an unknown queue"
                line = line_of(file, job.job_id)
                where = f"{file}, line {line}" if line else file
                raise ConfigError("queue", f"job {job.job_id}: {q!r} is {what}; leaves: "
                                  f"{', '.join(sorted(leaves)[:12])}", file=where)

    def keep_in(self, store, every_s: float = 60.0) -> None:
        """Keep the ledger in a runtime store (meta key `tenancy.ledger`): loaded now, saved at
        most every `every_s` of scheduler time, so decayed usage survives a restart."""
        import json
        self._store, self._save_every, self._saved_t = store, every_s, None
        led = self.mode.ledger
        raw = store.meta("tenancy.ledger")
        if led is not None and raw:
            led.load(json.loads(raw))

    def _save(self, now: float) -> None:
        import json
        store = getattr(self, "_store", None)
        led = self.mode.ledger
        if store is None or led is None or (self._saved_t is not None and now - self._saved_t < self._save_every):
            return
        store.set_meta("tenancy.ledger", json.dumps(led.state()))
        self._saved_t = now

    def bind(self, sched) -> None:
        self.sched = sched
        if self.mode.ledger is not None:
            cap = getattr(sched, "_capacity_gpus", 0.0)
            self.mode.ledger.capacity = cap

    # -- the round ---------------------------------------------------------------------------
    def _capacity(self, snap) -> dict[str, float]:
        key = snap.up.tobytes()
        got = self._cap_cache.get(key)
        if got is None:
            if len(self._cap_cache) > 64:
                self._cap_cache.clear()
            got = self._cap_cache[key] = self._capacity_of(snap)
        return got

    def _capacity_of(self, snap) -> dict[str, float]:
        up = snap.up
        cap = snap.capacity[up]
        out = {"gpu": float(cap[:, GPU].sum()), "cpu": float(cap[:, CPU].sum()), "mem_gb": float(cap[:, MEM].sum())}
        for r in self.resources:
            if r.startswith("gpu:"):
                idx = [n.node_id for n in snap.cluster.nodes if n.gpu_type == r[4:] and up[n.node_id]]
                out[r] = float(snap.capacity[idx, GPU].sum()) if idx else 0.0
        return out

    def _pool(self, capacity: dict) -> dict[str, float]:
        """What the root holds of each resource (dlsched.tenancy.book): the capacity above the
        top-level quotas where the whole cluster is divided, else nothing."""
        got = self._pool_for
        if got is not None and got[0] is capacity:
            return got[1]
        pool = dict.fromkeys(self.resources, 0.0)
        if self.mode.spec.pool == "cluster":
            top = self.tree.children.get(ROOT, [])
            probe = Book(self.tree, resources=self.resources)
            pool = {r: max(0.0, capacity.get(r, 0.0) - sum(probe.subtree_quota(c, r) for c in top))
                    for r in probe.resources}
        self._pool_for = (capacity, pool)
        return pool

    def _book(self, ctx, capacity) -> tuple[Book, list]:
        """The book at the start of a round: a copy of the one kept as holdings change (in
        _update), less the jobs the round has already released."""
        pool = self._pool(capacity)
        base = self._base
        if base is None or base.pool != pool:
            base = self._base = Book(self.tree, pool, self.resources)
            for leaf, use in self._leaf_use.items():
                base.add(leaf, use)
        book = base.clone()
        for jid in ctx.txn.released:
            h = self._hold.get(jid)
            if h is not None:
                book.add(h[0], h[1], -1.0)
        return book, VictimList(self, ctx.txn)

    def _update(self, rec) -> None:
        """Keep what `rec` holds now in the running sums (quota use per queue, GPUs per queue and
        user)."""
        jid = rec.job_id
        self._changed = True
        old = self._hold.pop(jid, None)
        if old is not None:
            leaf, req, g, user = old
            use = self._leaf_use[leaf]
            for r, x in req.items():
                use[r] -= x
            if self._base is not None:
                self._base.add(leaf, req, -1.0)
            self._held[f"queue:{leaf}"] -= g
            self._held[f"user:{user}"] -= g
        if rec.placed and rec.state not in _SETTLED:
            leaf, req, g, user = self.leaf_of(rec), self.request(rec), rec.held_gpus(), rec.spec.user
            self._hold[jid] = (leaf, req, g, user)
            use = self._leaf_use.setdefault(leaf, dict.fromkeys(self.resources, 0.0))
            for r, x in req.items():
                use[r] += x
            if self._base is not None:
                self._base.add(leaf, req)
            for k in (f"queue:{leaf}", f"user:{user}"):
                self._held[k] = self._held.get(k, 0.0) + g

    def nonpreemptible_use(self, book, leaf, r) -> float:
        """What the leaf's non-preemptible jobs hold of r (KAI's in-quota rule)."""
        npp = self.mode.spec.non_preemptible_priority
        jobs = self.sched.jobs
        return sum(h[1].get(r, 0.0) for jid, h in self._hold.items()
                   if h[0] == leaf and jobs[jid].spec.priority >= npp)

    def admit(self, queue: list, ctx) -> list:
        """The admission walk of one round (module docstring): the admitted jobs, in order."""
        capacity = self._capacity(ctx.snap)
        book, victims = self._book(ctx, capacity)
        demand: dict[str, float] = {n: book.usage[n].get("gpu", 0.0) if "gpu" in book.resources else 0.0
                                    for n in (*self.tree.nodes, ROOT)}
        memo: dict | None = {} if getattr(self.mode.entitlement, "admits_by_request", False) else None
        lends = getattr(self.mode.victims, "reclaim", "any") != "any"     # a lender may keep its quota
        strict = self.strict
        shapes = Shapes() if memo is not None and not lends and not strict else None
        reqs, request = self._req, self.request
        lanes, asked = build_lanes(queue, self._lane, self._lane_of, shapes, self._lanes_kept)
        for leaf, g in asked.items():
            for n in book.path(leaf):
                demand[n] = demand.get(n, 0.0) + g
        view = View(self, book, ctx.now, capacity, demand, victims)
        if self.mode.ledger is not None:
            self.mode.ledger.capacity = capacity.get("gpu", 0.0)
        view.entitled = self.mode.entitlement.compute(view)
        admitted, self.refused = [], Refused()
        box = getattr(self.sched, "_why_box", None)
        if box is not None:
            box.rest = None          # the last walk's reasons give way to this one's
        self.refused_in = nref = dict.fromkeys(lanes, 0)     # refused per queue (the accounts)
        self.lanes = lanes
        heads = {leaf: 0 for leaf in lanes}
        order, local = self.mode.queue_order, self.mode.queue_order.local
        # The heads of the leaves in a heap by the order's key: a key is a function of the book
        # and the job (unique: it ends with the job id), so it is kept until the book changes,
        # and a local order's keys of other leaves then too (only the leaf that admitted moved).
        # Popping the least key is the linear scan over the heads it replaces, in log time.
        # An order whose key is part + tail (QueueOrder.split) has the heap compare (part, tail):
        # the same order as the key's, and the part is made once per shape and book version,
        # the tail once per job. Why: a deep queue's walk pops about 180 refused heads a round,
        # and their keys were a tenth of the run (benchmarks/bench_policies.py --deep --queues 8).
        heap: list = []
        key, victims_part = order.key, self.mode.victims
        split = order.split
        part, tails, tail_of = (order.part, self._tail, order.tail) if split else (None, None, None)
        parts: dict = {}                     # shape number -> its part, at book version parts_at[0]
        parts_at = [book.version]
        sids = shapes.keys if shapes is not None else None
        by_sid = self._by_sid

        def push(leaf: str) -> None:
            h = heads[leaf]
            rec = lanes[leaf][h]
            jid = rec.job_id
            got = reqs.get(jid)              # (self.request inlined: once per head, as above)
            req = got[1] if got is not None and got[0] is rec.tasks else request(rec)
            if not split:
                heappush(heap, (key(view, leaf, rec, req), (), leaf, rec, req))
                return
            got = tails.get(jid)
            if got is None or got[0] is not rec.spec:
                got = tails[jid] = (rec.spec, tail_of(rec))
            t = got[1]
            if sids is None:
                heappush(heap, (part(view, leaf, req), t, leaf, rec, req))
                return
            if parts_at[0] != book.version:
                parts.clear()
                parts_at[0] = book.version
            sid = sids[leaf][h]
            p = parts.get(sid)
            if p is None:
                p = parts[sid] = part(view, leaf, req)
            heappush(heap, (p, t, leaf, rec, req))

        def rekey_all() -> None:
            heap.clear()
            for leaf in heads:
                push(leaf)

        rekey_all()
        penalties = []
        # memo: "" or why not, per (leaf, request, priority), until the book changes: under a
        # deep queue most of a walk asks the same question of jobs of one shape in a queue over
        # its quota (the answer and its words are the same: view.fits reads the job only so)
        while heap:
            if shapes is not None:
                if shapes.unknown and not shapes.probed:
                    shapes.probe(lambda k, rep: refuses_kept(victims_part, view, memo, k, by_sid[k][0], rep,
                                                             reqs[rep.job_id][1]))
                if not shapes.unknown:
                    rest = refuse_rest(self.refused, view, memo, lanes, shapes.keys, heads, nref)  # every job left
                    if box is not None:
                        box.rest = rest      # (their reasons, read when asked: JobRecord.why)
                    break
            _, _, leaf, rec, req = heappop(heap)
            rekey = False                         # every head's key is to be made again
            shape = None
            if shapes is not None:
                shape = shapes.keys[leaf][heads[leaf]]
                shapes.popped(shape)
            if shape is not None and shape in shapes.known:
                why = memo[shape]                 # known refused, no victims (the memo's key is the shape)
            elif why := (lends and self._lender_blocks(view, leaf, req)) or fits_kept(view, memo, leaf, rec, req, shape):
                chosen = choose_kept(victims_part, view, memo, rec, leaf, req, shape) if why.startswith(("over", "non-")) else []
                if chosen and feasible(ctx, rec, [v for v, _ in chosen]):
                    for v, reason in chosen:
                        placements = list(v.placed.values())
                        ctx.txn.release(v.job_id, placements, [v.tasks[tp.task].demand for tp in placements],
                                        reason=f"{reason}: for {rec.job_id} ({leaf})")
                        book.add(self.leaf_of(v), self.request(v), -1.0)
                        self.accounts.preempted(self.leaf_of(v), reason)
                    view._victims.drop([v for v, _ in chosen])
                    rekey = True                  # other leaves' usage changed
                    if memo is not None:
                        memo.clear()
                    if shapes is not None:
                        shapes.changed()
                        shape = None              # (this answer is not the memo's)
                    why = view.fits(leaf, rec, req)
                elif shape is not None and not chosen:
                    shapes.refused(shape)
            if why:
                rec.why = why
                self.refused.add(rec.job_id)
                nref[leaf] += 1
                view.pending.setdefault(leaf, rec)
                if strict:
                    tail = lanes[leaf][heads[leaf] + 1:]
                    behind = f"behind {rec.job_id} in queue {leaf} ({why})"
                    for later in tail:
                        later.why = behind
                    self.refused.update([later.job_id for later in tail])
                    nref[leaf] += len(tail)
                    del heads[leaf]
                    if rekey:
                        rekey_all()
                    continue
            else:
                book.add(leaf, req)
                rekey = rekey or not local
                if memo is not None:
                    memo.clear()
                if shapes is not None:
                    shapes.changed()
                admitted.append(rec)
                penalties.append((leaf, rec))
            heads[leaf] += 1
            if heads[leaf] >= len(lanes[leaf]):
                del heads[leaf]
            elif not rekey:
                push(leaf)
            if rekey:
                rekey_all()
        self._penalties = penalties
        self._view = view
        return admitted

    @property
    def strict(self) -> bool:
        """A queue whose head is refused (or not placed) blocks the rest of that queue."""
        s = self.mode.spec.strategy
        return s == "strict" or (s == "profile" and bool(self.sched.profile.blocking))

    def _lender_blocks(self, view, leaf: str, req: dict) -> str:
        """Kueue: capacity lent by a queue whose refused head needs its own quota back and that
        may not reclaim it is not lent in this round."""
        if not view.pending:           # (the caller asks only where reclaim is not "any")
            return ""
        from dlsched.tenancy.orders import within_nominal
        if within_nominal(view, leaf, req):
            return ""          # not borrowing
        b = view.book
        for other, head in view.pending.items():
            if other == leaf:
                continue
            if any(b.usage[other][r] < b.nominal(other, r) - _EPS for r in b.resources):
                return (f"over quota: would borrow what {other} lends, and {other}'s waiting {head.job_id} "
                        f"may need it back ({other} may not reclaim)")
        return ""

    # -- outside rounds ------------------------------------------------------------------------
    def committed(self, now: float, decided: set) -> None:
        """The last round's walk was carried out: its admissions pay their entry penalties, and
        the accounts take its entitlements and each waiting job's kind of wait."""
        if getattr(self, "_view", None) is not None:
            self.accounts.round(now, self._view, self.lanes, decided, self.refused_in)
        led = self.mode.ledger
        for leaf, rec in getattr(self, "_penalties", ()):
            if led is not None and rec.placed:
                g = self.request(rec).get("gpu", float(sum(t.demand[GPU] for t in rec.tasks)))
                led.admit(f"queue:{leaf}", g)
                led.admit(f"user:{rec.spec.user}", g)
        self._penalties = []

    def observe(self, now: float, events: list, applied) -> None:
        if applied is not None:
            for d in applied.decisions:
                if isinstance(d, (Launch, Resume, Migrate, Resize)):
                    self.started[d.job_id] = now
        for e in events:
            if isinstance(e, ev.JobFinish):
                self.started.pop(e.job_id, None)
                self._req.pop(e.job_id, None)
                self._gpus.pop(e.job_id, None)
                self._lane.pop(e.job_id, None)
                self._tail.pop(e.job_id, None)
        jobs = self.sched.jobs
        if applied is not None:
            for d in applied.decisions:
                self._update(jobs[d.job_id])
        for e in events:
            if isinstance(e, (ev.JobFinish, ev.JobStopped, ev.JobHeld, ev.TaskFinish)):
                self._update(jobs[e.job_id])
        # time passed with what was held before this batch (the ledger and the accounts
        # integrate up to now, then take the new holdings)
        if self.mode.ledger is not None:
            self.mode.ledger.advance(now, self._last_held)
            self._save(now)
        if self._changed:
            self._last_held = {k: v for k, v in self._held.items() if v > _EPS}
            self._changed = False
        self.accounts.advance(now, self._last_held)

    def next_wake(self, now: float) -> float | None:
        """When a minimum runtime ends for a job that may be a victim while someone waits
        blocked by quota: a round then (the reclaim refused before may go ahead)."""
        t = self._floor_end(now) if self.refused else math.inf
        return None if t == math.inf else t

    @property
    def can_be_quiet(self) -> bool:
        """Only where every part of the mode declares quiet_until (a decayed ledger, the usage
        and fairtree orders and KAI's fair share move with time: never quiet)."""
        from dlsched.scheduler.profile import overrides
        return all(overrides(p, "quiet_until") for p in self.mode.parts())

    def quiet_until(self, now: float, running) -> float:
        """(Component.quiet_until; the scheduler asks only where every part of the mode is quiet)
        its parts' least, and the first minimum runtime to end (a victim may be taken then)."""
        return min(min(p.quiet_until(now, running) for p in self.mode.parts()), self._floor_end(now))

    def _floor_end(self, now: float) -> float:
        floors = [f for f in (self.mode.spec.reclaim_min_runtime_s, self.mode.spec.preempt_min_runtime_s) if f > 0]
        t = math.inf
        for rec in self.sched.running.values() if floors else ():
            since = self.started.get(rec.job_id, rec.first_start_s)
            for f in floors:
                if since is not None and since + f > now + _EPS:
                    t = min(t, since + f)
        return t
