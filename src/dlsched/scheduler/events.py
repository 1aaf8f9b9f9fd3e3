"""Typed events a Backend reports to the Scheduler (the simulator's engine and the real runtime
report the same records). `time` is the backend's clock, seconds from the start of the run."""
from __future__ import annotations

from dataclasses import dataclass

from dlsched.core.types import JobSpec


@dataclass(frozen=True, slots=True)
class JobArrival:
    time: float
    job: JobSpec


@dataclass(frozen=True, slots=True)
class JobFinish:
    time: float
    job_id: str


@dataclass(frozen=True, slots=True)
class TaskFinish:
    """One independent task of a `tasks` job ended; its resources are free again."""
    time: float
    job_id: str
    task: int


@dataclass(frozen=True, slots=True)
class JobStopped:
    """The backend stopped a job on its own (a rank or node died): everything it held is free,
    its progress is kept as of its last checkpoint, and it must be placed again."""
    time: float
    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class JobHeld:
    """An operator stopped the job (the real runtime's `dlsched job suspend`): the backend has
    checkpointed it and freed everything it held; it stays out of the queue until JobReleased.
    The simulator never reports it."""
    time: float
    job_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class JobReleased:
    """A held job may be placed again (it resumes from its checkpoint)."""
    time: float
    job_id: str


@dataclass(frozen=True, slots=True)
class NodeDown:
    time: float
    node: int


@dataclass(frozen=True, slots=True)
class NodeUp:
    time: float
    node: int


@dataclass(frozen=True, slots=True)
class RoundTick:
    """A periodic scheduling round asked for with Backend.wake_at."""
    time: float


Event = (JobArrival | JobFinish | TaskFinish | JobStopped | JobHeld | JobReleased | NodeDown | NodeUp
         | RoundTick)
