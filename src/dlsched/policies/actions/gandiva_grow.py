"""Gandiva's grow-shrink (Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep
Learning", OSDI 2018; seed 001, "Gandiva Mechanisms" and Figure 11: grow from 1 to 4 GPUs,
shrink to 1 GPU): idle GPUs are used opportunistically by jobs that scale, and given back when
new jobs arrive.

    lightly loaded: after the round's placement no DL job waits for GPUs (none undecided in the
        queue, no parked ring member) and at least min_free_frac of the cluster's GPUs are free
    grow (then): each running job that scales, in submission order - a DL all-reduce job of
        identical whole-GPU workers on one node, with a model the speed model knows, in no ring,
        never resized, run min_run_s since its last restart - gets the largest
            w' in {2w, 4w, ...},  w' <= max_factor x w
        whose extra workers fit the free GPUs of its node (one affinity group when possible) and
        whose predicted speed-up (the speed model, alone on the node) is worth it:
            t(w) / t(w') >= 1 + min_gain x (w'/w - 1)      (min_gain 0.5: half of linear)
        Resize (costed: checkpoint, restart, restore) to w' workers; the global batch stays,
        so each worker's share shrinks.
    shrink (before the round's placement): while a DL job waits for more GPUs than are free,
        grown jobs go back to their original workers (the extra workers' GPUs free), most
        recently grown first; a job is shrunk only after min_shrink_s at its grown size, so
        every resize is followed by some progress.
"""
from __future__ import annotations

import math

import numpy as np

from dlsched.core.types import GPU, Role, TaskPlacement, TaskSpec
from dlsched.policies.actions.gandiva_common import (ChangedJobs, RestartClock, find_action, is_whole_dl,
                                                     saved_round_state, pick_gpus_affine, resize)
from dlsched.policies.actions.gandiva_timeslice import GandivaTimeslice
from dlsched.scheduler.context import JobState
from dlsched.scheduler.framework import Action, register
from dlsched.workload.packing import SwitchCost
from dlsched.workload.speed import SpeedModel

_EPS = 1e-9


