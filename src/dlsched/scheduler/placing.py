"""Step 3 of a round for one job (Scheduler.place): its unplaced tasks one at a time, each through
the profile's filters (candidate nodes) and scorers (weighted, each checked in [0, 1]) to the
best node (ties: the lowest id), reserved in the round's transaction, then committed (gang: all
or nothing); and what the round says of each job it left waiting (`_explain`: "why pending?").

A module of its own because it is the placement engine the round, the runtime's operator
commands and the policies' trial placements (RoundContext.choose_node) all call, with the speed-
ups that keep it cheap (the scores of a job's identical tasks kept, one filter without a copy,
the compiled loop of dlsched.scheduler.fastplace where it applies; benchmarks/bench_round.py
measures it), while dlsched.scheduler.core reads as the run loop. `Placing` is mixed into
Scheduler: its methods read the Scheduler's profile and state, as before.
"""
from __future__ import annotations

import bisect
from heapq import heappop, heappush

import numpy as np

from dlsched.core.types import GPU, JobSpec, Status, TaskSpec, amount
from dlsched.scheduler.context import JobRecord, JobState, RoundContext
from dlsched.scheduler.transaction import Transaction
from dlsched.scheduler.user_order import ByUser

_EPS = 1e-9


LEFT_OUT = "left out by the policy this round (its allocation or time slices)"


def _first(pair):
    return pair[0]


def _key_of(r: JobRecord):
    return r.key


class Explained:
    """A round's answer to "why pending?" for the jobs of its queue, computed per job when read:
    "" for a job it decided; None (the reason the queue loop set: JobRecord._why) for one it
    tried; behind the job a blocking profile stopped at, for one it did not reach; otherwise
    the policy's allocation or placer left it out. None too for a job not in its queue."""
    __slots__ = ("queue", "decided", "tried", "behind", "untried", "_pos", "_order", "undo")

    def __init__(self, queue, decided, tried, behind, untried=None) -> None:
        self.queue, self.decided, self.tried, self.behind = queue, decided, tried, behind
        self.untried = untried       # (where the loop stopped in the queue, the refusal, the jobs)
        self._pos = self._order = None
        # A static order's round reads the scheduler's waiting list itself, not a copy (a copy and
        # its release were O(waiting) a round: `python benchmarks/bench_scale.py --networks 8`,
        # docs/decisions/0059); each change to it after the round is noted here as (index, the
        # record deleted there, or None for one inserted there), and undone when read.
        self.undo: list | None = None

    def order(self) -> tuple[str, ...]:
        if self._order is None:
            q, undo = self.queue, self.undo
            if undo:
                q = list(q)
                for i, rec in reversed(undo):
                    if rec is None:
                        del q[i]
                    else:
                        q.insert(i, rec)
            self._order = tuple(r.job_id for r in q)
        return self._order

    def reason(self, job_id: str) -> str | None:
        if job_id in self.decided:
            return ""
        if job_id in self.tried:
            return None
        pos = self._pos
        if pos is None:
            pos = self._pos = {j: i for i, j in enumerate(self.order())}
        i = pos.get(job_id)
        if i is None:
            return None
        if self.untried is not None and i >= self.untried[0]:
            return self.untried[1](self.untried[2][job_id])
        return self.behind if self.behind is not None else LEFT_OUT


