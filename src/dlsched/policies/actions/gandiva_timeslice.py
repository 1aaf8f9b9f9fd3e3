"""Gandiva's time slicing under over-subscription (Xiao et al., "Gandiva: Introspective Cluster
Scheduling for Deep Learning", OSDI 2018; seed 001, "Gandiva Mechanisms" and Figure 9).

During overload Gandiva does not queue a new job until GPUs free up: it gives it GPUs that a job
of the same size already uses, and the jobs on those GPUs take turns of a quantum (60 s),
suspending and resuming at mini-batch boundaries (GPU memory to host memory and back). Here a
set of jobs taking turns on the same GPUs is a *ring*:

    ring r = (home H_r: one placement per task, members M_r = [m_0, m_1, ..., m_{k-1}])
             m_0 holds H_r (its turn), the others are parked (suspended, or never started)

    admission (after the round's placement): a waiting DL job j that got nothing joins the
        ring of a running job of the same shape (GPUs per task, task by task; GPU type) with
        the fewest members, when |M_r| < max_load and j's CPU / memory / disk / network fit
        H_r's nodes in place of m_0's. A running job with nobody to share becomes a ring of 1.
    rotation (every round): when m_0's turn is over, now - turn_start >= quantum_s, and m_0 has
        run min_run_s since it (re)started, Suspend(m_0) and start m_1 on H_r (Launch or
        Resume), the ring rotates: M_r = [m_1, ..., m_{k-1}, m_0]. Members that do not fit in
        place of m_0 are skipped.
    a ring whose holder left (finished, moved elsewhere) starts its next member at once; a
        member that no longer fits H_r leaves the ring (an ordinary waiting job again); a ring
        of one dissolves.

Every suspend and resume is costed (gandiva_common's decisions, dlsched.sim.switch_cost): the
suspended job first finishes its mini-batch, then copies its GPU memory out (fixed_s + bytes /
host_gbps); the next job copies its memory in (the same). Parked members are decided for the
round (the placement loop does not start them elsewhere: gandiva_migrate moves them to freed
GPUs). With `max_load` = 2 no GPU has more than two jobs time-sharing it, and only the holder
(plus the jobs gandiva_pack runs beside it) uses it at any time.

Turns end on time: `next_wake` asks the scheduler for a round at the end of the earliest turn
that someone waits for (the backend's wake_at), whatever the profile's round interval.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from dlsched.core import types as T
from dlsched.core.types import GPU
from dlsched.policies.actions.gandiva_common import (RestartClock, fits_except_gpu, is_whole_dl,
                                                     saved_round_state, start_on, suspend)
from dlsched.scheduler.context import JobState
from dlsched.scheduler.events import JobFinish
from dlsched.scheduler.framework import Action, register
from dlsched.workload.packing import SwitchCost

_EPS = 1e-9


@dataclass(eq=False)
class Ring:
    """Jobs taking turns on the same GPUs."""
    rid: int
    home: tuple                  # TaskPlacements, by task index
    shape: tuple                 # GPUs per task
    members: list = field(default_factory=list)   # members[0] holds home (with packed jobs)
    since: float = 0.0           # start of the current turn
    packed_since: float | None = None   # gandiva_pack: when the members were packed
    pack_verdict: str = ""       # gandiva_pack: "", "kept"

    def copy(self) -> "Ring":
        """An independent copy (home and shape are immutable tuples: shared)."""
        return Ring(self.rid, self.home, self.shape, list(self.members), self.since,
                    self.packed_since, self.pack_verdict)

    @property
    def home_set(self) -> frozenset:
        return frozenset(self.home)

    @property
    def nodes(self) -> list[int]:
        return sorted({tp.node for tp in self.home})


def shape_of(rec) -> tuple:
    return tuple(t.demand[GPU] for t in sorted(rec.tasks, key=lambda t: t.index))


@register("action", "gandiva_timeslice", source="Xiao et al., OSDI 2018 (Gandiva, seed 001)")
class GandivaTimeslice(Action):
    """Gandiva time slicing: jobs of one size take turns of a quantum on shared GPUs (over-subscription)."""
    needs = frozenset(('costed_switches', 'preemption'))  # backend capabilities (dlsched.scheduler.backend)
    round_state = ("_round_state",)

    def _save_round(self):
        """round state: rings (each Ring copied: its members change), ring_of, _next, costed,
        _fingerprint (immutable) and _changed; see gandiva_common.saved_round_state."""
        nxt, fp, changed = self._next, self._fingerprint, self._changed
        if not (self.rings or self.ring_of or self.costed):
            last = self._empty_saved
            if last is not None and last[0] == (nxt, fp, changed):
                return last[1]   # it captures only these immutable values: the same function

            def restore(c) -> None:
                c.rings, c.ring_of, c.costed = {}, {}, set()
                c._next, c._fingerprint, c._changed = nxt, fp, changed
            self._empty_saved = ((nxt, fp, changed), restore)
            return restore
        rings = {rid: r.copy() for rid, r in self.rings.items()}
        ring_of, costed = dict(self.ring_of), set(self.costed)

        def restore(c) -> None:
            c.rings = {rid: r.copy() for rid, r in rings.items()}
            c.ring_of, c.costed = dict(ring_of), set(costed)
            c._next, c._fingerprint, c._changed = nxt, fp, changed
        return restore

    _round_state = saved_round_state(_save_round)

    def __init__(self, quantum_s: float = 60.0, max_load: int = 2, min_run_s: float = 30.0,
                 host_gbps: float = 80.0, fixed_s: float = 0.5, restart_s: float = 5.0,
                 enabled: bool = True) -> None:
        if quantum_s <= 0:
            raise ValueError(f"quantum_s must be > 0, got {quantum_s}")
        if max_load < 1:
            raise ValueError(f"max_load must be >= 1, got {max_load}")
        if min_run_s < 0 or min_run_s > quantum_s:
            raise ValueError(f"min_run_s must be in [0, quantum_s], got {min_run_s}")
        self.enabled = bool(enabled)
        self.quantum_s = float(quantum_s)
        self.max_load = int(max_load)
        self.min_run_s = float(min_run_s)
        self.cost = SwitchCost(host_gbps=float(host_gbps), fixed_s=float(fixed_s), restart_s=float(restart_s))
        self.rings: dict[int, Ring] = {}
        self.ring_of: dict[str, int] = {}
        self._next = 0
        self.clock = RestartClock()
        self._started: set[str] = set()  # members a ring started in this round
        self._txn = None                  # ... the round (its transaction) they belong to
        self.costed: set[str] = set()     # jobs whose checkpoint a costed suspend wrote
        # the rings as the last round left them, and whether that round changed them (a round
        # that changed them without a decision, an admission, is followed by one more)
        self._fingerprint: tuple = ()
        self._changed = False
        self._jobs = None                 # the records (ctx.jobs) of the last round
        self._empty_saved = None          # _save_round's last closure for an empty state

    # -- hooks ---------------------------------------------------------------------------------

    def observe(self, now: float, events: list, applied) -> None:
        self.clock.observe(now, events, applied)
        if self.costed:
            for e in events:
                if isinstance(e, JobFinish):
                    self.costed.discard(e.job_id)   # never resumed again

    def quiet_until(self, now: float, running) -> float:
        """Time moves one thing alone: a turn ends (quantum_s since it began, and the holder
        ran min_run_s). A ring whose turn was over at the last round and kept its holder
        waits for an event (its parked members do not fit in its holder's place). After a
        round that changed the rings (an admission decides nothing yet changes what the next
        round does): not quiet."""
        if not self.enabled or not self.rings:
            return math.inf
        if self._changed:
            return now
        jobs = self._jobs
        t = math.inf
        for ring in self.rings.values():
            if len(ring.members) < 2:
                continue
            run = [m for m in ring.members if jobs[m].placed]
            if len(run) != 1:
                continue   # packed, or nobody holds it: an event comes first
            holder = jobs[run[0]]
            if not (now - ring.since < self.quantum_s - _EPS
                    or self.clock.ran_for(holder, now) < self.min_run_s - _EPS):
                continue   # over already, and not rotated: blocked until an event
            end = ring.since + self.quantum_s
            start = self.clock.started.get(holder.job_id, holder.first_start_s)
            if start is not None:
                end = max(end, start + self.min_run_s)
            t = min(t, end)
        return t - 1e-6   # a little early: the round then runs (float noise in the checks)

    def next_wake(self, now: float) -> float | None:
        """The end of the earliest turn with someone waiting (no later than the quantum, and
        the holder has run min_run_s): turns end on time, not at the next periodic round."""
        if not self.enabled:
            return None
        best = None
        for ring in self.rings.values():
            if len(ring.members) < 2:
                continue
            t = ring.since + self.quantum_s
            started = self.clock.started.get(ring.members[0])
            if started is not None:
                t = max(t, started + self.min_run_s)
            if t > now + _EPS and (best is None or t < best):
                best = t
        return best

    def before_place(self, ctx) -> None:
        """Tidy the rings, start the next member where the holder left, end the turns that are
        over; parked members are decided for this round."""
        if not self.enabled:
            return
        self._jobs = ctx.jobs
        if not self.rings:
            return   # (most rounds of a trace the cluster holds: nothing to tidy, rotate or park)
        for ring in list(self.rings.values()):
            self._sync(ctx, ring)
        for ring in list(self.rings.values()):
            self._rotate(ctx, ring)
        self._park(ctx)

    def act(self, ctx) -> None:
        """Admit the jobs the round could not place into rings (over-subscription)."""
        if not self.enabled:
            return
        self._cost_resumes(ctx)
        touched = self._admit(ctx)
        for rid in touched:
            self._rotate(ctx, self.rings[rid])
        self._park(ctx)
        fp = tuple((r.rid, tuple(r.members), r.since, r.packed_since, r.pack_verdict)
                   for r in self.rings.values())
        self._changed, self._fingerprint = fp != self._fingerprint, fp

    # -- rings ---------------------------------------------------------------------------------
    def leave(self, job_id: str) -> None:
        """`job_id` is no longer a member of its ring (another action moved it)."""
        rid = self.ring_of.pop(job_id, None)
        if rid is not None and rid in self.rings:
            ring = self.rings[rid]
            if job_id in ring.members:
                ring.members.remove(job_id)

    def started(self, ctx) -> set[str]:
        """The members rings started in this round."""
        if self._txn is not ctx.txn:
            self._txn, self._started = ctx.txn, set()
        return self._started

    def is_running(self, ctx, job_id: str) -> bool:
        """Holds the ring's GPUs after this round's decisions so far."""
        if job_id in self.started(ctx):
            return True
        return job_id not in ctx.txn.released and bool(ctx.jobs[job_id].placed)

    def parked(self, ctx, ring: Ring) -> list[str]:
        return [m for m in ring.members if not self.is_running(ctx, m)]

    def running(self, ctx, ring: Ring) -> list[str]:
        return [m for m in ring.members if self.is_running(ctx, m)]

    def suspend(self, ctx, rec) -> None:
        """Suspend a running member (costed: mini-batch boundary, copy to host memory)."""
        suspend(ctx.txn, rec, self.cost)
        self.costed.add(rec.job_id)

    def _cost_resumes(self, ctx) -> None:
        """A job this action suspended may be resumed by plain placement (it left its ring):
        its Resume restores the host-memory checkpoint at this action's cost, not the run's
        restart_delay_s."""
        if not self.costed:
            return
        decisions = ctx.txn.plan.decisions
        for i, d in enumerate(decisions):
            if isinstance(d, T.Resume) and d.cost is None and d.job_id in self.costed:
                decisions[i] = T.Resume(d.job_id, d.placements, cost=self.cost, packed=d.packed)

    def start(self, ctx, ring: Ring, job_id: str, *, packed: bool = False) -> bool:
        """Start a parked member on the ring's home (costed); True when it fits."""
        rec = ctx.jobs[job_id]
        if job_id in ctx.txn.released or rec.state not in (JobState.PENDING, JobState.SUSPENDED):
            return False   # suspended in this round (it restarts in a later one), or not waiting
        if start_on(ctx, rec, ring.home, self.cost, packed=packed):
            self.started(ctx).add(job_id)
            return True
        return False

    def _dissolve(self, ring: Ring) -> None:
        for m in ring.members:
            if self.ring_of.get(m) == ring.rid:
                del self.ring_of[m]
        del self.rings[ring.rid]

    def _sync(self, ctx, ring: Ring) -> None:
        if not all(ctx.snap.up[n] for n in ring.nodes):
            self._dissolve(ring)
            return
        keep = []
        for m in ring.members:
            rec = ctx.jobs.get(m)
            if (rec is None or rec.state in (JobState.DONE, JobState.REJECTED, JobState.PARTIAL)
                    or (rec.placed and frozenset(rec.placed.values()) != ring.home_set)):
                if self.ring_of.get(m) == ring.rid:
                    del self.ring_of[m]
                continue
            keep.append(m)
        run = [m for m in keep if ctx.jobs[m].placed]
        ring.members = run + [m for m in keep if not ctx.jobs[m].placed]
        if not run and any(ctx.txn.gpu_load[tp.node, g] > 0 for tp in ring.home for g in tp.gpu_ids):
            self._dissolve(ring)   # the holder left and another job took its GPUs (gandiva_migrate)
            return
        if not run:
            # The holder left: the next member that fits starts at once; the others leave.
            while ring.members:
                if self.start(ctx, ring, ring.members[0]):
                    ring.since = ctx.now
                    break
                del self.ring_of[ring.members.pop(0)]
        if len(ring.members) <= 1:
            self._dissolve(ring)

    def _rotate(self, ctx, ring: Ring) -> None:
        run = self.running(ctx, ring)
        parked = self.parked(ctx, ring)
        if len(run) != 1 or not parked:
            return   # nobody waits, or packed (gandiva_pack), or just started this round
        holder = ctx.jobs[run[0]]
        if ctx.now - ring.since < self.quantum_s - _EPS or self.clock.ran_for(holder, ctx.now) < self.min_run_s - _EPS:
            return
        if holder.job_id in ctx.txn.decided or holder.job_id in ctx.txn.released or not holder.spec.preemptible:
            return
        free = ctx.txn.free.copy()
        for tp in holder.placed.values():
            free[tp.node] += holder.tasks[tp.task].vector
        for m in parked:
            rec = ctx.jobs[m]
            tasks = [rec.tasks[tp.task] for tp in ring.home]
            if fits_except_gpu(free, tasks, ring.home):
                self.suspend(ctx, holder)
                self.start(ctx, ring, m)
                ring.members = [m] + [x for x in ring.members if x not in (m, holder.job_id)] + [holder.job_id]
                ring.since = ctx.now
                return

    def _park(self, ctx) -> None:
        for ring in self.rings.values():
            for m in ring.members:
                if not self.is_running(ctx, m):
                    ctx.txn.decided.add(m)

    def _admit(self, ctx) -> set[int]:
        txn = ctx.txn
        waiting = [rec for rec in ctx.queue
                   if rec.job_id not in txn.decided and rec.job_id not in txn.released
                   and rec.job_id not in self.ring_of and not rec.placed and is_whole_dl(rec)
                   and rec.spec.preemptible          # a ring member is suspended in its turn
                   and rec.state in (JobState.PENDING, JobState.SUSPENDED)]
        if not waiting or self.max_load < 2:
            return set()
        # Candidate holders by shape: existing rings with room, or running jobs alone on GPUs.
        options: dict[tuple, list] = {}
        for ring in self.rings.values():
            run = self.running(ctx, ring)
            if len(run) == 1 and len(ring.members) < self.max_load and run[0] not in txn.released:
                options.setdefault(ring.shape, []).append(ring)
        for rec in ctx.running:
            if (rec.job_id in self.ring_of or rec.job_id in txn.released or rec.job_id in txn.decided
                    or rec.state is not JobState.RUNNING or rec.unplaced() or not is_whole_dl(rec)
                    or not rec.spec.preemptible                # non-preemptible: never a ring holder
                    or len(rec.tasks) != len(rec.spec.tasks)   # resized (grown): not a ring holder
                    or any(ctx.snap.gpu_load[tp.node, g] > 1 for tp in rec.placed.values() for g in tp.gpu_ids)):
                continue
            options.setdefault(shape_of(rec), []).append(rec)
        touched: set[int] = set()
        cluster = ctx.snap.cluster
        for rec in waiting:
            shape = shape_of(rec)
            best, best_key = None, None
            for opt in options.get(shape, ()):
                if isinstance(opt, Ring):
                    home, size, holder = opt.home, len(opt.members), ctx.jobs[opt.members[0]]
                else:
                    home, size, holder = tuple(sorted(opt.placed.values(), key=lambda tp: tp.task)), 1, opt
                if size >= self.max_load:
                    continue
                mask = cluster.type_mask(rec.spec)
                if mask is not None and any(not mask[tp.node] for tp in home if tp.gpu_ids):
                    continue
                free = txn.free.copy()
                for tp in holder.placed.values():
                    free[tp.node] += holder.tasks[tp.task].vector
                if not fits_except_gpu(free, [rec.tasks[tp.task] for tp in home], home):
                    continue
                key = (size, min(tp.node for tp in home), tuple(g for tp in home for g in tp.gpu_ids))
                if best_key is None or key < best_key:
                    best, best_key = (opt, home, holder), key
            if best is None:
                continue
            opt, home, holder = best
            if isinstance(opt, Ring):
                ring = opt
            else:
                ring = Ring(self._next, home, shape, [holder.job_id],
                            since=ctx.now - min(self.clock.ran_for(holder, ctx.now), 1e18))
                self._next += 1
                self.rings[ring.rid] = ring
                self.ring_of[holder.job_id] = ring.rid
                options[shape].remove(holder)
                options[shape].append(ring)
            ring.members.append(rec.job_id)
            self.ring_of[rec.job_id] = ring.rid
            txn.decided.add(rec.job_id)
            touched.add(ring.rid)
        return touched
