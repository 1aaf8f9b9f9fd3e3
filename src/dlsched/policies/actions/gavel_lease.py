"""Gavel's policies in dlsched's own engine (`-p gavel-*`, the default `--semantics native`) and on
the real runtime: the allocation X (time fraction per job and GPU type) carried out as leases.

Source: Narayanan et al., OSDI'20 (Gavel), `scheduler/scheduler.py`; the round mechanism that
must match Gavel's simulator is dlsched.sim.gavel (`--semantics gavel`). Here the engine's own
rules hold: rounds on events and every `round_s`, restart costs from the speed model (the
simulator) or the real suspend and resume (the runtime).

Each round, as Gavel does it:
- time received: a running job adds the seconds since the last round to its time on its GPU
  type (and to the type's total); a new job starts at round_s / 2 on every type.
- X is recomputed when the job set changed and `min_reset_s` passed since the last reset (or
  none happened yet); at a reset each job's deficit grows by X x elapsed - time received, and
  every time restarts at round_s / 2. Gavel's policies and their state: dlsched.sim.gavel.policies.
- priority per type = X / (the job's share of the type's time); X x 1e9 with no share yet, 0 with
  X = 0 or a type the job cannot run on. The greedy pass takes, type by type (Gavel's order:
  V100, P100, K80, then the rest by name; shuffled each round unless the policy is `_perf`), jobs
  by (priority, deficit, X) while their GPUs fit.

Leases: at a lease boundary (every `round_s`) the pass is over every job: a running job that is
not chosen, or chosen on another type, is suspended (its lease ends), and chosen waiting jobs may
be placed, each only on nodes of its type (the `gavel_type` filter). Between boundaries
(event rounds: an arrival, a finish) running jobs keep their GPUs and the pass only fills free
GPUs with waiting jobs.

Where dlsched differs from Gavel's simulator, for users: a job that arrived since the last reset
(no X yet) may run on GPUs nobody with an X takes (Gavel leaves them idle until the next reset);
the speed of a job whose model is not a job type of the table is 1 on every type (type-blind),
so any job can run under these policies; a job's remaining steps are the backend's (`remaining`
iterations, or remaining seconds x its reference-type speed when it has no iteration count).
Packing policies (`_packed`, Gandiva's pairs) run only under --semantics gavel. AlloX takes
1-GPU jobs only, as in Gavel: larger jobs get no X and run on the GPUs the others leave.
"""
from __future__ import annotations

import math
import random

import numpy as np

from dlsched.core.types import GPU
from dlsched.scheduler.framework import Action, Filter, NodeMask, register

_HALF = 0.5


class _Blind:
    """The table, and speed 1 on every type for a job type it does not know."""

    def __init__(self, table) -> None:
        self.table, self.name, self.reference = table, table.name, getattr(table, "reference", None)

    def steps_per_s(self, job_type, gpus, gpu_type):
        if not self.table.has(job_type):
            return 1.0
        return self.table.steps_per_s(job_type, gpus, gpu_type)

    def pair(self, *a):
        return None


