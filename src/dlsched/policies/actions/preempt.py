"""Priority preemption: the profile's order decides who holds the GPUs, running jobs included.

Source: the preemption of Tiresias (Gu et al., "Tiresias: A GPU Cluster Manager for Distributed
Deep Learning", NSDI 2019) as Pollux's simulator implements it (petuum/adaptdl,
simulator/tiresias.py, `TiresiasPolicy.optimize`): every interval, walk the jobs of the
highest-priority queue first; a job is marked RUNNING while its GPU count fits in what is left
of the cluster's GPUs, PENDING otherwise, and a PENDING job that held GPUs loses them
(preempted). This module is that walk for any order (Tiresias's queues, SRTF, ...):

    jobs   = running DL jobs (ctx.running) + waiting jobs (ctx.queue), sorted ONCE by
             profile.order.key(job, ctx) + (submit_time_s, job_id)       (waiting jobs: the key
             the round already computed)
    left   = GPUs of the nodes that are up - GPUs held by everything that is not a candidate
             (bags of tasks, partly placed jobs, jobs placed earlier in this round, protected jobs)
    for job in jobs:  need = GPUs of all its (unplaced) tasks - a gang gets all or nothing
        need <= left : chosen, left -= need
        otherwise    : not chosen; a running job that is not chosen is suspended
                       (ctx.txn.release(job_id, placements, demands))

The chosen waiting jobs are then placed by the round's ordinary placement loop (this action
places nothing); like Pollux's walk, a waiting job that does not fit does not block later ones.

Choices beyond Pollux's walk, each documented where it is made:
- `min_run_s` (anti-thrash): a running job that started (launch, resume, migration) less than
  min_run_s ago is never preempted; its GPUs are taken before the walk. Default 0: Pollux's
  Tiresias has no such guard. Above the backend's restart delay it guarantees that every run
  trains for a while (a resumed job holds its GPUs without progress while it restores); orders
  that can promote a job back (Tiresias's starvation guard) need that to make progress.
- Feasibility: Pollux counts GPUs only (its nodes are identical and its jobs are replicas of one
  GPU). Here tasks may need several GPUs, CPU or memory, so counting alone may suspend a job for
  a waiting one that then does not fit anywhere (and the victim would come back next round: a
  thrash every round). When the walk would suspend anybody, the chosen waiting jobs are first
  placed on a scratch copy of the free resources (victims released; the profile's filters, first
  node that passes); a chosen job that fails there is left out and the walk is redone. So a job is
  suspended only when the jobs it makes room for can be placed.
- Only DL jobs are preempted (a DL job keeps its progress across a suspension: a checkpoint).
  Bags of independent tasks neither preempt nor are preempted: suspending one would lose the
  progress of its running tasks.
- A resumed job pays the backend's restart delay (Pollux: 30 s `rescale_time`, dlsched's
  SimBackend default restart_delay_s = 30).

Cost per round: a pass over the waiting jobs until their GPUs exceed the free ones (a few jobs
under a deep queue); then, only if some running job may be preempted, one key per running job,
a sort of the running jobs and a walk of the waiting ones in their order (the round's queue) that
stops once nothing can change (`_walk`); the scratch placement only in rounds that would suspend
somebody.
"""
from __future__ import annotations

import math

import numpy as np

from dlsched.core.types import GPU, Launch, Migrate, Resize, Resume
from dlsched.scheduler import events as ev
from dlsched.scheduler.framework import Action, register

_EPS = 1e-9


@register("action", "preempt",
          source="Gu et al., NSDI 2019 (Tiresias); petuum/adaptdl simulator/tiresias.py (Pollux)")
