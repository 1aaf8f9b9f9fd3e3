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

import numpy as np

from dlsched.core.types import JobSpec, Status, TaskSpec, amount
from dlsched.scheduler.context import JobRecord, JobState, RoundContext
from dlsched.scheduler.transaction import Transaction

_EPS = 1e-9


class Placing:
    """The Scheduler's per-job placement and its reasons (mixed in; see the module)."""

    def _try(self, rec: JobRecord, ctx: RoundContext) -> bool:
        """Place one job of the queue loop; keep the reason it failed for `_explain`."""
        st = self.place(rec, ctx)
        self._tried.add(rec.job_id)
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

    def _explain(self, queue: list[JobRecord], txn, head: JobRecord | None) -> None:
        """Each waiting job's position (the round's order, `queue_order`) and why it still waits
        ("why pending?": GET /jobs and `dlsched jobs`): the placement's reason for a job the
        queue loop tried; behind the job a blocking profile stopped at, for one it did not reach;
        otherwise the policy's allocation or placer left it out. A job decided has no reason."""
        self.queue_order = tuple(r.job_id for r in queue)
        behind = None if head is None else f"behind {head.job_id} (in order: nothing starts before it)"
        for rec in queue:
            if rec.job_id in txn.decided:
                rec.why = ""
            elif rec.job_id in self._tried:
                continue                           # _try kept the placement's reason
            elif behind is not None:
                rec.why = behind
            else:
                rec.why = "left out by the policy this round (its allocation or time slices)"
        self._tried.clear()

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
