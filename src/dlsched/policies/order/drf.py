"""Dominant Resource Fairness (Ghodsi et al., "Dominant Resource Fairness: Fair Allocation of
Multiple Resource Types", NSDI 2011), as a dynamic job order.

A user's dominant share is their largest share of any one resource:

    s_u = max_r  U_u[r] / C[r]          r in {gpu, cpu, mem, disk, net} with C[r] > 0

    U_u[r] = demand of every task user u's jobs hold now (running or partly placed jobs)
           + demand of every task this round has already given, or tentatively reserved for,
             u's jobs
    C[r]   = capacity of r summed over all nodes of the cluster (down ones too, so that
             shares do not jump when a node fails)

    key(job, ctx) = (s_{job.user},)

DRF's progressive filling - "repeatedly launch a task of the user with the lowest dominant share"
- falls out of the framework: the order is `dynamic`, so after every job the round places it
re-evaluates the keys and the next job comes from the user whose share is then the smallest
(ties: earlier submission, then job id). With one task per job this is exactly the paper's
algorithm; a multi-task job is placed as one step (all of a gang at once).

Shares are cached per round for the users with waiting jobs (only their shares order the queue)
and brought up to date incrementally from the plan's new decisions: a round calls key() for every
waiting job after every placement, so recomputing holdings on each call would cost
O(queue x running) per call.

Holdings are kept between rounds too (issue 14): per job and per user, updated at the start of a
round for the jobs that the plans applied and the events observed since the last round named
(`ChangedJobs`), where a pass over every running job at every round was most of DRF's time on
the Philly trace. The per-user sums are then added in another order than a pass over the
running jobs would: they are the same floats only when every demand is an integer-valued float
(the sums are then exact), so the kept sums are used only while that holds; the first demand
that is not makes every later round sum the holdings from the records, as before.
"""
from __future__ import annotations

import numpy as np

from dlsched.core.types import NRES, Launch, Resume, Suspend
from dlsched.policies.actions.gandiva_common import ChangedJobs
from dlsched.scheduler.framework import Order, ProfileSpec, register, register_profile


