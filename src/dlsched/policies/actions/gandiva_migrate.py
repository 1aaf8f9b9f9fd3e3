"""Gandiva's migration (Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep Learning",
OSDI 2018; seed 001, "Gandiva Mechanisms", Figure 8 and Figure 13).

"Migration allows time-sliced jobs to migrate to other (recently vacated) GPUs or for
de-fragmentation of the cluster so that incoming jobs are assigned GPUs with good locality."
Both run before the round's placement, in this order:

    to freed GPUs: for each ring of gandiva_timeslice (most members first), each parked member
        that fits whole on free GPUs (no GPU shared; as few nodes as possible, one affinity
        group when it can) moves there and leaves its ring: a Migrate when it has run before
        (its checkpoint moves), a Launch when it never started.
    defragmentation: a waiting job of G >= 2 GPUs that no single node can hold now, but that
        one node n could hold whole if some jobs on n moved away, gets n:
            victims(n) = running single-node jobs on n, smallest first, until n's free resources
                         + theirs hold the job (each victim ran min_run_s since its last restart,
                         shares no GPU, is in no ring)
            every victim must fit whole on free GPUs of other nodes (placed as above,
                         the victims moved off n on the fork first);
            n = the node that moves the fewest GPUs (then the lowest id)
        the victims migrate, then the job starts on n. At most max_moves migrations a round;
        at most max_tries waiting jobs (queue order) and, per job, the max_nodes nodes that move
        the fewest GPUs are tried (defragmentation is a search: this bounds a round's cost), and
        only when the cluster's free GPUs could hold the job at all.

Where a job goes is the profile's placement engine's choice (ctx.choose_node: its filters, then
its scorers, ties to the lowest node id; the same engine that places tasks in the round,
preemption's trials and an operator's migrate), asked on a fork of the round's transaction
(ctx.txn.fork()) and restricted (`allowed`) to what Gandiva's rules leave: free resources and
idle GPU slots; tier by tier of getNodes' preference (the whole job on one node, fewest free
GPUs first, else the nodes with the most free GPUs first); node n, or every node but n, for
defragmentation. The GPUs on the chosen node are picked inside one affinity group
(gandiva_common.trial_placement). A trial that fails is dropped with its fork; only a whole
trial (every victim moved and the job placed) becomes decisions in the round's transaction.

Cost of a migration (dlsched.sim.switch_cost, costed decisions): the job finishes its mini-batch,
checkpoints (3 x parameter bytes, to host memory), the checkpoint crosses the NIC when the
server changes (bytes / NIC bandwidth), the process restarts (restart_s, Gandiva's Figure 13:
most of a migration is the framework's restart) and restores.
"""
from __future__ import annotations

import math

import numpy as np

from dlsched.core.types import GPU
from dlsched.policies.actions.gandiva_common import (RestartClock, demands, find_action, is_whole_dl,
                                                     saved_round_state, move, start_on, trial_placement,
                                                     usable_nodes)
from dlsched.policies.actions.gandiva_timeslice import GandivaTimeslice
from dlsched.scheduler.context import JobState
from dlsched.scheduler.framework import Action, register
from dlsched.workload.packing import SwitchCost

_EPS = 1e-9


