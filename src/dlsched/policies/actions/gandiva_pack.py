"""Gandiva's packing (Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep Learning",
OSDI 2018; seed 001, "Gandiva Performance: Packing" and Table 1).

"Jobs are initially being time-sliced on the same P40 GPU. After some time, the scheduler
concludes that their memory and GPU core utilization is small enough that packing them is
feasible and schedules them together on the GPU. The scheduler continues to profile their
performance. Because their aggregate performance improves, packing is retained; otherwise,
packing is undone and the jobs continue to use time-slicing."

On a ring of gandiva_timeslice (jobs taking turns on the same GPUs), with members S:

    feasible(S)  = |S| <= max_jobs  and  sum_{j in S} mem_j <= GPU memory
                   and  sum_{j in S} u_j <= max_util          (peak memory, solo utilisation:
                                                                dlsched.workload.packing)
                   and  every j in S has had a turn alone    (its solo rate measured; not
                                                                needed for a mix already kept,
                                                                nor with profile_first = False)
    pack         : every parked member starts on the ring's GPUs beside the holder (costed
                   Launch / Resume with packed = True); the ring stops rotating
    after window_s packed (the profiling window):
        packed  = sum_j rate_j(packed) / rate_j(solo)               (aggregate, in solo speeds,
                                                                      measured: below)
        sliced  = 1 - (c_out + c_in) / quantum_s                     (one job at a time, less the
                                                                      mean switch cost per turn)
        packed > sliced x (1 + margin)  -> kept
        otherwise                       -> undone: the members that joined are suspended
                                           (costed) and the ring time-slices again; that mix of
                                           models is not packed again

Profiling is measured: rate_j is the backend's `rate` of job j (ctx.stats: steps per second of
its current run, from the step times its rank 0 reports on the runtime; the modelled speed in
the simulator, which runs packed jobs at the packing model's speed, packing.packed_factor).
rate_j(solo) is the rate the job was last seen at while it held the ring's GPUs alone (taken at
every round before the pack); a job never seen alone counts with the packing model's factor
instead (packed_factor of the mix: its share of the aggregate). The window costs what it costs:
the jobs run packed (good or bad) for window_s before the verdict. A mix found good is packed at
once the next time it meets (no new trial). The log keeps how each verdict was reached
("measured" or "modelled").

Default max_util = 1.0 (the jobs' utilisations must add up to one GPU: VAE, SuperResolution and
the light zoo models pack; Table 1's heavy models never try). max_jobs = 2: with the default
time-slicing max_load = 2 a GPU holds at most two jobs.
"""
from __future__ import annotations

import math

from dlsched.policies.actions.gandiva_common import find_action, saved_round_state
from dlsched.policies.actions.gandiva_timeslice import GandivaTimeslice
from dlsched.scheduler.context import JobState
from dlsched.scheduler.events import JobFinish
from dlsched.scheduler.framework import Action, register
from dlsched.workload.packing import gpu_mem_gb, gpu_util, packed_factor

_EPS = 1e-9


def _mix(models) -> tuple:
    return tuple(sorted(str(m) for m in models))


def _restore_empty(c) -> None:
    c.kept, c.undone, c.log, c.judged, c.solo = set(), set(), [], [], {}