@register("action", "gavel_lease", source="Narayanan et al., OSDI'20 (Gavel): scheduler/scheduler.py")
class GavelLease(Action):
    """Gavel's allocation as leases: who runs on which GPU type, renewed every round_s."""
    needs = frozenset(("preemption",))
    # what a round changes (time received, deficits, X, the policy's own state, the type
    # shuffler, the lease clock): saved before each round and put back when its plan is not the
    # one carried out (framework.Component.round_state), so a round is idempotent
    round_state = ("received", "deficits", "worker_time", "allocation", "need_update", "last_reset", "last_t",
                   "lease_end", "on", "capacity", "shuffler", "alloc_fn", "assigned")

    def __init__(self, policy: str = "max_min_fairness_perf", throughputs: str = "gavel", round_s: float = 360.0,
                 min_reset_s: float = 1920.0, seed: int = 0) -> None:
        from dlsched.sim.gavel import CountFallback
        from dlsched.sim.gavel.policies import GAVEL_POLICIES
        from dlsched.workload.throughputs import load_throughputs
        spec = GAVEL_POLICIES.get("gavel-" + str(policy).replace("_", "-"))
        if spec is None or spec.packing:
            ok = [g.gavel for g in GAVEL_POLICIES.values() if not g.packing]
            raise ValueError(f"policy must be one of {', '.join(ok)} (packing runs under --semantics gavel only), "
                             f"got {policy!r}")
        if not (round_s > 0 and min_reset_s >= 0):
            raise ValueError(f"round_s must be > 0 and min_reset_s >= 0, got {round_s}, {min_reset_s}")
        self.spec, self.alloc_fn = spec, spec.make(int(seed))
        self.table = _Blind(CountFallback(load_throughputs(throughputs)))
        self.round_s, self.min_reset_s = float(round_s), float(min_reset_s)
        self.shuffler = random.Random(int(seed) + 5)
        self.received: dict[str, dict[str, float]] = {}
        self.deficits: dict[str, dict[str, float]] = {}
        self.worker_time: dict[str, float] = {}
        self.allocation: dict[str, dict[str, float]] = {}
        self.need_update = False
        self.last_reset: float | None = None
        self.last_t: float | None = None
        self.lease_end = -math.inf
        self.on: dict[str, str] = {}          # running job -> its type, at the last round
        self.assigned: dict[str, str] = {}    # waiting job -> the type it may be placed on now
        self.capacity: dict[str, int] = {}    # GPUs per type X was computed for

    # -- the cluster's types ---------------------------------------------------------------------
    @staticmethod
    def _types(ctx) -> tuple[list[str], np.ndarray, dict[str, int], dict[str, int]]:
        """Types in Gavel's order, each node's type, and GPUs per type: on the nodes that are up
        (what a lease can use now) and on every node (what X is computed for, as Gavel computes
        it for its registered workers: a node that is not up yet or for a while does not
        change X)."""
        cl = ctx.cluster
        names = list(cl.gpu_types)
        of = np.asarray(cl.node_gpu_type)
        cap = ctx.snap.capacity[:, GPU]
        up = {t: int(round(float(cap[(of == i) & ctx.snap.up].sum()))) for i, t in enumerate(names)}
        every = {t: int(round(float(cap[of == i].sum()))) for i, t in enumerate(names)}
        known = [t for t in ("V100", "P100", "K80") if every.get(t, 0) > 0]
        order = known + sorted(t for t in names if t not in known and every.get(t, 0) > 0)
        return order, of, up, every

    def _type_of(self, ctx, rec, of) -> str | None:
        for tp in rec.placed.values():
            if tp.gpu_ids:
                return ctx.cluster.gpu_types[int(of[tp.node])]
        return None

    # -- bookkeeping ------------------------------------------------------------------------------
    def _speed(self, rec, t: str) -> float:
        return self.table.steps_per_s(rec.spec.model, max(int(rec.spec.gpus), 1), t) or 0.0

    def _hetero(self, ctx, recs) -> list:
        from dlsched.policies.hetero.common import HeteroJob
        out = []
        ref = self.table.reference or "V100"
        for rec in recs:
            st = ctx.stats(rec.job_id) if ctx.stats is not None else None
            rem = st.get("remaining") if st else None
            if rem is None:
                rem = rec.spec.iterations if rec.spec.iterations is not None else (rec.spec.duration_s or 0.0)
            if rec.spec.iterations is None:       # seconds of work on the reference type -> steps
                rem = rem * (self.table.steps_per_s(rec.spec.model, max(int(rec.spec.gpus), 1), ref) or 1.0)
            out.append(HeteroJob(rec.job_id, rec.spec.model or "", max(int(round(rec.spec.gpus)), 1),
                                 float(rec.spec.priority or 1) if (rec.spec.priority or 0) > 0 else 1.0,
                                 max(float(rem), 0.0), max(ctx.now - rec.submit_time_s, 0.0)))
        return out

    def _reset(self, now: float, types) -> None:
        elapsed = now - (self.last_reset or 0.0)
        for t in types:
            self.worker_time[t] = 0.0
        for jid, times in self.received.items():
            x = self.allocation.get(jid, {})
            for t in types:
                d = self.deficits.setdefault(jid, {})
                d[t] = d.get(t, 0.0) + x.get(t, 0.0) * elapsed - (times.get(t, 0.0) - _HALF * self.round_s)
                times[t] = _HALF * self.round_s
                self.worker_time[t] += times[t]
        self.last_reset = now

    def before_place(self, ctx) -> None:
        now, txn = ctx.now, ctx.txn
        order, of, gpus, every = self._types(ctx)
        if every != self.capacity:             # nodes added or removed: X is for another cluster
            self.capacity, self.need_update = every, True
        running = [r for r in ctx.running if r.spec.kind == "dl" and r.job_id not in txn.released
                   and r.job_id not in txn.decided and r.placed and not r.unplaced()]
        waiting = [r for r in ctx.queue if r.spec.kind == "dl" and r.job_id not in txn.released
                   and r.job_id not in txn.decided]
        if self.last_t is not None:
            dt = now - self.last_t
            for jid, t in self.on.items():
                if jid in self.received and t in self.received[jid]:
                    self.received[jid][t] += dt
                    self.worker_time[t] = self.worker_time.get(t, 0.0) + dt
        self.last_t = now
        self.on = {r.job_id: t for r in running if (t := self._type_of(ctx, r, of)) is not None}
        recs = sorted(running + waiting, key=lambda r: (r.submit_time_s, r.job_id))
        ids = {r.job_id for r in recs}
        for r in recs:
            if r.job_id not in self.received:
                self.received[r.job_id] = {t: _HALF * self.round_s for t in order}
                self.deficits[r.job_id] = {t: 0.0 for t in order}
                self.need_update = True
        for jid in [j for j in self.received if j not in ids]:
            del self.received[jid]
            self.deficits.pop(jid, None)
            self.allocation.pop(jid, None)
            self.need_update = True
        if self.need_update and recs and (self.last_reset is None or now - self.last_reset >= self.min_reset_s):
            self._reset(now, order)
            # AlloX takes 1-GPU jobs only (as in Gavel): larger ones get no X and run on what is left
            given = [r for r in recs if self.spec.gavel != "allox" or int(round(r.spec.gpus)) == 1]
            alloc = self.alloc_fn(self._hetero(ctx, given), {t: every[t] for t in order}, self.table, now)
            self.allocation = {c[0]: dict(row) for c, row in alloc.items() if len(c) == 1}
            self.need_update = False
        full = now >= self.lease_end - 1e-9
        if full:
            self.lease_end = now + self.round_s
        # a non-preemptible running job is never a candidate: it keeps its GPUs at every lease
        movable = [r for r in running if r.spec.preemptible]
        chosen = self._greedy(order, gpus, movable if full else [], waiting, running)
        self.assigned = {r.job_id: chosen[r.job_id] for r in waiting if r.job_id in chosen}
        if full:
            for r in movable:
                if chosen.get(r.job_id) != self.on.get(r.job_id):
                    placements = list(r.placed.values())
                    txn.release(r.job_id, placements, [r.tasks[tp.task].demand for tp in placements])

    def _greedy(self, order, gpus, candidates_running, waiting, running) -> dict[str, str]:
        types = list(order)
        if self.spec.shuffles_types:
            self.shuffler.shuffle(types)
        left = dict(gpus)
        chosen: dict[str, str] = {}
        cand = {r.job_id: r for r in (*candidates_running, *waiting)}
        for r in running:                     # between leases: running jobs keep their GPUs
            if r.job_id not in cand and (t := self.on.get(r.job_id)) in left:
                left[t] -= int(round(r.spec.gpus))
                chosen[r.job_id] = t
        if self.spec.shuffles_types and not self.spec.fifo:
            return self._greedy_blind(types, left, chosen, cand)
        for t in types:
            wt = self.worker_time.get(t, 0.0)
            rows = []
            for k, (jid, r) in enumerate(cand.items()):
                x = self.allocation.get(jid, {}).get(t, 0.0)
                if jid not in self.allocation or x == 0.0 or self._speed(r, t) <= 0.0:
                    p = 0.0
                else:
                    frac = self.received[jid].get(t, 0.0) / wt if wt > 0 else 0.0
                    p = x / frac if frac > 0 else x * 1e9
                rows.append((-p, -self.deficits.get(jid, {}).get(t, 0.0), -x, k, jid))
            rows.sort()
            for negp, _, _, _, jid in rows:
                if left[t] <= 0:
                    break
                r = cand[jid]
                if jid in chosen or self._speed(r, t) <= 0.0 or (self.spec.fifo and jid in self.allocation and negp >= 0):
                    continue
                need = int(round(r.spec.gpus))
                if need <= left[t]:
                    left[t] -= need
                    chosen[jid] = t
        return chosen


    def _greedy_blind(self, types, left, chosen, cand) -> dict[str, str]:
        """A type-agnostic policy (LAS, Themis, isolated, min total duration) here: its X is the
        same share on every type (`spread_type_blind`), so which type a job runs on is nothing
        to it, while a type change costs a suspend and a resume. Per job, then: priority = X
        summed over types / the job's share of all types' time; the jobs are picked in that
        order while GPUs are left, and a picked job that runs keeps its type (Gavel's lease
        extension); the others take the first type, in the round's shuffled order, with room.
        Type by type, as Gavel's pass goes, a job with time on one type has the top priority on
        the others and moved at nearly every lease (LAS, 300 jobs at 4 jobs/h: 44,626
        suspensions; docs/policies/gavel.md)."""
        wt = sum(self.worker_time.get(t, 0.0) for t in types)
        rows = []
        for k, (jid, r) in enumerate(cand.items()):
            runs_on = [t for t in types if self._speed(r, t) > 0.0]
            x = sum(self.allocation.get(jid, {}).get(t, 0.0) for t in runs_on)
            if jid not in self.allocation or x == 0.0:
                p = 0.0
            else:
                frac = sum(self.received[jid].get(t, 0.0) for t in runs_on) / wt if wt > 0 else 0.0
                p = x / frac if frac > 0 else x * 1e9
            d = sum(self.deficits.get(jid, {}).get(t, 0.0) for t in runs_on)
            rows.append((-p, -d, -x, k, jid, runs_on))
        rows.sort()
        total = sum(left.values())
        picked = []
        for *_, jid, runs_on in rows:
            need = int(round(cand[jid].spec.gpus))
            if jid in chosen or not runs_on or need > total or not any(need <= left[t] for t in runs_on):
                continue
            picked.append((jid, need, runs_on))
            total -= need
        rest = []
        for jid, need, runs_on in picked:          # lease extension first
            t = self.on.get(jid)
            if t in runs_on and need <= left[t]:
                left[t] -= need
                chosen[jid] = t
            else:
                rest.append((jid, need, runs_on))
        for jid, need, runs_on in rest:
            t = next((t for t in runs_on if need <= left[t]), None)
            if t is not None:
                left[t] -= need
                chosen[jid] = t
        return chosen