class Preempt(Action):
    """Priority preemption: running jobs that the order does not give GPUs to are suspended."""
    needs = frozenset(('preemption',))  # backend capabilities (dlsched.scheduler.backend)

    def __init__(self, min_run_s: float = 0.0, enabled: bool = True) -> None:
        if min_run_s < 0:
            raise ValueError(f"min_run_s must be >= 0, got {min_run_s}")
        self.min_run_s = float(min_run_s)
        self.enabled = bool(enabled)
        self._started: dict[str, float] = {}   # job -> time of its last launch / resume / move
        # (the round's transaction, whether that round got to the walk): orders whose quiet
        # time depends on it read it (SrtfOrder.quiet_until); never read by the action itself
        self.walked: tuple | None = None

    # -- what happened: remember when jobs (re)start ---------------------------------------
    def observe(self, now: float, events: list, applied) -> None:
        """The start time of every job a plan launched, resumed, migrated or resized (applied
        at `now`); finished jobs are forgotten."""
        if applied is not None:
            for d in applied.decisions:
                if isinstance(d, (Launch, Resume, Migrate, Resize)):
                    self._started[d.job_id] = now
        for e in events:
            if isinstance(e, ev.JobFinish):
                self._started.pop(e.job_id, None)

    def quiet_until(self, now: float, running) -> float:
        """Who may be suspended changes with time only as min_run_s protections run out."""
        if not self.enabled or self.min_run_s <= 0:
            return math.inf
        t = math.inf
        for job in running:
            since = self._started.get(job.job_id, job.first_start_s)
            if since is not None and since + self.min_run_s > now:
                t = min(t, since + self.min_run_s)
        return t

    # -- before placement: decide who is suspended ---------------------------------------------
    def before_place(self, ctx) -> None:
        if not self.enabled:
            return
        txn = ctx.txn
        self.walked = (txn, False)
        free = float(np.clip(txn.free[ctx.snap.up, GPU], 0.0, None).sum())
        if not _need_exceeds(ctx, free):
            return   # every waiting job's GPUs are free already: the walk would suspend nobody
        self.walked = (txn, True)
        candidates = []
        for rec in ctx.running:
            if (rec.spec.kind != "dl" or rec.job_id in txn.released or rec.job_id in txn.decided
                    or not rec.placed or rec.unplaced() or not rec.spec.preemptible):
                continue   # not a whole running preemptible DL job: its GPUs are fixed
            held = rec.held_gpus()
            if held <= _EPS:
                continue
            if self.min_run_s > 0:
                since = self._started.get(rec.job_id, rec.first_start_s)
                if since is not None and ctx.now - since < self.min_run_s:
                    continue   # anti-thrash: keeps its GPUs (fixed, like the others)
            candidates.append((rec, held))
        if not candidates:
            return   # nobody can be preempted
        cap = float(ctx.snap.capacity[ctx.snap.up, GPU].sum())
        # What the walk may hand out: the free GPUs plus those the candidates hold (everything
        # else - bags of tasks, partial holds, protected jobs - keeps what it has).
        avail = min(cap, free + sum(held for _, held in candidates))
        keys = ctx.order_keys([rec for rec, _ in candidates])
        running = sorted(((k, rec, held) for k, (rec, held) in zip(keys, candidates)), key=_first)
        queue = ctx.queue
        excluded: set[str] = set()
        while True:
            got = _walk(running, queue, txn, avail, excluded)
            if got is None:                  # the queue is not in key order (a tenancy's walk)
                queue = sorted(queue, key=lambda r: r.key)
                continue
            victims, chosen = got
            if not victims:
                if not excluded and ctx.keys_fall:
                    # Nobody to suspend; as keys fall (running jobs' only) the running jobs
                    # only move ahead in the walk's order, which suspends nobody either, until
                    # an event: for the order's quiet time, as if the round had not walked
                    self.walked = (txn, False)
                return
            bad = _infeasible(ctx, victims, chosen)
            if not bad:
                break
            excluded |= bad   # those cannot use the room: do not suspend anybody for them
        for rec in victims:
            placements = list(rec.placed.values())
            txn.release(rec.job_id, placements, [rec.tasks[tp.task].demand for tp in placements])


def _first(it):
    return it[0]


def _waits(rec, txn) -> float:
    """The GPUs a waiting DL job needs (0: it competes with nobody here)."""
    if rec.spec.kind != "dl" or rec.job_id in txn.decided or rec.job_id in txn.released:
        return 0.0
    need = rec.gpu_need()[0]
    return need if need > _EPS else 0.0


def _need_exceeds(ctx, free: float) -> bool:
    """Whether the waiting jobs need more GPUs than are free: a pass that stops as soon as they
    do (under a deep queue, after a few jobs)."""
    txn, total = ctx.txn, 0.0
    for rec in ctx.queue:
        total += _waits(rec, txn)
        if total > free + _EPS:
            return True
    return False


def _walk(running, queue, txn, avail: float, excluded: set[str]):
    """Pollux's walk: in order, each job gets all the GPUs it needs while they last. `running`:
    (key, record, GPUs held) in key order; `queue`: the waiting jobs, in key order (None when
    they are not). It merges the two and stops once nothing can change: after the last running
    job (a waiting job after it suspends nobody, and is placed by the round's loop anyway), or
    when no GPU is left (every running job after that point is a victim; every need is above
    _EPS). Under a deep queue that is a few of thousands waiting (benchmarks/bench_policies.py
    --deep: tiresias on its 5,000-job case, 45 -> 27 CPU s)."""
    left = avail
    victims, chosen = [], []
    i, n = 0, len(running)

    def walk_running(upto) -> None:
        """The running jobs ahead of key `upto` (None: all the rest): each keeps its GPUs while
        they last, or is a victim."""
        nonlocal i, left
        while i < n and (upto is None or running[i][0] < upto):
            _, r, held = running[i]
            i += 1
            if r.job_id in excluded:
                continue
            if held <= left + _EPS:
                left -= held
            else:
                victims.append(r)

    prev = None
    for rec in queue:
        if i == n or left <= _EPS:
            break
        need = _waits(rec, txn)
        if need <= 0.0:
            continue
        key = rec.key
        if prev is not None and key < prev:
            return None
        prev = key
        walk_running(key)
        if rec.job_id in excluded:
            continue
        if need <= left + _EPS:
            left -= need
            chosen.append(rec)
    walk_running(None)
    return victims, chosen


def _infeasible(ctx, victims, chosen) -> set[str]:
    """Chosen waiting jobs that do not fit even with the victims suspended: placed in order on a
    fork of the round's transaction (first node the profile's filters accept)."""
    trial = ctx.txn.fork()
    for rec in victims:
        placements = list(rec.placed.values())
        trial.release(rec.job_id, placements, [rec.tasks[tp.task].vector for tp in placements])
    bad = set()
    for rec in chosen:
        for task in rec.unplaced():
            ok = ctx.feasible(rec.spec, task, trial.free)
            if not ok.any():
                trial.discard(rec.job_id)     # give back the partial attempt
                bad.add(rec.job_id)
                break
            trial.reserve(rec.job_id, task, int(np.argmax(ok)))
    return bad