class Placing:
    """The Scheduler's per-job placement and its reasons (mixed in; see the module)."""

    def _enqueue(self, rec: JobRecord) -> None:
        if rec.queued:
            return
        rec.queued = True
        self._refusal.add(rec)
        if self._static:
            rec.key = (*self.profile.order.key(rec, None), rec.submit_time_s, rec.job_id)
            q = self.queue
            if type(q) is list:         # the runtime's (Scheduler.run: only a lent list is sorted)
                i = bisect.bisect_right(q, rec.key, key=_key_of)
                self._note(i, None)
                q.insert(i, rec)
                return
            self._note(q.bisect_key_right(rec.key), None)
            q.add(rec)
        else:
            self.queue.append(rec)
            if self._kept is not None:
                self._kept.add(rec)

    def _remove_from_queue(self, rec: JobRecord) -> None:
        if not rec.queued:
            return
        rec.queued = False
        self._refusal.remove(rec)
        if self._static:
            q = self.queue
            i = bisect.bisect_left(q, rec.key, key=_key_of) if type(q) is list else q.bisect_key_left(rec.key)
            if i >= len(q) or q[i] is not rec:
                i = q.index(rec)
            self._note(i, rec)
            del q[i]
            return
        if self._kept is not None:
            self._kept.remove(rec)
        self.queue.remove(rec)

    def _note(self, i: int, rec: JobRecord | None) -> None:
        """The waiting list changes at index i (rec deleted there, or None: one inserted): noted
        for the last round's Explained if it reads the list itself (Explained.undo)."""
        ex = self._why_box.ex
        if ex is not None and ex.queue is self.queue:
            if ex.undo is None:
                ex.undo = []
            ex.undo.append((i, rec))

    def _try(self, rec: JobRecord, ctx: RoundContext) -> bool:
        """Place one job of the queue loop; keep the reason it failed for `_explain`."""
        refused = self._refuse(rec, ctx)
        self._tried.add(rec.job_id)
        if refused is not None:
            rec.why = refused[1]
            return False
        st = self.place(rec, ctx)
        if not st.ok:
            rec.why = "; ".join(st.reasons) or "does not fit"
        return st.ok

    def _place_per_queue(self, queue: list[JobRecord], ctx: RoundContext) -> None:
        """The placement loop under a tenancy (dlsched.tenancy.engine): as the plain loop, but a
        strict queue's job that is not placed blocks only the rest of its own queue."""
        txn, tenancy = ctx.txn, self.tenancy
        strict = tenancy.strict
        blocked: dict[str, str] = {}
        for rec in queue:
            if rec.job_id in txn.decided:
                continue
            leaf = tenancy.leaf_of(rec)
            if leaf in blocked:
                rec.why = f"behind {blocked[leaf]} in queue {leaf} (in order: nothing starts before it)"
                self._tried.add(rec.job_id)
                continue
            if not self._try(rec, ctx) and strict:
                blocked[leaf] = rec.job_id

    def _place_dynamic(self, queue: list[JobRecord], ctx: RoundContext, keyed_at) -> JobRecord | None:
        """The queue loop of a dynamic order (DRF's progressive filling): the smallest key is
        picked again after every placement. Keys change only when the round decides something:
        in between, the next smallest is the next in order (keys are unique), so the rest is
        keyed (`Order.keys`, all at once) and sorted only then; `keyed_at` says when `queue` was
        keyed in that order (None: not in key order, under a tenancy). The same jobs in the same
        order as a min() per try, without its O(queue^2) under a deep queue; the loop stops once
        nothing left could start (`_stopped`). Returns the job a blocking profile stopped at."""
        if keyed_at is not None and type(self._kept) is ByUser:
            return self._place_by_user(queue, ctx, self._kept)
        txn, order, blocking = ctx.txn, self.profile.order, self.profile.blocking
        must = self._refusal.must
        ordered, at = [r for r in queue if r.job_id not in txn.decided], 0
        seen, check = None, True
        while at < len(ordered):
            now = (len(txn.decided), len(txn.plan.decisions))
            if seen != now or check:
                check = False
                if not blocking and self._stopped(queue, 0, ctx):
                    return None                    # nothing left can start
            if seen != now:
                if seen is not None or now != keyed_at:
                    rest = ordered[at:]
                    keys = [(*k, r.spec.submit_time_s, r.job_id) for k, r in zip(order.keys(rest, ctx), rest)]
                    ordered, at = [r for _, r in sorted(zip(keys, rest), key=_first)], 0
                seen = now
            rec = ordered[at]
            at += 1
            if not self._try(rec, ctx) and blocking:
                return rec
            check = rec.job_id in must
        return None

    def _place_by_user(self, queue: list[JobRecord], ctx: RoundContext, by: ByUser) -> JobRecord | None:
        """`_place_dynamic` for an order whose key is the user's (scheduler/user_order.py): the
        next job is the smallest of each user's first untried job by (user key, submit_time_s,
        job_id), from a heap of the users' first jobs built again when the keys change (after
        a decision). The same jobs in the same order as sorting the queue, at log(users) a try."""
        txn, blocking, must = ctx.txn, self.profile.blocking, self._refusal.must
        before = set(txn.decided)                  # decided before the loop: not tried
        lists = by.lists
        at = dict.fromkeys(lists, 0)
        seen, check, heap, keys = None, True, [], None

        def head(user: str, i: int) -> None:       # the user's first job from i not decided before
            lst = lists[user]
            while i < len(lst) and lst[i].job_id in before:
                i += 1
            at[user] = i
            if i < len(lst):
                r = lst[i]
                heappush(heap, ((*keys[user], r.spec.submit_time_s, r.job_id), user))

        while True:
            now = (len(txn.decided), len(txn.plan.decisions))
            if seen != now or check:
                check = False
                if not blocking and self._stopped(queue, 0, ctx):
                    return None                    # nothing left can start
            if seen != now:
                keys, seen, heap = by.user_keys(ctx), now, []
                for user in lists:
                    head(user, at[user])
            if not heap:
                return None
            _, user = heappop(heap)
            rec = lists[user][at[user]]
            head(user, at[user] + 1)
            if not self._try(rec, ctx) and blocking:
                return rec
            check = rec.job_id in must

    def _place_in_order(self, queue: list[JobRecord], ctx: RoundContext) -> JobRecord | None:
        """The queue loop: each job not yet decided tried in order; a blocking profile stops at
        the first that does not start (returned). A profile that does not block stops once no
        job left could start on the GPUs free (`_stopped`): `_refuse` would refuse each of them
        with the same words (`Explained.reason` gives them when asked), so the decisions are the
        same; a deep queue's round then ends at its last placement, not at its last job (issue
        "Scale ... deep queues"; `python benchmarks/bench_policies.py --deep`)."""
        txn, blocking = ctx.txn, self.profile.blocking
        decided = txn.decided
        stop = not blocking
        if stop and self._stopped(queue, 0, ctx):
            return None
        must = self._refusal.must
        for i, rec in enumerate(queue):
            if rec.job_id in decided:
                continue
            if self._try(rec, ctx) or rec.job_id in must:   # (the last job that had to be tried?)
                if stop and self._stopped(queue, i + 1, ctx):
                    return None
            elif blocking:
                return rec
        return None

    def _stopped(self, queue, start: int, ctx) -> bool:
        """No job of the queue not decided this round can start on the GPUs free now: `_refuse`
        would refuse each of them (dlsched.scheduler.refusal counts them by class; `gpu_refusal`
        gives the words). Kept in `_skipped` for `_explain`: the jobs of queue[start:] not tried
        are explained so."""
        txn = ctx.txn
        free = txn.free_view() if type(txn) is Transaction else txn.free
        col = free[ctx.snap.up, GPU]
        if not len(col):
            return False
        total, block = float(col.sum()), float(col.max())
        if not self._refusal.none_can_start(ctx.snap.cluster, total, block, txn.decided, self._tried):
            return False
        self._skipped = (queue, start, total, block)
        return True

    def gpu_refusal(self, rec: JobRecord, total: float, block: float) -> str:
        """`_refuse`'s words, joined, for a job `_stopped` left untried."""
        need, first = rec.gpu_need()
        n = len(rec.tasks)
        gang = self.profile.gang and rec.spec.is_gang
        if gang and n > 1 and need > total + _EPS:
            return f"gang: needs {amount(GPU, need)} in all; {max(total, 0.0):g} free"
        committed = f"gang: 0 of {n} tasks fit" if gang else f"partial: 0 of {n} tasks placed"
        return (f"{committed}; needs {amount(GPU, first, rec.spec.gpu_type)} on one node; "
                f"the largest free block is {max(block, 0.0):g}")

    def _explain(self, queue: list[JobRecord], txn, head: JobRecord | None) -> None:
        """Publish why each job of the round's queue still waits ("why pending?": GET /jobs and
        `dlsched jobs`), as an Explained read when asked (JobRecord.why): O(1) per round, where
        writing a reason into every waiting record was most of a deep-queue round (issue "Scale
        ... deep queues"; `python benchmarks/bench_scale.py --networks 8`; decision 0052)."""
        behind = None if head is None else f"behind {head.job_id} (in order: nothing starts before it)"
        skipped = self._skipped
        self._skipped = None
        untried = None
        if skipped is not None and skipped[0] is queue:
            _, start, total, block = skipped
            untried = (start, lambda rec: self.gpu_refusal(rec, total, block), self.jobs)
        self._why_box.ex = Explained(queue, txn.decided, self._tried, behind, untried)
        self._tried = set()

    @property
    def queue_order(self) -> tuple[str, ...]:
        """The last round's queue in the policy's order (and, under a tenancy, the jobs its
        admission refused after them): built when read."""
        ex, extra = self._why_box.ex, self._queue_extra
        tail = () if extra is None else tuple(r.job_id for r in extra[0] if r.job_id in extra[1])
        return tail if ex is None else ex.order() + tail

    def _refuse(self, rec: JobRecord, ctx: RoundContext) -> tuple[Status, str] | None:
        """`place`'s answer (and its reasons joined), without trying, for a job the free GPUs
        certainly cannot take: a gang asking for more GPUs than are free in all, or (the fits
        filter alone, no GPU type) a first task larger than the largest free block. The same
        Status, word for word, as `place` would give (tests/unit/test_deep_queue.py); None when
        the job may fit. Under a deep queue most jobs are such: a round then costs a lookup per
        waiting job, not a placement (issue "Scale ... deep queues"; `python benchmarks/
        bench_policies.py --deep`, RESULTS.md block `deep-queue`). The free GPUs are read once
        per round and again after each job placed; the answers are kept per job shape and free
        GPUs (total or largest block) across rounds: an answer is a function of those alone
        (`commit` with nothing reserved changes nothing). On the 1M-job run at 8:1, about two
        rounds a job, making each answer again and masking the free column were a tenth of
        the run (`python benchmarks/bench_scale.py --million`; decision 0063)."""
        txn = ctx.txn
        room = self._room
        if room is None or room[0] is not txn or room[1] != len(txn.decided):
            free = txn.free_view() if type(txn) is Transaction else txn.free
            col, up = free[:, GPU], ctx.snap.up
            if not up.all():
                col = col[up]
            room = self._room = (txn, len(txn.decided), float(col.sum()), float(col.max()) if len(col) else None)
        _, _, total, block = room
        if block is None:
            return None
        need, first = rec.gpu_need()
        if rec.placed or rec.done_tasks:
            n_todo, n_all = len(rec.unplaced()), len(rec.tasks) - len(rec.done_tasks)
        else:
            n_todo = n_all = len(rec.tasks)
        spec = rec.spec
        gang = self.profile.gang and spec.is_gang
        if gang and n_todo > 1 and need > total + _EPS:
            key = ("gang", need, total)
        elif self._fits_only and first > 0 and block < first - _EPS and ctx.snap.cluster.type_mask(spec) is None:
            key = ("task", first, spec.gpu_type, gang, n_all, n_all - n_todo, block)
        else:
            return None
        said = self._said
        out = said.get(key)
        if out is None:
            if len(said) >= 4096:           # (bounded: free totals vary over a run)
                said.clear()
            if key[0] == "gang":
                st = Status.unschedulable(f"gang: needs {amount(GPU, need)} in all; {max(total, 0.0):g} free")
            else:
                why = f"needs {amount(GPU, first, spec.gpu_type)} on one node; the largest free block is {max(block, 0.0):g}"
                committed = self.commit(rec, ctx)      # nothing reserved: place's own ending
                st = Status.unschedulable(*committed.reasons, why) if not committed.ok else Status.unschedulable(why)
            out = said[key] = (st, "; ".join(st.reasons) or "does not fit")
        return out

    def place(self, rec: JobRecord, ctx: RoundContext) -> Status:
        """Place the job's unplaced tasks one at a time, then commit (gang: all or nothing)."""
        txn = ctx.txn
        status = Status.success()
        memo: dict = {}     # scores kept across the job's identical tasks (see choose_node)
        todo = rec.unplaced()
        if self.profile.gang and rec.spec.is_gang and len(todo) > 1:
            # All or nothing: a gang whose total demand exceeds the cluster's free total cannot
            # be placed; say so without trying its tasks one by one.
            need = np.sum([t.vector for t in todo], axis=0)
            have = (txn.free_view() if type(txn) is Transaction else txn.free)[ctx.snap.up].sum(axis=0)
            short = np.flatnonzero(need > have + _EPS)
            if len(short):
                r = int(short[0])
                return Status.unschedulable(f"gang: needs {amount(r, need[r])} in all; {max(have[r], 0.0):g} free")
        # the same loop compiled, where it applies (scheduler/fastplace.py): the same placements
        placed = None if self._fast is None else self._fast.place(ctx, rec.job_id, rec.spec, todo)
        if placed is not None:
            if placed < len(todo):
                status = Status.unschedulable(self.choose_node(ctx, rec.spec, todo[placed])[1])
        else:
            for task in todo:
                node, why = self.choose_node(ctx, rec.spec, task, memo)
                if node is None:
                    status = Status.unschedulable(why)
                    break
                txn.reserve(rec.job_id, task, node)
                memo["last"] = node
        committed = self.commit(rec, ctx)
        if committed.ok:
            return status
        # how far it got (the commit's "gang: 3 of 4 tasks fit"), then why the next did not fit
        return Status.unschedulable(*committed.reasons, *status.reasons) if not status.ok else committed

    def commit(self, rec: JobRecord, ctx: RoundContext, *, gang: bool | None = None) -> Status:
        """Commit what the round reserved for this job (gang: the profile's, unless given)."""
        gang = self.profile.gang if gang is None else gang
        total = len(rec.tasks) - len(rec.done_tasks)
        return ctx.txn.commit(rec.job_id, total_tasks=total, already_placed=len(rec.placed),
                              # a bag of independent tasks is never a gang: its tasks need not co-run
                              gang=gang and rec.spec.is_gang,
                              resume=rec.state is JobState.SUSPENDED)

    def choose_node(self, ctx: RoundContext, job: JobSpec, task: TaskSpec,
                    memo: dict | None = None, allowed: np.ndarray | None = None) -> tuple[int | None, str]:
        """The best node for the task, or (None, why). With `memo` (one per job in a round) and
        only node-local scorers (a node's score depends on that node alone), the scores of the
        previous identical task are reused and only the node it went to is re-scored: placing a
        task changes nothing else, and free resources only shrink while a job is placed, so the
        candidates can only shrink too."""
        txn = ctx.txn
        # read only here: a round that reserves nothing never copies the snapshot's free array
        free = txn.free_view() if type(txn) is Transaction else txn.free
        filters = self.profile.filters
        if allowed is None and len(filters) == 1:
            # one filter (the common case): its mask and `up`, without a copy of `up` first
            f = filters[0]
            m = f.filter(ctx, job, task, free)
            ok = m.ok & ctx.snap.up
            i = int(np.argmax(ok))
            if not ok[i]:
                return None, m.reason or f"filter {f.name}"
            if self._first_fit:
                return i, ""                # the first node that fits
        else:
            ok = ctx.snap.up.copy()
            if allowed is not None:            # an operator's choice of nodes (runtime migrate)
                ok &= allowed
                if not ok.any():
                    return None, "none of the allowed nodes is up"
            for f in filters:
                m = f.filter(ctx, job, task, free)
                ok &= m.ok
                if not ok.any():
                    return None, m.reason or f"filter {f.name}"
            if self._first_fit:
                return int(np.argmax(ok)), ""   # the first node that fits (ok.any() holds here)
        if memo is not None and self._local_scores and memo.get("demand") == task.demand:
            full = memo["scores"]
            n = memo["last"]
            full[n] = self._combined(ctx, job, task, free, np.array([n]))[0] if ok[n] else -np.inf
            masked = np.where(ok, full, -np.inf)
            return int(np.argmax(masked)), ""
        cand = np.flatnonzero(ok)
        total = self._combined(ctx, job, task, free, cand)
        if memo is not None and self._local_scores:
            full = np.full(len(ok), -np.inf)
            full[cand] = total
            memo["demand"], memo["scores"] = task.demand, full
        return int(cand[int(np.argmax(total))]), ""

    def _combined(self, ctx, job, task, free, cand) -> np.ndarray:
        """Weighted sum of the profile's scorers over candidate nodes (each checked in [0, 1])."""
        total = np.zeros(len(cand))
        for scorer, w in self.profile.scorers:
            s = np.asarray(scorer.score(ctx, job, task, free, cand), dtype=np.float64)
            if self.check_scores and (s.shape != cand.shape or (s < -1e-9).any() or (s > 1 + 1e-9).any()
                                      or np.isnan(s).any()):
                raise AssertionError(f"scorer {scorer.name} returned scores outside [0, 1]: {s[:5]}")
            total += w * s
        # ties go to the lowest node: scores equal but for float noise (x * (1 / x) is 1 -
        # 1e-16 for some capacities, e.g. a Ray node's memory) are made equal first
        return np.round(total, 12)
