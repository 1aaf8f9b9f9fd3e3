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

import numpy as np

from dlsched.core.errors import ConfigError
from dlsched.core.types import CPU, GPU, MEM, Launch, Migrate, Resize, Resume
from dlsched.scheduler import events as ev
from dlsched.scheduler.context import _SETTLED
from dlsched.tenancy.accounts import Accounts
from dlsched.tenancy.book import Book, request_of
from dlsched.tenancy.modes import Mode
from dlsched.tenancy.tree import DEFAULT_QUEUE, ROOT, QueueTree, line_of, with_default  # noqa: F401 (with_default: the runtime imports it from here)

_EPS = 1e-9


class View:
    """The walk's state, as the parts see it (dlsched.tenancy.points)."""

    def __init__(self, engine: Tenancy, book: Book, now: float, capacity: dict, demand: dict, victims: list):
        self.tree, self.book, self.now, self.capacity, self.demand = engine.tree, book, now, capacity, demand
        self.ledger, self.params, self._engine = engine.mode.ledger, engine.mode.spec, engine
        self.entitled: dict[str, float] = {}
        self.pending: dict[str, object] = {}
        self.cache: dict = {}
        self._victims = victims            # (record, leaf, request) of every possible victim

    def leaf_of(self, rec) -> str:
        return self._engine.leaf_of(rec)

    def request(self, rec) -> dict[str, float]:
        return self._engine.request(rec)

    def started(self, rec) -> float | None:
        return self._engine.started.get(rec.job_id, rec.first_start_s)

    def candidates(self, job) -> list[tuple[object, str, dict, str]]:
        """Running jobs that may be preempted for `job` now: (record, leaf, request, kind), kind
        `reclaim` (another queue) or `preempt` (its own), minimum runtimes and the
        non-preemptible class respected."""
        out = []
        leaf = self.leaf_of(job)
        npp = self.params.non_preemptible_priority
        for rec, vleaf, vreq in self._victims:
            if (npp is not None and rec.spec.priority >= npp) or not rec.spec.preemptible:
                continue
            kind = "preempt" if vleaf == leaf else "reclaim"
            floor = self.params.preempt_min_runtime_s if kind == "preempt" else self.params.reclaim_min_runtime_s
            since = self.started(rec)
            if floor > 0 and since is not None and self.now - since < floor - _EPS:
                continue
            out.append((rec, vleaf, vreq, kind))
        return out

    def fits(self, leaf: str, job, req: dict) -> str:
        """The whole admission check: "" or why not."""
        why = self.book.fits(leaf, req)
        if why:
            return why
        npp = self.params.non_preemptible_priority
        if npp is not None and job.spec.priority >= npp and self.params.non_preemptible_in_quota:
            b = self.book
            for r, x in req.items():
                mine = self._engine.nonpreemptible_use(b, leaf, r)
                if x > _EPS and mine + x > b.nominal(leaf, r) + _EPS:
                    return (f"non-preemptible (priority {job.spec.priority} >= {npp}): only within quota; "
                            f"{leaf} has {b.nominal(leaf, r):g} {r} nominal, {mine:g} used by such jobs")
        return self._engine.mode.entitlement.admits(self, leaf, job, req)