@register("action", "gandiva_grow", source="Xiao et al., OSDI 2018 (Gandiva, seed 001 Figure 11)")
class GandivaGrow(Action):
    """Gandiva grow-shrink: jobs that scale take idle GPUs while the cluster is light, give them back on arrivals."""
    needs = frozenset(('costed_switches', 'resize'))  # backend capabilities (dlsched.scheduler.backend)
    round_state = ("_round_state",)

    def _save_round(self):
        """round state: grown (job -> an immutable tuple), grows and shrinks (see
        gandiva_common.saved_round_state)."""
        grows, shrinks = self.grows, self.shrinks
        if not self.grown:
            last = self._saved_fn
            if last is not None and last[0] == (grows, shrinks):
                return last[1]   # it captures only these two ints (and an empty dict's copy)
        grown = dict(self.grown)

        def restore(c) -> None:
            c.grown, c.grows, c.shrinks = dict(grown), grows, shrinks
        if not grown:
            self._saved_fn = ((grows, shrinks), restore)
        return restore

    _round_state = saved_round_state(_save_round)

    def __init__(self, max_factor: int = 4, min_gain: float = 0.5, min_free_frac: float = 0.25,
                 min_run_s: float = 300.0, min_shrink_s: float = 30.0, host_gbps: float = 80.0,
                 fixed_s: float = 0.5, restart_s: float = 5.0, enabled: bool = True) -> None:
        if max_factor < 1:
            raise ValueError(f"max_factor must be >= 1, got {max_factor}")
        if not 0 <= min_free_frac <= 1:
            raise ValueError(f"min_free_frac must be in [0, 1], got {min_free_frac}")
        if min_gain < 0 or min_run_s < 0 or min_shrink_s < 0:
            raise ValueError("min_gain, min_run_s and min_shrink_s must be >= 0")
        self.enabled = bool(enabled)
        self.max_factor = int(max_factor)
        self.min_gain = float(min_gain)
        self.min_free_frac = float(min_free_frac)
        self.min_run_s = float(min_run_s)
        self.min_shrink_s = float(min_shrink_s)
        self.cost = SwitchCost(host_gbps=float(host_gbps), fixed_s=float(fixed_s), restart_s=float(restart_s))
        self.grown: dict[str, tuple] = {}     # job -> (original tasks, time grown)
        self.clock = RestartClock()
        self._speed: tuple | None = None      # (cluster, SpeedModel)
        self.grows = 0
        self.shrinks = 0
        self._changed = ChangedJobs()
        self._cands: dict = {}                # see _candidates
        self._cands_cluster = None
        self._saved_fn = None                 # _save_round's last closure for an empty `grown`

    # -- shrink: before placement ---------------------------------------------------------------

    def observe(self, now: float, events: list, applied) -> None:
        self.clock.observe(now, events, applied)
        self._changed.observe(events, applied)

    def before_place(self, ctx) -> None:
        if not self.grown:
            return
        for j in [j for j in self.grown if ctx.jobs[j].state is not JobState.RUNNING]:
            del self.grown[j]   # finished or stopped: its original size comes back with it
        if not self.grown:
            return
        txn = ctx.txn
        want = sum(sum(t.demand[GPU] for t in rec.unplaced()) for rec in ctx.queue
                   if rec.spec.kind == "dl" and rec.job_id not in txn.decided and not rec.placed)
        ts = find_action(ctx, GandivaTimeslice, self)
        if ts is not None:
            for ring in ts.rings.values():
                want += sum(sum(t.demand[GPU] for t in ctx.jobs[m].tasks) for m in ts.parked(ctx, ring))
        free = float(np.clip(txn.free[ctx.snap.up, GPU], 0, None).sum())
        for job_id, (orig, since) in sorted(self.grown.items(), key=lambda kv: (-kv[1][1], kv[0])):
            if want <= free + _EPS:
                break
            rec = ctx.jobs[job_id]
            if (ctx.now - since < self.min_shrink_s - _EPS or job_id in txn.decided
                    or job_id in txn.released):
                continue
            keep = tuple(tp for tp in sorted(rec.placed.values(), key=lambda tp: tp.task) if tp.task < len(orig))
            free += rec.held_gpus() - sum(orig[tp.task].demand[GPU] for tp in keep)
            resize(txn, rec, orig, keep, self.cost)
            del self.grown[job_id]
            self.shrinks += 1

    # -- grow: after placement ------------------------------------------------------------------
    def act(self, ctx) -> None:
        self._grow(ctx)

    def quiet_until(self, now: float, running) -> float:
        """Time moves two things alone: a grown job may be shrunk once it ran min_shrink_s at
        its grown size, and a job that scales may grow once it ran min_run_s since its last
        restart. Everything else waits for an event (an arrival, a finish, a plan applied)."""
        if not self.enabled:
            return math.inf
        t = math.inf
        for _, since in self.grown.values():
            if since + self.min_shrink_s > now:
                t = min(t, since + self.min_shrink_s)
        if self.max_factor >= 2:
            for job_id, cand in self._cands.items():
                if job_id in self.grown:
                    continue
                start = self.clock.started.get(job_id, cand[0].first_start_s)
                if start is not None and start + self.min_run_s > now:
                    t = min(t, start + self.min_run_s)
        return t - 1e-6   # a little early: the round then runs (float noise in the checks)

    def _candidates(self, ctx) -> dict:
        """The running jobs that could ever grow where they are (the checks of `_grow` and
        `_grow_one` that read only the job's record: its spec, tasks and placements), with
        their iteration time there: {job_id: (record, iteration time, node, placements,
        demand)}. Kept between rounds, updated for the jobs whose records changed."""
        changed = self._changed.take()
        if changed is None or self._cands_cluster is not ctx.snap.cluster:
            self._cands_cluster = ctx.snap.cluster
            self._cands = {}
            changed = [r.job_id for r in ctx.running]
        cands = self._cands
        for job_id in changed:
            rec = ctx.jobs.get(job_id)
            cand = None if rec is None or not ctx.is_running(job_id) else self._static(ctx, rec)
            if cand is None:
                cands.pop(job_id, None)
            else:
                cands[job_id] = cand
        return cands

    def _static(self, ctx, rec):
        spec = rec.spec
        if (spec.kind != "dl" or spec.comm != "allreduce" or not spec.preemptible   # a resize restarts it
                or self._speed_model(ctx.snap.cluster).params.model(spec.model) is None):
            return None   # no model: no predicted speed-up (_iter_time is None), never grows
        if (rec.state is not JobState.RUNNING or rec.unplaced() or not is_whole_dl(rec)
                or len(rec.tasks) != len(rec.spec.tasks)):
            return None
        spec = rec.spec
        if spec.comm != "allreduce" or any(t.role is not Role.WORKER for t in rec.tasks):
            return None
        demands = {t.demand for t in rec.tasks}
        if len(demands) != 1:
            return None
        demand = next(iter(demands))
        g = demand[GPU]
        if g < 1 - _EPS or abs(g - round(g)) > _EPS:
            return None
        placed = sorted(rec.placed.values(), key=lambda tp: tp.task)
        nodes = {tp.node for tp in placed}
        if len(nodes) != 1:
            return None
        t0 = self._iter_time(self._speed_model(ctx.snap.cluster), spec, tuple(placed), rec.tasks)
        if t0 is None:
            return None
        return rec, t0, nodes.pop(), placed, demand

    def _grow(self, ctx) -> None:
        txn = ctx.txn
        if self.max_factor < 2 or not self.enabled:
            return
        cands = self._candidates(ctx)
        if not cands:
            return   # nobody could grow (the checks below would find none)
        if any(rec.spec.kind == "dl" and rec.job_id not in txn.decided and not rec.placed
               and rec.state is not JobState.REJECTED for rec in ctx.queue):
            return   # somebody waits: not lightly loaded
        ts = find_action(ctx, GandivaTimeslice, self)
        if ts is not None and any(ts.parked(ctx, ring) for ring in ts.rings.values()):
            return
        up = ctx.snap.up
        total = float(ctx.snap.capacity[up, GPU].sum())
        if total <= 0 or float(np.clip(txn.free[up, GPU], 0, None).sum()) < self.min_free_frac * total - _EPS:
            return
        in_ring = ts.ring_of if ts is not None else {}
        for cand in sorted(cands.values(), key=lambda c: (c[0].submit_time_s, c[0].job_id)):
            rec = cand[0]
            if (rec.job_id in self.grown or rec.job_id in in_ring or rec.job_id in txn.decided
                    or rec.job_id in txn.released
                    or self.clock.ran_for(rec, ctx.now) < self.min_run_s - _EPS):
                continue
            self._grow_one(ctx, cand)

    def _grow_one(self, ctx, cand) -> None:
        rec, t0, node, placed, demand = cand
        spec = rec.spec
        g = demand[GPU]
        txn = ctx.txn
        if any(txn.gpu_load[node, gg] > 1 for tp in placed for gg in tp.gpu_ids):
            return   # shares a GPU
        speed = self._speed_model(ctx.snap.cluster)
        w = len(rec.tasks)
        cluster = ctx.snap.cluster
        groups = cluster.gpu_groups(node, [gg for tp in placed for gg in tp.gpu_ids])
        best = None
        factor = 2
        while factor <= self.max_factor:
            extra = w * (factor - 1)
            vec = np.asarray(demand, dtype=np.float64)
            if not (txn.free[node] >= extra * vec - _EPS).all():
                break
            gpu_ids = pick_gpus_affine(cluster, txn.gpu_load, node, int(round(g)) * extra, prefer=groups)
            if gpu_ids is None:
                break
            k = int(round(g))
            tasks = rec.tasks + tuple(TaskSpec(w + i, Role.WORKER, demand) for i in range(extra))
            new = tuple(placed) + tuple(TaskPlacement(w + i, node, gpu_ids[i * k:(i + 1) * k]) for i in range(extra))
            t1 = self._iter_time(speed, spec, new, tasks)
            if t1 is not None and t0 / t1 >= 1 + self.min_gain * (factor - 1) - _EPS:
                best = (tasks, new)
            factor *= 2
        if best is None:
            return
        tasks, new = best
        orig = rec.tasks
        resize(txn, rec, tasks, new, self.cost)
        self.grown[rec.job_id] = (orig, ctx.now)
        self.grows += 1

    def _speed_model(self, cluster) -> SpeedModel:
        if self._speed is None or self._speed[0] is not cluster:
            self._speed = (cluster, SpeedModel(cluster))
        return self._speed[1]

    @staticmethod
    def _iter_time(speed: SpeedModel, spec, placements, tasks) -> float | None:
        prof = speed.profile(spec, placements, tasks)
        if prof is None:
            return None
        shares = {link: float(speed.link_capacity[link]) for link in prof.link_bytes}
        return prof.iter_time(shares)
