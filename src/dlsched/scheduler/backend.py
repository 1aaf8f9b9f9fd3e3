"""The Backend protocol: what the Scheduler needs from whatever runs the jobs.

Two backends implement it: the simulator (dlsched.sim.SimBackend) and the real runtime
(dlsched.runtime.backend.RayBackend). The Scheduler never asks which one it drives; it asks what
each can do (`capabilities`) and refuses, at start, a profile that needs more.

Calling contract (one thread; the Scheduler's run loop):
    poll()      -> the next batch of events (all at one clock value), or None when the run is
                   over (nothing running, nothing left to arrive, no wake-up pending). A real
                   runtime blocks here until something happens.
    now()       -> the clock after the last poll().
    snapshot()  -> a read-only Snapshot of the cluster for a round.
    apply(plan) -> carry out a round's decisions, in plan.ordered() order. Everything in the plan
                   fits the snapshot it was made from (the transaction checked it). A decision
                   the backend cannot carry out raises (never a silent no-op).
    wake_at(t)  -> ask for a RoundTick at time t (periodic rounds); idempotent per t.
    usage()     -> (allocated GPUs, effective GPUs: held by jobs that are making progress,
                    partial-hold GPUs: held by gang jobs still waiting for the rest of their tasks).
    job_stats(job_id) -> the per-job counters below (STATS_KEYS), one vocabulary for both.
    capabilities -> frozenset of CAPABILITIES the backend carries out.
    use_capabilities(needs) (optional) -> called once by Scheduler.run, after the capability
                   check, with what the profile needs: a capability that is a mode of the backend
                   (the simulator's `prescheduling`) is turned on only when a profile asks for it.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from dlsched.cluster.state import Snapshot
from dlsched.core.types import Plan

#: What a backend may declare it can carry out, and a policy component may need.
CAPABILITIES = {
    "preemption": "Suspend and Resume (checkpoint at a mini-batch boundary, restart later)",
    "migration": "Migrate a running job to other placements",
    "resize": "Resize a job to another task list (workers / parameter servers)",
    "costed_switches": "charge a decision's own `cost` (SwitchCost) for its suspend, resume, "
                       "migration or resize, instead of the backend's default restart cost",
    "gpu_sharing": "run two jobs on one GPU (`packed` decisions: Gandiva's packing and "
                   "over-subscription, fine-grained sharing)",
    "progress": "measure each job's progress: step, remaining work, rate and loss in job_stats",
    "prescheduling": "hand a job's GPUs to the next job when it enters its saving phase, so that "
                     "job's launch (data and model transfer) overlaps the saving (Liquid)",
}

#: job_stats(job_id) keys, filled by both backends (None where not known yet).
STATS_KEYS = {
    "step": "iterations (mini-batches) done so far (None: a job without iterations)",
    "remaining": "work left: iterations for a DL job with an iteration count, else seconds of "
                 "work at its ideal placement",
    "progress": "fraction of the job done, in [0, 1]",
    "rate": "units of `remaining` done per second at the current placement (0 when not running); "
            "measured on the runtime, modelled in the simulator",
    "loss": "the training loss at `step` (reported by the program; the loss model in the simulator)",
    "gpu_s": "GPU-seconds held so far",
    "first_progress_s": "when the job first made progress (backend clock), None before",
    "suspends": "times the job was suspended",
    "resumes": "times the job was resumed",
    "switch_lost_s": "seconds lost to suspends, resumes, migrations and resizes (held, no progress)",
    "switch_lost_gpu_s": "the same in GPU-seconds",
    "nic_bytes": "bytes its ranks sent over NICs (0 where not measured)",
    "cross_rack_bytes": "bytes its ranks sent across racks (0 where not measured)",
}


def capabilities_of(backend) -> frozenset:
    """The backend's declared capabilities (a backend that declares none can do none)."""
    caps = frozenset(getattr(backend, "capabilities", frozenset()))
    unknown = caps - set(CAPABILITIES)
    if unknown:
        raise ValueError(f"{type(backend).__name__} declares unknown capabilities {sorted(unknown)} "
                         f"(known: {', '.join(CAPABILITIES)})")
    return caps


def capability_gap(needs: dict[str, list[str]], have, backend: str = "backend") -> str:
    """What of `needs` (capability -> components needing it) is not in `have`, as one phrase
    ("" when nothing is missing): the message both the Scheduler and the CLI give."""
    missing = {cap: who for cap, who in needs.items() if cap not in have}
    if not missing:
        return ""
    what = "; ".join(f"{cap} (needed by {', '.join(who)})" for cap, who in sorted(missing.items()))
    return f"{what}; the {backend} can: {', '.join(sorted(have)) or 'nothing declared'}"


@runtime_checkable
class Backend(Protocol):
    capabilities: frozenset

    def now(self) -> float: ...

    def poll(self) -> list | None: ...

    def snapshot(self) -> Snapshot: ...

    def apply(self, plan: Plan) -> None: ...

    def wake_at(self, time: float) -> None: ...

    def usage(self) -> tuple[float, float, float]: ...

    def job_stats(self, job_id: str) -> dict: ...
