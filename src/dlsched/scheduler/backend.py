"""The Backend protocol: what the Scheduler needs from whatever runs the jobs.

The simulator (dlsched.sim.SimBackend) implements it now; the real runtime implements it later.
The Scheduler never asks which one it drives.

Calling contract (one thread; the Scheduler's run loop):
    poll()      -> the next batch of events (all at one clock value), or None when the run is
                   over (nothing running, nothing left to arrive, no wake-up pending). A real
                   runtime blocks here until something happens.
    now()       -> the clock after the last poll().
    snapshot()  -> a read-only Snapshot of the cluster for a round.
    apply(plan) -> carry out a round's decisions, in plan.ordered() order. Everything in the plan
                   fits the snapshot it was made from (the transaction checked it).
    wake_at(t)  -> ask for a RoundTick at time t (periodic rounds); idempotent per t.
    usage()     -> (allocated GPUs, effective GPUs: held by jobs that are making progress,
                    partial-hold GPUs: held by gang jobs still waiting for the rest of their tasks).
    job_stats(job_id) -> dict of per-job counters the backend measured (nic_bytes, cross_rack_bytes,
                    gpu_s, progress).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from dlsched.cluster.state import Snapshot
from dlsched.core.types import Plan


@runtime_checkable
class Backend(Protocol):
    def now(self) -> float: ...

    def poll(self) -> list | None: ...

    def snapshot(self) -> Snapshot: ...

    def apply(self, plan: Plan) -> None: ...

    def wake_at(self, time: float) -> None: ...

    def usage(self) -> tuple[float, float, float]: ...

    def job_stats(self, job_id: str) -> dict: ...
