"""Tiresias's discretised two-dimensional least-attained-service order (2D-LAS).

Source: Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI 2019
(its Discretized 2D-LAS scheduler), and the Tiresias baseline of Pollux's simulator (petuum/adaptdl,
simulator/tiresias.py, `TiresiasPolicy`), whose behaviour this module mirrors.

Attained service is two-dimensional: GPUs x time, in GPU-seconds (JobRecord.attained(now):
what the job has held so far, restart delays included, as in Pollux where `executed_time` runs
while the job is RUNNING). K queues with thresholds Q_1 < ... < Q_{K-1}:

    service(job) = attained(now) - base(job)           base: service at its last promotion (0)
    queue(job)   = #{ i : service(job) >= Q_i }        0 = highest priority
    key(job)     = (queue(job),)                       the framework appends (submit_time_s,
                                                       job_id): FIFO inside a queue

A job is demoted when its service crosses its queue's threshold (`>=`, as Pollux's
`gputime >= self._queue_threshold`); keys are evaluated every round, so with the profile's
round_s = 60 a demotion takes effect at the next round, at most 60 s after the crossing (Pollux's
simulator checks every 60 s interval).
Preemption (a demoted running job yielding its GPUs to higher queues) is the `preempt` action
of the profile; this module only orders.

Defaults and where they come from:
- thresholds = [57600.0] GPU-seconds (3600 x 16 = 16 GPU-hours): two queues, Pollux's
  `self._queue_threshold = 3600 * 16` with `_queue_0` / `_queue_1`.
- starve_factor = 0.0 (no starvation guard): Pollux's `self._solve_starvation = 0`, which turns
  the guard off. The Tiresias paper's guard (STARVELIMIT) is enabled by any factor > 0
  (e.g. 2.0).

Starvation guard (starve_factor > 0): a waiting job that has run before is promoted to queue 0
when the time it has waited since it was last preempted is at least starve_factor x the length
of its last run (the paper: "waiting time ... exceeds STARVELIMIT x its last execution time").
Promotion resets its service (base = attained now), so it stays in queue 0 until it has
received another Q_1 of service there - as Pollux's promotion resets `_executed_time` to 0.
Jobs that never ran are in queue 0 anyway. Differences from Pollux's guard, which follows the
same rule with cumulative counters: Pollux compares all pending time since the job first ran
(`_last_pending_time`, never reset except at promotion) with all execution time since the last
promotion; we use the paper's "since it was last preempted" and "last execution".
Progress: without the guard every job finishes (queues are finite: jobs that keep being
preempted sink to the last queue, which is FIFO). With the guard, runs can be cut shorter than
the backend's restart delay (a resumed job attains service while it restores, so with small
thresholds it is demoted and preempted before it trains at all, then promoted back again): set
the `preempt` action's min_run_s above the restart delay, so that every run makes progress.

Profile `tiresias`: this order + fits + `most_free` placement + the `preempt` action, gang, not
blocking (Pollux's walk skips a job that does not fit), rounds only at multiples of 60 s
(`round_s: 60`, `event_rounds: false`: Pollux's `--interval 60` loop; an arrival or a finish
waits for the next multiple). Placement: Pollux puts a job's replicas chunk by chunk on the node
with the most free GPUs; the `most_free` scorer does the same task by task (see its module).

Remaining differences from Pollux's simulator: Pollux keeps its queues as lists in order of
entry (a demoted job goes to the back of queue 1), we order a queue by submission (the paper's
FIFO); Pollux charges its 30 s restart (`rescale_time = 30`) on the first start too - in dlsched
that is the backend's start_delay_s (default 0; the pollux-fidelity experiment sets 30).

running_first (default false; true under `--semantics tiresias`): inside a queue, jobs that
hold GPUs come before waiting ones, as in the Tiresias simulator (SymbioticLab/Tiresias,
run_sim.py `dlas_sim_jobs`), which moves a queue's pending jobs behind its running ones after
every pass, so a running job is never preempted by a job of its own queue.

Per-job state (when the job last started, when it last stopped, the length of its last run, its
promotion base) is kept here, keyed by job_id, and updated from what the order observes
(`observe`: a Launch or Resume starts a run at the time the plan is applied, a Suspend ends it,
a finish drops the entry) and, at the start of each round (`begin_round`), from the view: a job
found waiting although it was last seen starting (stopped by a node failure, not by a plan) ends
its run then, and starving jobs are promoted. `key` reads this state and changes nothing.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from dlsched.core.types import Launch, Resume, Suspend
from dlsched.scheduler import events as ev
from dlsched.scheduler.framework import Order, ProfileSpec, register, register_profile

#: Pollux's simulator/tiresias.py: `self._queue_threshold = 3600 * 16` (GPU-seconds).
POLLUX_THRESHOLDS = (3600.0 * 16,)
#: Pollux's simulator/tiresias.py: `self._solve_starvation = 0` (guard off).
POLLUX_STARVE_FACTOR = 0.0


@dataclass(slots=True)
class _JobState:
    run_start: float | None = None     # start of the current run (None while waiting)
    wait_since: float | None = None    # arrival, or end of its last run
    last_run_s: float = 0.0            # length of its last run
    base: float = 0.0                  # service at its last promotion


@register("order", "tiresias", source="Gu et al., NSDI 2019 (Tiresias); petuum/adaptdl simulator/tiresias.py")
class TiresiasOrder(Order):
    """Discretised 2D-LAS: queue by attained GPU-seconds, FIFO inside a queue, starvation promotion."""
    static = False   # attained service grows while a job runs

    def __init__(self, thresholds: list = list(POLLUX_THRESHOLDS),
                 starve_factor: float = POLLUX_STARVE_FACTOR, running_first: bool = False) -> None:
        ths = []
        for x in thresholds:
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise ValueError(f"thresholds: numbers of GPU-seconds expected, got {x!r}")
            ths.append(float(x))
        if any(x <= 0 for x in ths) or any(b <= a for a, b in zip(ths, ths[1:])):
            raise ValueError(f"thresholds must be positive and increasing, got {list(thresholds)}")
        if starve_factor < 0:
            raise ValueError(f"starve_factor must be >= 0 (0: no starvation guard), got {starve_factor}")
        self.thresholds = tuple(ths)
        self.starve_factor = float(starve_factor)
        if not isinstance(running_first, bool):
            raise ValueError(f"running_first must be true or false, got {running_first!r}")
        self.running_first = running_first
        self._state: dict[str, _JobState] = {}
        self.promotions: dict[str, int] = {}   # job -> times promoted by the starvation guard

    @property
    def waiting_keys_kept(self) -> bool:
        """A waiting job that holds nothing attains no service, so its key stays while it waits
        (dlsched.scheduler.kept_order); promotions by the starvation guard move it with time."""
        return self.starve_factor <= 0

    def queue_of(self, service: float) -> int:
        """Queue index of a job that has received `service` GPU-seconds since its last promotion."""
        return bisect.bisect_right(self.thresholds, service)

    def begin_round(self, ctx) -> None:
        """Fold the time into the per-job state before the round's keys: a job found waiting
        although it was last seen starting (stopped by a node failure, not by a plan) ends its
        run now; a running job never seen starting starts now; a waiting job that has starved
        long enough is promoted. Idempotent for one round time (a promoted job's service is 0).

        Without the starvation guard nothing here is ever read: the per-job state matters only
        through a promotion's base, and only the guard promotes. The pass over every waiting
        and running job is then skipped (it was most of Tiresias's excess over FIFO on the
        Philly trace: ~1,000 running jobs at every round)."""
        if self.starve_factor <= 0:
            return
        now = ctx.now
        state = self._state
        for job in ctx.queue:
            st = state.get(job.job_id)
            if st is None:
                st = state[job.job_id] = _JobState(wait_since=job.submit_time_s)
            if st.run_start is not None:
                # Stopped without a Suspend of ours (a node failed): its run ended by now.
                st.last_run_s = max(now - st.run_start, 0.0)
                st.run_start, st.wait_since = None, now
            attained = job.attained(now)
            if (self.starve_factor > 0 and st.last_run_s > 0 and st.wait_since is not None
                    and now - st.wait_since >= self.starve_factor * st.last_run_s
                    and self.queue_of(attained - st.base) > 0):
                st.base = attained                     # promoted to queue 0, service reset
                self.promotions[job.job_id] = self.promotions.get(job.job_id, 0) + 1
        for job in ctx.running:
            st = state.get(job.job_id)
            if st is None:
                st = state[job.job_id] = _JobState()
            if st.run_start is None:
                st.run_start, st.wait_since = now, None   # started outside a plan we saw

    def key(self, job, ctx) -> tuple:
        """Pure: the job's queue from its attained service since its last promotion."""
        if ctx is None:   # only static orders are keyed without a round
            return (0,)
        st = self._state.get(job.job_id)
        q = self.queue_of(job.attained(ctx.now) - (st.base if st is not None else 0.0))
        if self.running_first:   # Tiresias's simulator: a queue's running jobs ahead of its waiting ones
            return (q, 0 if job.held_gpus() > 0 else 1)
        return (q,)

    def quiet_until(self, now: float, running) -> float | None:
        """Waiting jobs keep their queue; the order changes when a running job's service since
        its last promotion reaches its next threshold. With the starvation guard on, waiting
        jobs are promoted with time too: never quiet then."""
        if self.starve_factor > 0:
            return -math.inf
        t = math.inf
        state = self._state
        for job in running:
            held = job.held_gpus()
            if held <= 0:
                continue
            st = state.get(job.spec.job_id)
            # job.attained(now), with the GPUs held read once (the same operations)
            since = job._service_since
            attained = job.attained_gpu_s + ((now - since) * held if since is not None else 0.0)
            service = attained - (st.base if st is not None else 0.0)
            q = self.queue_of(service)
            if q < len(self.thresholds):
                t = min(t, now + (self.thresholds[q] - service) / held)
        return t

    # -- observed state ---------------------------------------------------------------------------
    def observe(self, now: float, events: list, applied) -> None:
        """A Launch or Resume starts a run at the time it is applied, a Suspend ends it;
        finished jobs are forgotten."""
        state = self._state
        if applied is not None:
            for d in applied.decisions:
                st = state.get(d.job_id)
                if isinstance(d, (Launch, Resume)):
                    if st is None:
                        st = state[d.job_id] = _JobState()
                    if st.run_start is None:
                        st.run_start, st.wait_since = now, None
                elif isinstance(d, Suspend) and st is not None and st.run_start is not None:
                    st.last_run_s = max(now - st.run_start, 0.0)
                    st.run_start, st.wait_since = None, now
                # Migrate, Resize: still running
        for e in events:
            if isinstance(e, ev.JobFinish):
                state.pop(e.job_id, None)


register_profile(ProfileSpec(
    name="tiresias", source="Gu et al., NSDI 2019 (Tiresias); Pollux's Tiresias baseline (petuum/adaptdl)",
    description="Tiresias discretised 2D-LAS: queues by attained GPU-seconds (Pollux's threshold: "
                "16 GPU-hours), FIFO in a queue, lower queues preempted every 60 s; gang, most-free nodes",
    order="tiresias", filters=("fits",), scores=(("most_free", 1.0),), actions=("preempt",),
    gang=True, blocking=False, round_s=60.0, event_rounds=False))