@register("action", "gandiva_migrate", source="Xiao et al., OSDI 2018 (Gandiva, seed 001)")
class GandivaMigrate(Action):
    """Gandiva migration: time-sliced jobs move to freed GPUs; defragmentation for multi-GPU jobs."""
    needs = frozenset(('costed_switches', 'migration'))  # backend capabilities (dlsched.scheduler.backend)
    round_state = ("_round_state",)

    def _save_round(self):
        """round state: the counters moves and defrags (see gandiva_common.saved_round_state)."""
        moves, defrags = self.moves, self.defrags
        last = self._saved_fn
        if last is not None and last[0] == (moves, defrags):
            return last[1]   # it captures only these two ints: the same function

        def restore(c) -> None:
            c.moves, c.defrags = moves, defrags
        self._saved_fn = ((moves, defrags), restore)
        return restore

    _round_state = saved_round_state(_save_round)

    def __init__(self, to_freed: bool = True, defrag: bool = True, max_moves: int = 4,
                 min_run_s: float = 300.0, max_tries: int = 4, max_nodes: int = 4,
                 host_gbps: float = 80.0, fixed_s: float = 0.5, restart_s: float = 5.0) -> None:
        if max_moves < 0 or min_run_s < 0 or max_tries < 0 or max_nodes < 1:
            raise ValueError("max_moves, min_run_s, max_tries must be >= 0 and max_nodes >= 1")
        self.max_tries = int(max_tries)
        self.max_nodes = int(max_nodes)
        self.to_freed = bool(to_freed)
        self.defrag = bool(defrag)
        self.max_moves = int(max_moves)
        self.min_run_s = float(min_run_s)
        self.cost = SwitchCost(host_gbps=float(host_gbps), fixed_s=float(fixed_s), restart_s=float(restart_s))
        self.clock = RestartClock()
        self.moves = 0          # migrations decided (both kinds)
        self.defrags = 0        # jobs placed by defragmentation
        self._searched_at: float | None = None   # the last round that searched (_best_node)
        self._saved_fn = None   # _save_round's last closure

    def observe(self, now: float, events: list, applied) -> None:
        self.clock.observe(now, events, applied)

    def quiet_until(self, now: float, running) -> float:
        """Time moves one thing alone: a running job becomes movable for defragmentation once
        it ran min_run_s since its last restart. That matters only when the last round searched
        for a node to defragment (a waiting job passed every other check); moves to freed GPUs
        depend on the free GPUs and the rings alone."""
        if not (self.defrag and self.max_moves > 0 and self._searched_at == now):
            return math.inf
        t = math.inf
        for r in running:
            start = self.clock.started.get(r.job_id, r.first_start_s)
            if start is not None and start + self.min_run_s > now:
                t = min(t, start + self.min_run_s)
        return t - 1e-6   # a little early: the round then runs (float noise in the checks)

    def before_place(self, ctx) -> None:
        if not ctx.queue:
            ts = find_action(ctx, GandivaTimeslice, self)
            if ts is None or not ts.rings:
                return   # nobody waits and nothing is parked (as _to_freed and _defrag find)
        budget = self.max_moves
        if self.to_freed:
            budget = self._to_freed(ctx, budget)
        if self.defrag and budget > 0:
            self._defrag(ctx, budget)

    # -- time-sliced jobs to freed GPUs ---------------------------------------------------------
    def _to_freed(self, ctx, budget: int) -> int:
        ts = find_action(ctx, GandivaTimeslice, self)
        if ts is None or not ts.rings:
            return budget
        free_gpus = float(np.clip(ctx.txn.free[ctx.snap.up, GPU], 0, None).sum())
        if free_gpus < 1 - _EPS:
            return budget
        for ring in sorted(ts.rings.values(), key=lambda r: (-len(r.members), r.rid)):
            for m in ts.parked(ctx, ring):
                if budget <= 0:
                    return budget
                rec = ctx.jobs[m]
                if (rec.state not in (JobState.PENDING, JobState.SUSPENDED) or rec.placed
                        or m in ctx.txn.decided or m in ctx.txn.released):
                    continue   # finished, or already decided this round (rings sync later)
                if rec.spec.gpus > free_gpus + _EPS:
                    continue
                p = trial_placement(ctx, ctx.txn.fork(), rec)   # tried on a fork; kept only if whole
                if p is None:
                    continue
                ts.leave(m)
                self._start(ctx, rec, p)
                free_gpus -= rec.spec.gpus
                budget -= 1
        return budget

    def _start(self, ctx, rec, placements) -> None:
        if rec.state is JobState.SUSPENDED:
            move(ctx.txn, rec, placements, self.cost)
            self.moves += 1
        else:
            start_on(ctx, rec, placements, self.cost)

    # -- defragmentation ------------------------------------------------------------------------
    def _defrag(self, ctx, budget: int) -> None:
        if not ctx.queue:
            return   # nobody waits (most rounds: a finish)
        txn = ctx.txn
        ts = find_action(ctx, GandivaTimeslice, self)
        ring_of = ts.ring_of if ts is not None else {}
        cluster = ctx.snap.cluster
        cap = cluster.capacity
        up = ctx.snap.up
        tries = self.max_tries
        for rec in ctx.queue:
            if budget <= 0 or tries <= 0:
                return
            if sum(t.demand[GPU] for t in rec.tasks) < 2 - 1e-6:
                continue   # fewer than 2 GPUs in all its tasks, so in its unplaced ones (below)
            if (rec.job_id in txn.decided or rec.job_id in txn.released or rec.job_id in ring_of
                    or rec.placed or not is_whole_dl(rec)
                    or rec.state not in (JobState.PENDING, JobState.SUSPENDED)):
                continue
            tasks = rec.unplaced()
            if sum(t.demand[GPU] for t in tasks) < 2 - 1e-6:
                continue   # (need[GPU] below: the same sum; a margin for another order of adding)
            need = np.sum([t.vector for t in tasks], axis=0)
            if need[GPU] < 2 - _EPS:
                continue
            free_gpus = np.clip(txn.free[:, GPU], 0, None) * up
            if free_gpus.sum() < need[GPU] - _EPS:
                continue   # the job and the jobs moved for it cannot all fit: nothing to gain
            ok = usable_nodes(ctx, rec) & (cap >= need - _EPS).all(axis=1)
            if not ok.any() or (txn.free[ok] >= need - _EPS).all(axis=1).any():
                continue   # no node can ever hold it whole, or one holds it now: nothing to do
            tries -= 1
            self._searched_at = ctx.now
            plan = self._best_node(ctx, rec, tasks, need, np.flatnonzero(ok), ring_of, budget)
            if plan is None:
                continue
            node, moves, placements = plan
            for victim, p in moves:
                move(txn, victim, p, self.cost)
                self.moves += 1
            start_on(ctx, rec, placements, self.cost)
            self.defrags += 1
            budget -= len(moves)

    def _best_node(self, ctx, rec, tasks, need, nodes, ring_of, budget):
        txn = ctx.txn
        by_node: dict[int, list] = {}
        for r in ctx.running:
            if (r.job_id in ring_of or r.job_id in txn.released or r.job_id in txn.decided
                    or r.state is not JobState.RUNNING or r.unplaced() or not is_whole_dl(r)
                    or not r.spec.preemptible                  # never moved (JobSpec.preemptible)
                    or self.clock.ran_for(r, ctx.now) < self.min_run_s - _EPS):
                continue
            ns = {tp.node for tp in r.placed.values()}
            if len(ns) != 1:
                continue
            if any(ctx.snap.gpu_load[tp.node, g] > 1 for tp in r.placed.values() for g in tp.gpu_ids):
                continue
            by_node.setdefault(ns.pop(), []).append(r)
        # Only nodes whose free GPUs plus those of their movable jobs hold the job, fewest GPUs
        # to move first (the moved GPUs are the cost); at most max_nodes of them are tried.
        free_g = np.clip(txn.free[:, GPU], 0, None)
        movable = {n: sum(r.held_gpus() for r in rs) for n, rs in by_node.items()}
        nodes = [int(n) for n in nodes if free_g[n] + movable.get(int(n), 0.0) >= need[GPU] - _EPS]
        nodes.sort(key=lambda n: (max(need[GPU] - free_g[n], 0.0), n))
        best, best_key = None, None
        for n in nodes[: self.max_nodes]:
            cands = sorted(by_node.get(n, ()), key=lambda r: (r.held_gpus(), r.job_id))
            trial = txn.fork()     # the whole move is tried here; ctx.txn changes only on success
            chosen = []
            for r in cands:
                if (trial.free[n] >= need - _EPS).all() or len(chosen) >= budget:
                    break
                old = list(r.placed.values())
                trial.unhold(old, demands(r, old))
                chosen.append(r)
            if not chosen or not (trial.free[n] >= need - _EPS).all():
                continue
            elsewhere = np.ones(len(txn.free), dtype=bool)
            elsewhere[n] = False
            moves = []
            for r in chosen:   # each victim must fit whole elsewhere
                p = trial_placement(ctx, trial, r, [r.tasks[tp.task] for tp in sorted(r.placed.values(), key=lambda tp: tp.task)],
                                    allowed=elsewhere)
                if p is None:
                    break
                moves.append((r, p))
            else:
                placements = trial_placement(ctx, trial, rec, tasks, allowed=~elsewhere)
                if placements is None:
                    continue
                key = (sum(r.held_gpus() for r in chosen), n)
                if best_key is None or key < best_key:
                    best, best_key = (n, moves, placements), key
        return best