@register("filter", "gavel_type", source="Narayanan et al., OSDI'20 (Gavel)")
class GavelTypeFilter(Filter):
    """With gavel_lease: a waiting job is placed only on nodes of the type its lease names, and
    not at all when the lease pass did not choose it."""

    def never_fits(self, job, cluster) -> str:
        """A job runs all on one GPU type (Gavel's X[m, j]: all s_m GPUs of type j), so one that
        needs more GPUs than any type has can never run."""
        if job.kind != "dl":
            return ""
        per_type: dict[str, float] = {}
        for n in cluster.nodes:
            per_type[n.gpu_type] = per_type.get(n.gpu_type, 0.0) + n.gpus
        most = max(per_type.values(), default=0.0)
        if job.gpus > most + 1e-9:
            return (f"Gavel's policies run a job on one GPU type: it needs {job.gpus:g} GPUs, the largest type "
                    f"({max(per_type, key=per_type.get)}) has {most:g}")
        return ""

    def filter(self, ctx, job, task, free) -> NodeMask:
        act = ctx.action(GavelLease)
        n = len(free)
        if act is None or job.kind != "dl":        # bags of tasks: not Gavel's to lease
            return NodeMask(np.ones(n, dtype=bool), "")
        t = act.assigned.get(job.job_id)
        if t is None:
            return NodeMask(np.zeros(n, dtype=bool), "Gavel: no lease this round (jobs of higher priority hold the GPUs)")
        idx = list(ctx.cluster.gpu_types).index(t)
        return NodeMask(np.asarray(ctx.cluster.node_gpu_type) == idx, f"Gavel: its lease is on {t}")


def _register_profiles() -> None:
    from dlsched.scheduler.framework import ProfileSpec, register_profile
    from dlsched.sim.gavel.policies import GAVEL_POLICIES
    for g in GAVEL_POLICIES.values():
        if g.packing:
            continue
        register_profile(ProfileSpec(
            name=g.name, source="Narayanan et al., OSDI'20 (Gavel)",
            description=f"Gavel's {g.gavel} ({g.summary}) as {360:.0f} s leases per GPU type; "
                        "--semantics gavel for Gavel's own round mechanism",
            order="fifo", filters=("fits", "gavel_type"), scores=(("first_fit", 1.0),), actions=("gavel_lease",),
            gang=True, blocking=False, round_s=360.0, params={"gavel_lease": {"policy": g.gavel}}))


_register_profiles()