@register("action", "gandiva_pack", source="Xiao et al., OSDI 2018 (Gandiva, seed 001 Table 1)")
class GandivaPack(Action):
    """Gandiva packing: time-sliced jobs light enough run together; kept when faster than slicing."""
    needs = frozenset(('costed_switches', 'gpu_sharing', 'preemption'))  # backend capabilities (dlsched.scheduler.backend)
    round_state = ("_round_state",)

    def _save_round(self):
        """round state: kept, undone, log (of immutable tuples), judged (flat dicts) and solo;
        see gandiva_common.saved_round_state."""
        if not (self.kept or self.undone or self.log or self.judged or self.solo):
            return _restore_empty
        kept, undone, log, solo = set(self.kept), set(self.undone), list(self.log), dict(self.solo)
        judged = [dict(d) for d in self.judged]

        def restore(c) -> None:
            c.kept, c.undone, c.log, c.solo = set(kept), set(undone), list(log), dict(solo)
            c.judged = [dict(d) for d in judged]
        return restore

    _round_state = saved_round_state(_save_round)

    def __init__(self, max_util: float = 1.0, max_jobs: int = 2, window_s: float = 120.0,
                 margin: float = 0.0, profile_first: bool = True, enabled: bool = True) -> None:
        if max_util <= 0:
            raise ValueError(f"max_util must be > 0, got {max_util}")
        if max_jobs < 2:
            raise ValueError(f"max_jobs must be >= 2, got {max_jobs}")
        if window_s < 0:
            raise ValueError(f"window_s must be >= 0, got {window_s}")
        self.enabled = bool(enabled)
        if not self.enabled:
            self.needs = frozenset()
        self.max_util = float(max_util)
        self.max_jobs = int(max_jobs)
        self.window_s = float(window_s)
        self.margin = float(margin)
        self.profile_first = bool(profile_first)
        self.kept: set[tuple] = set()      # model mixes whose packing was retained
        self.undone: set[tuple] = set()    # ... and those whose packing was undone
        self.log: list[tuple] = []         # (time, ring members, mix, "pack" | "kept" | "undone")
        self.judged: list[dict] = []       # per verdict: packed and sliced aggregates, how measured
        self.solo: dict[str, float] = {}   # job -> its rate when last seen alone on its ring's GPUs
        self._rings: dict = {}             # gandiva_timeslice's rings (seen at the last round)
        self._jobs = self._cluster = None  # the last round's records and cluster

    def observe(self, now: float, events: list, applied) -> None:
        if self.solo:
            for e in events:
                if isinstance(e, JobFinish):
                    self.solo.pop(e.job_id, None)   # never packed again

    def quiet_until(self, now: float, running) -> float:
        """Time moves one thing alone: a profiling window ends. A ring that could be packed
        (its models fit together and the mix was not undone) is never quiet: its holder's
        solo rate is taken at each round, and the pack waits for it. Nor is a ring with one
        member running (its solo rate is read at each round, below)."""
        if not self.enabled or not self._rings:
            return math.inf
        t = math.inf
        for ring in self._rings.values():
            if sum(1 for m in ring.members if self._jobs[m].placed) == 1:
                # its holder's rate is read at every round (_see_solo), and on the simulator a
                # read integrates the job's progress to now: fewer reads move its finish by
                # float noise (1e-12 s), so such rounds all run, as they did
                return now
            if ring.packed_since is not None:
                if not ring.pack_verdict and now - ring.packed_since < self.window_s - _EPS:
                    t = min(t, ring.packed_since + self.window_s)
                continue
            if self._could_pack(ring):
                return now
        return t - 1e-6   # a little early: the round then runs (float noise in the checks)

    def _could_pack(self, ring) -> bool:
        """The checks of _try_pack that read the members' models alone."""
        if not 2 <= len(ring.members) <= self.max_jobs:
            return False
        models = [self._jobs[m].spec.model for m in ring.members]
        if _mix(models) in self.undone:
            return False
        mem = min(self._cluster.nodes[tp.node].gpu_mem_gb for tp in ring.home if tp.gpu_ids)
        return (sum(gpu_mem_gb(m) for m in models) <= mem + _EPS
                and sum(gpu_util(m) for m in models) <= self.max_util + _EPS)

    def next_wake(self, now: float) -> float | None:
        """The end of the earliest profiling window still open: the verdict is on time."""
        best = None
        for ring in self._rings.values():
            if ring.packed_since is not None and not ring.pack_verdict:
                t = ring.packed_since + self.window_s
                if t > now + _EPS and (best is None or t < best):
                    best = t
        return best

    def before_place(self, ctx) -> None:
        """Judge the packs whose window is over, pack the rings that qualify. Runs before the
        time-slicing rotation (the profile lists gandiva_pack first), so a ring is packed
        instead of starting another turn."""
        ts = find_action(ctx, GandivaTimeslice, self)
        if ts is None or not self.enabled:
            return
        self._rings = ts.rings
        self._jobs, self._cluster = ctx.jobs, ctx.snap.cluster
        for ring in list(ts.rings.values()):
            run = [m for m in ring.members if self._on_home(ctx, ring, m)]
            if len(run) >= 2:
                self._judge(ctx, ts, ring, run)
            elif len(run) == 1:
                self._see_solo(ctx, ring, run[0])
                self._try_pack(ctx, ts, ring, run[0])

    @staticmethod
    def _on_home(ctx, ring, job_id: str) -> bool:
        rec = ctx.jobs.get(job_id)
        return (rec is not None and rec.state is JobState.RUNNING and job_id not in ctx.txn.released
                and frozenset(rec.placed.values()) == ring.home_set)

    def _sliced(self, ts, models) -> float:
        """Time-sliced aggregate throughput in solo speeds: one job at a time, less the mean
        suspend + resume per turn."""
        switch = sum(2 * ts.cost.copy_s(m) for m in models) / len(models)
        return max(0.0, 1.0 - switch / ts.quantum_s)

    @staticmethod
    def _rate(ctx, job_id: str) -> float:
        st = ctx.stats(job_id) if ctx.stats is not None else None
        return float(st.get("rate") or 0.0) if st else 0.0

    def _see_solo(self, ctx, ring, job_id: str) -> None:
        """The holder runs alone on the ring's GPUs (nobody packed with it): its rate now is
        its solo rate."""
        if all(ctx.snap.gpu_load[tp.node, g] <= 1 for tp in ring.home for g in tp.gpu_ids):
            r = self._rate(ctx, job_id)
            if r > 0:
                self.solo[job_id] = r

    def packed_aggregate(self, ctx, run: list[str]) -> tuple[float, str]:
        """The packed jobs' aggregate throughput in solo speeds, and "measured" (every job's
        packed and solo rates known) or "modelled" (the packing model's, for the jobs missing)."""
        models = [ctx.jobs[m].spec.model for m in run]
        factor = packed_factor(models)
        total, how = 0.0, "measured"
        for m in run:
            now, solo = self._rate(ctx, m), self.solo.get(m, 0.0)
            if now > 0 and solo > 0:
                total += now / solo
            else:
                total, how = total + factor, "modelled"
        return total, how

    def _judge(self, ctx, ts, ring, run) -> None:
        if ring.pack_verdict or ring.packed_since is None:
            return
        if ctx.now - ring.packed_since < self.window_s - _EPS:
            return
        models = [ctx.jobs[m].spec.model for m in run]
        packed, how = self.packed_aggregate(ctx, run)
        sliced = self._sliced(ts, models)
        mix = _mix(models)
        keep = packed > sliced * (1 + self.margin)
        self.judged.append({"time": ctx.now, "jobs": tuple(run), "mix": mix, "packed": packed,
                            "sliced": sliced, "how": how, "verdict": "kept" if keep else "undone"})
        if keep:
            ring.pack_verdict = "kept"
            self.kept.add(mix)
            self.log.append((ctx.now, tuple(run), mix, "kept"))
            return
        for m in run[1:]:
            rec = ctx.jobs[m]
            if m not in ctx.txn.released and m not in ctx.txn.decided:
                ts.suspend(ctx, rec)
        ring.members = [run[0]] + [m for m in ring.members if m != run[0]]
        ring.packed_since = None
        ring.since = ctx.now
        self.undone.add(mix)
        self.log.append((ctx.now, tuple(run), mix, "undone"))

    def _try_pack(self, ctx, ts, ring, holder: str) -> None:
        parked = [m for m in ring.members if m != holder and m in ctx.jobs and not ctx.jobs[m].placed
                  and ctx.jobs[m].state in (JobState.PENDING, JobState.SUSPENDED)
                  and m not in ctx.txn.decided and m not in ctx.txn.released]
        if not parked or len(parked) + 1 != len(ring.members) or len(ring.members) > self.max_jobs:
            return
        group = [holder, *parked]
        models = [ctx.jobs[m].spec.model for m in group]
        mix = _mix(models)
        if mix in self.undone:
            return
        cluster = ctx.snap.cluster
        mem = min(cluster.nodes[tp.node].gpu_mem_gb for tp in ring.home if tp.gpu_ids)
        if sum(gpu_mem_gb(m) for m in models) > mem + _EPS:
            return
        if sum(gpu_util(m) for m in models) > self.max_util + _EPS:
            return
        if (self.profile_first and ctx.stats is not None and mix not in self.kept
                and any(m not in self.solo for m in group)):
            return   # profiled first: every member has had a turn alone (its solo rate is known)
        started = [m for m in parked if ts.start(ctx, ring, m, packed=True)]
        if not started:
            return
        ring.packed_since = ctx.now
        ring.pack_verdict = "kept" if mix in self.kept else ""
        self.log.append((ctx.now, (holder, *started), mix, "pack"))