class _Victims:
    """The jobs a victim may be taken from, listed when first asked (most rounds ask nothing):
    (record, leaf, request) of each whole running DL job not released or decided in the round."""

    def __init__(self, engine: Tenancy, txn):
        self.engine, self.txn, self.items = engine, txn, None

    def __iter__(self):
        if self.items is None:
            jobs, txn, out = self.engine.sched.jobs, self.txn, []
            for jid, (leaf, req, g, _) in self.engine._hold.items():
                rec = jobs[jid]
                if (rec.spec.kind == "dl" and g > _EPS and not rec.unplaced() and jid not in txn.released
                        and jid not in txn.decided):
                    out.append((rec, leaf, req))
            self.items = out
        return iter(self.items)

    def drop(self, chosen) -> None:
        ids = {v.job_id for v in chosen}
        self.items = [t for t in self if t[0].job_id not in ids]


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
        self.refused: set[str] = set()

    # -- identity ----------------------------------------------------------------------------
    def leaf_of(self, rec) -> str:
        return getattr(rec, "spec", rec).queue or DEFAULT_QUEUE

    def request(self, rec) -> dict[str, float]:
        got = self._req.get(rec.job_id)
        if got is None or got[0] is not rec.tasks:
            got = (rec.tasks, request_of(rec.spec, rec.tasks, self.resources))
            self._req[rec.job_id] = got
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
        return book, _Victims(self, ctx.txn)

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
        lanes: dict[str, list] = {}
        asked: dict[str, float] = {}
        for rec in queue:
            leaf = rec.spec.queue or DEFAULT_QUEUE
            lane = lanes.get(leaf)
            if lane is None:
                lane = lanes[leaf] = []
                asked[leaf] = 0.0
            lane.append(rec)
            asked[leaf] += self.gpus(rec)
        for leaf, g in asked.items():
            for n in book.path(leaf):
                demand[n] = demand.get(n, 0.0) + g
        view = View(self, book, ctx.now, capacity, demand, victims)
        if self.mode.ledger is not None:
            self.mode.ledger.capacity = capacity.get("gpu", 0.0)
        view.entitled = self.mode.entitlement.compute(view)
        strict = self.strict
        admitted, self.refused = [], set()
        self.lanes = lanes
        heads = {leaf: 0 for leaf in lanes}
        order = self.mode.queue_order
        # a local order's key of a leaf's head changes only with that leaf: kept until the leaf
        # moves on or victims change other leaves (keys are unique: they end with the job id)
        keys: dict | None = {} if order.local else None
        penalties = []
        # "" or why not, per (leaf, request, priority), until the book changes: under a deep queue
        # most of a walk asks the same question of jobs of one shape in a queue over its quota
        # (the answer and its words are the same: view.fits reads the job only so)
        memo: dict | None = {} if getattr(self.mode.entitlement, "admits_by_request", False) else None
        while heads:
            best = None
            for leaf, i in heads.items():
                got = keys.get(leaf) if keys is not None else None
                if got is None:
                    rec = lanes[leaf][i]
                    got = (order.key(view, leaf, rec, self.request(rec)), rec)
                    if keys is not None:
                        keys[leaf] = got
                if best is None or got[0] < best[0]:
                    best = (got[0], leaf, got[1])
            _, leaf, rec = best
            if keys is not None:
                keys.pop(leaf, None)
            req = self.request(rec)
            why = self._lender_blocks(view, leaf, req) or _fits(view, memo, leaf, rec, req)
            if why:
                chosen = self.mode.victims.choose(view, rec, leaf, req) if why.startswith(("over", "non-")) else []
                if chosen and self._feasible(ctx, rec, [v for v, _ in chosen]):
                    for v, reason in chosen:
                        placements = list(v.placed.values())
                        ctx.txn.release(v.job_id, placements, [v.tasks[tp.task].demand for tp in placements],
                                        reason=f"{reason}: for {rec.job_id} ({leaf})")
                        book.add(self.leaf_of(v), self.request(v), -1.0)
                        self.accounts.preempted(self.leaf_of(v), reason)
                    view._victims.drop([v for v, _ in chosen])
                    if keys is not None:
                        keys.clear()              # other leaves' usage changed
                    if memo is not None:
                        memo.clear()
                    why = view.fits(leaf, rec, req)
            if why:
                rec.why = why
                self.refused.add(rec.job_id)
                view.pending.setdefault(leaf, rec)
                if strict:
                    for later in lanes[leaf][heads[leaf] + 1:]:
                        later.why = f"behind {rec.job_id} in queue {leaf} ({why})"
                        self.refused.add(later.job_id)
                    del heads[leaf]
                    continue
            else:
                book.add(leaf, req)
                if memo is not None:
                    memo.clear()
                admitted.append(rec)
                penalties.append((leaf, rec))
            heads[leaf] += 1
            if heads[leaf] >= len(lanes[leaf]):
                del heads[leaf]
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
        victims = self.mode.victims
        policy = getattr(victims, "reclaim", "any")
        if policy == "any" or not view.pending:
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

    def _feasible(self, ctx, job, victims) -> bool:
        trial = ctx.txn.fork()
        for v in victims:
            placements = list(v.placed.values())
            trial.release(v.job_id, placements, [v.tasks[tp.task].vector for tp in placements])
        for task in job.unplaced():
            ok = ctx.feasible(job.spec, task, trial.free)
            if not ok.any():
                return False
            trial.reserve(job.job_id, task, int(np.argmax(ok)))
        return True

    # -- outside rounds ------------------------------------------------------------------------
    def committed(self, now: float, decided: set) -> None:
        """The last round's walk was carried out: its admissions pay their entry penalties, and
        the accounts take its entitlements and each waiting job's kind of wait."""
        if getattr(self, "_view", None) is not None:
            self.accounts.round(now, self._view, self.lanes, decided, self.refused)
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
        floors = (self.mode.spec.reclaim_min_runtime_s, self.mode.spec.preempt_min_runtime_s)
        if not self.refused or max(floors) <= 0:
            return None
        t = math.inf
        for rec in self.sched.running.values():
            since = self.started.get(rec.job_id, rec.first_start_s)
            for f in floors:
                if f > 0 and since is not None and since + f > now + _EPS:
                    t = min(t, since + f)
        return None if t == math.inf else t


def _fits(view, memo: dict | None, leaf: str, rec, req: dict) -> str:
    """view.fits, kept in `memo` (None: not kept) per (leaf, request, priority)."""
    if memo is None:
        return view.fits(leaf, rec, req)
    k = (leaf, tuple(req.items()), rec.spec.priority)
    why = memo.get(k)
    if why is None:
        why = memo[k] = view.fits(leaf, rec, req)
    return why