@register("order", "drf", source="Ghodsi et al., NSDI 2011 (DRF)")
class DrfOrder(Order):
    """Dominant resource fairness: the job of the user with the smallest dominant share first."""
    static = False   # shares change as jobs start and finish
    dynamic = True   # ... and as the round itself places jobs (progressive filling)

    def __init__(self) -> None:
        # Per-round cache. The round's Transaction object itself identifies the round (a new
        # one per round); keeping a reference, not an id(), means a later round's object can
        # never be mistaken for it.
        self._txn = None
        self._users: set[str] = set()                # users whose shares this round computes
        self._has: np.ndarray | None = None          # resources the cluster has (C[r] > 0)
        self._cap: np.ndarray | None = None          # C[r] of those resources
        self._used: dict[str, np.ndarray] = {}       # user -> U_u (held + committed this round)
        self._held: dict[str, tuple[str, np.ndarray]] = {}   # job -> (user, demand it holds)
        self._vectors: dict[str, tuple[tuple, np.ndarray]] = {}   # job -> (placed tasks, demand)
        self._seen = 0                               # plan decisions already folded into _used
        self._shares: dict[str, float] = {}          # user -> s_u, valid for _shares_at
        self._shares_at = -1
        # Kept between rounds (see the module docstring): what each job and each user holds.
        self._changed = ChangedJobs()
        self._kheld: dict[str, tuple[str, np.ndarray]] = {}   # job -> (user, demand it holds)
        self._kused: dict[str, np.ndarray] = {}               # user -> sum of its jobs' demands
        self._exact = True          # every held demand so far integer-valued: kept sums exact
        self._kept = False          # _kheld / _kused are up to date with the records

    def observe(self, now: float, events: list, applied) -> None:
        """Note the jobs whose holdings may have changed (the next round updates those)."""
        if self._exact:
            self._changed.observe(events, applied)

    def key(self, job, ctx) -> tuple:
        if ctx is None:   # only static orders are keyed without a round; answer anyway
            return (0.0,)
        return self._user_key(job.spec.user, ctx)

    def _user_key(self, user: str, ctx) -> tuple:
        if ctx.txn is not self._txn or user not in self._users:
            self._start_round(ctx, user)
        n = len(ctx.txn.plan.decisions)
        if n != self._shares_at:
            self._fold_decisions(ctx)
            self._shares = self._dominant_shares(ctx)
            self._shares_at = n
        return (self._shares.get(user, 0.0),)

    # a job's key is its user's: the scheduler keeps the queue per user (scheduler/user_order.py)
    key_per_user = True

    def user_keys(self, users: list[str], ctx) -> list[tuple]:
        """The key of each user's jobs (the users of the waiting jobs, in a fixed order)."""
        return [self._user_key(u, ctx) for u in users]

    def keys(self, jobs: list, ctx) -> list[tuple]:
        """`key` of each job at once: the shares brought up to date by the first, then read per
        user (one dict lookup a job instead of a call; the deep queue's rounds key thousands)."""
        if ctx is None or not jobs:
            return [self.key(j, ctx) for j in jobs]
        self.key(jobs[0], ctx)
        of = [j.spec.user for j in jobs]
        users = self._users
        missing = set(of) - users
        if missing:                      # each user's share once (a user's jobs share it)
            for u in sorted(missing):
                self._user_key(u, ctx)
        get = self._shares.get
        return [(get(u, 0.0),) for u in of]

    # -- the cache ------------------------------------------------------------------------------
    def _start_round(self, ctx, user: str) -> None:
        """What every user with a waiting job holds at the start of the round (jobs an action
        already released in this round hold nothing). Only those users' shares order the
        queue, so the holdings of the others are not summed (a round starts with a pass over
        every running job: it must stay cheap)."""
        new_round = ctx.txn is not self._txn
        if new_round:
            self._users = {r.spec.user for r in ctx.queue}
        self._users.add(user)          # key() asked about a job outside the queue
        users = self._users
        self._txn = ctx.txn
        cap = ctx.snap.capacity.sum(axis=0)
        self._has = cap > 0
        self._cap = cap[self._has]
        self._held, self._seen, self._shares, self._shares_at = {}, 0, {}, -1
        if new_round and self._exact:
            self._update_kept(ctx)
        if self._exact:
            # The kept holdings, less the jobs an action released this round; this round's
            # decisions go into a layer over them (_held: job -> (user, demand) or None).
            used = {u: self._kused[u] for u in users if u in self._kused}
            for jid in ctx.txn.released:
                hit = self._kheld.get(jid)
                if hit is not None and hit[0] in used:
                    used[hit[0]] = used[hit[0]] - hit[1]
                    self._held[jid] = None
            self._used = used
            return
        released = ctx.txn.released
        held, old, vectors = self._held, self._vectors, {}
        by_user: dict[str, list[np.ndarray]] = {}
        # Running jobs, plus waiting jobs that hold some tasks (partly placed, non-gang).
        # A bag of tasks that runs is in both lists: count it once.
        for rec in (*ctx.running, *ctx.queue):
            placed = rec.placed
            user = rec.spec.user
            if not placed or user not in users:
                continue
            jid = rec.spec.job_id
            if jid in held or jid in released:
                continue
            # A job's held vector changes only when its placed tasks do: reuse last round's.
            sig = (rec.tasks, tuple(placed))
            hit = old.get(jid)
            v = hit[1] if hit is not None and hit[0] == sig else _demand(rec, placed)
            vectors[jid] = (sig, v)
            held[jid] = (user, v)
            if user in by_user:
                by_user[user].append(v)
            else:
                by_user[user] = [v]
        self._vectors = vectors   # only jobs that still hold something (and whose user waits)
        self._used = {u: np.sum(vs, axis=0) for u, vs in by_user.items()}

    def _fold_decisions(self, ctx) -> None:
        """Add the plan's decisions made since the last call: launches and resumes take
        resources, a suspension gives back what the job held. Migrations keep the same demand."""
        decisions = ctx.txn.plan.decisions
        for d in decisions[self._seen:]:
            if isinstance(d, (Launch, Resume)):
                rec = ctx.jobs[d.job_id]
                v = _demand(rec, [tp.task for tp in d.placements])
                user, held = self._held_of(d.job_id) or (rec.spec.user, np.zeros(NRES))
                self._held[d.job_id] = (user, held + v)
                self._add(user, v)
            elif isinstance(d, Suspend):
                hit = self._held_of(d.job_id)
                if hit is not None:
                    self._held[d.job_id] = None
                    self._add(hit[0], -hit[1])
        self._seen = len(decisions)

    def _held_of(self, jid: str):
        """(user, demand) the job holds now in this round, or None."""
        if jid in self._held:
            return self._held[jid]
        if self._exact:
            hit = self._kheld.get(jid)
            if hit is not None and hit[0] in self._users:
                return hit
        return None

    def _update_kept(self, ctx) -> None:
        """Bring the kept holdings up to date with the records: the jobs noted as changed, or
        every job (before any observe: a round built by hand). Leaves _exact False, and the
        kept view unused from then on, at the first demand that is not integer-valued."""
        changed = self._changed.take()
        if changed is None or not self._kept:
            self._kheld, self._kused = {}, {}
            self._kept = changed is not None
            recs = {r.spec.job_id: r for r in (*ctx.running, *ctx.queue)}.values()
        else:
            recs = []
            for jid in sorted(changed):
                old = self._kheld.pop(jid, None)
                if old is not None:
                    self._kused[old[0]] = self._kused[old[0]] - old[1]
                rec = ctx.jobs.get(jid)
                if rec is not None:
                    recs.append(rec)
        for rec in recs:
            placed = rec.placed
            if not placed:
                continue
            v = _demand(rec, placed)
            if not (np.all(v == np.round(v)) and np.all(np.abs(v) < _EXACT)):
                self._exact = False
                return
            user = rec.spec.user
            self._kheld[rec.spec.job_id] = (user, v)
            u = self._kused.get(user)
            u = v.copy() if u is None else u + v
            if not np.all(u < _EXACT):
                self._exact = False
                return
            self._kused[user] = u

    def _dominant_shares(self, ctx) -> dict[str, float]:
        used = {u: v.copy() for u, v in self._used.items()}
        # Reservations not yet committed (normally none between two placements: a job's
        # reservations are committed - a new decision - or discarded together).
        for rec in (ctx.queue if ctx.txn.has_reserved() else ()):
            tps = ctx.txn.reserved(rec.job_id)
            if tps:
                v = _demand(rec, [tp.task for tp in tps])
                used[rec.spec.user] = used.get(rec.spec.user, np.zeros(NRES)) + v
        if not len(self._cap):
            return {}
        return {user: float((v[self._has] / self._cap).max()) for user, v in used.items()}

    def _add(self, user: str, v: np.ndarray) -> None:
        if user in self._used:
            self._used[user] = self._used[user] + v
        else:
            self._used[user] = v.copy()


_EXACT = 2.0 ** 50      # integer-valued floats below this add up exactly in any order


def _demand(rec, task_indices) -> np.ndarray:
    """Summed demand vector of the given tasks of a job record."""
    v = np.zeros(NRES)
    for i in task_indices:
        v += rec.tasks[i].vector
    return v


register_profile(ProfileSpec(
    name="drf", source="Ghodsi et al., NSDI 2011",
    description="Dominant resource fairness across users (progressive filling), first fit, gang; "
                "a job that does not fit does not block the others",
    order="drf", filters=("fits",), scores=(("first_fit", 1.0),), gang=True, blocking=False))
