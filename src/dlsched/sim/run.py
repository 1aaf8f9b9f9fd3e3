"""A job as the simulator runs it: SimBackend's per-job state.

Progress is lazy (see backend.py): `remaining` is up to date at `last_t` only and advances at
`rate` until the next rate change; `version` grows at every rate change and stop, so heap
records pushed for an older version are stale. The switch-cost fields (restore_s, start_after,
packed, lost_s, ...) are what dlsched.sim.switch_cost's figures are charged to.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dlsched.core.types import JobSpec, TaskPlacement, TaskSpec
from dlsched.workload.speed import JobComm


@dataclass(eq=False, slots=True)
class JobRun:
    """What SimBackend alone knows of one job (the Scheduler keeps the job's own record)."""
    spec: JobSpec
    tasks: tuple[TaskSpec, ...]
    remaining: float
    placements: dict[int, TaskPlacement] = field(default_factory=dict)
    rate: float = 0.0
    last_t: float = 0.0
    version: int = 0
    prof: JobComm | None = None
    restoring: bool = False       # next full placement starts with a restart delay
    starting: bool = False        # next full placement is its first start (start_delay_s, launch)
    saving: bool = False          # in its saving phase (dlsched.sim.phases): no progress
    restart_until: float = -1.0
    hold_gpus: float = 0.0
    hold_since: float = 0.0
    gpu_s: float = 0.0
    nic_bytes: float = 0.0
    cross_rack_bytes: float = 0.0
    done_tasks: int = 0
    finished: bool = False
    first_progress_s: float | None = None
    # Switch costs (decisions that carry a `cost`) and their counters.
    restore_s: float | None = None   # next restart's delay, set by a costed decision
    start_after: float = 0.0         # next restart waits for this (checkpoints still running)
    packed: bool = False             # placed in packing mode (Gandiva)
    suspends: int = 0
    resumes: int = 0
    lost_s: float = 0.0              # held without progress while restarting
    lost_gpu_s: float = 0.0
    last_nodes: tuple[int, ...] = ()  # where it last ran (its checkpoint), set when stopped
    share: int = 1                   # jobs on its GPUs, itself included (effective GPUs / share)
    eff_gpus: float = 0.0            # its part of the effective GPUs now
    # its interference factor when its rate was last computed with link shares (None: it must be
    # computed again); SimBackend._refresh re-rates a job that only a re-share moved from it
    factor: float | None = None
    consts: tuple = ()               # with factor: the constants of its rate formula (_target_rate)
    # its row in the compiled re-rate's arrays (dlsched.sim.fastrate: the fields above are stale
    # while it is >= 0), and its place in the backend's list of jobs (-1: pushed from outside it)
    slot: int = -1
    k: int = -1
    # its live finish entry in the event heap and its time (None: none pushed since the last
    # one popped), and a later one waiting for it to pop: (time, seq, version) (_push_finish)
    fin_ev: object = None
    # its own batch size and goodput-charged progress (dlsched.sim.adaptive), set by a Resize
    # that carries one; None: the speed model's profile at its submitted batch
    adapt: object = None
    fin_at: float = 0.0
    deferred: tuple | None = None

    @property
    def whole(self) -> bool:
        return len(self.placements) + self.done_tasks == len(self.tasks)


_NO_PLACEMENTS: dict = {}


class _Finished:
    """What a finished job reads as, wherever an event or a loop still meets it: finished, no
    placements, no finish entry in the heap or waiting, not saving, not packed."""
    __slots__ = ()
    finished = True
    slot = -1
    prof = None
    fin_ev = None
    deferred = None
    saving = False
    packed = False
    placements = _NO_PLACEMENTS


class Waiting:
    """A job that has arrived and was never placed, as `runs` holds it: its spec, work and
    place in the backend's list, at about a seventh of a JobRun's size (a 1M-job run on an
    oversubscribed network has about half a million waiting at once: `python
    benchmarks/bench_scale.py --jobs "" --million --networks 8`). Every other field reads as a
    new JobRun's. Nothing writes one but `_advance` (`last_t`): SimBackend.apply swaps it for
    its JobRun (`started`) before it carries out a decision for it."""
    __slots__ = ("spec", "tasks", "remaining", "last_t", "k")
    placements = _NO_PLACEMENTS
    rate = 0.0
    version = 0
    prof = None
    finished = False
    restoring = starting = saving = packed = False
    restart_until = -1.0
    hold_gpus = hold_since = gpu_s = nic_bytes = cross_rack_bytes = 0.0
    done_tasks = suspends = resumes = 0
    first_progress_s = restore_s = None
    start_after = lost_s = lost_gpu_s = eff_gpus = 0.0
    last_nodes = ()
    share = 1
    factor = None
    consts = ()
    slot = -1
    fin_ev = adapt = deferred = None
    fin_at = 0.0

    def __init__(self, spec: JobSpec, tasks: tuple[TaskSpec, ...], remaining: float, last_t: float, k: int):
        self.spec, self.tasks, self.remaining, self.last_t, self.k = spec, tasks, remaining, last_t, k

    @property
    def whole(self) -> bool:
        return len(self.tasks) == 0

    def started(self) -> JobRun:
        """The JobRun it becomes at its first decision."""
        return JobRun(self.spec, self.tasks, self.remaining, last_t=self.last_t, k=self.k)


class DoneRun(_Finished):
    """A finished job's JobRun, cut down to what is still read: its counters (job_stats), and
    the fields that tell an event for it stale (finished, version, fin_ev). SimBackend swaps a
    finished job's JobRun for one (`_refresh`): a 1M-job run keeps 1M of them, at under half
    the size. Nothing changes a finished job's state, so nothing here is written but `last_t`."""
    __slots__ = ("spec", "tasks", "remaining", "rate", "last_t", "version", "gpu_s", "hold_gpus", "hold_since",
                 "first_progress_s", "suspends", "resumes", "lost_s", "lost_gpu_s", "nic_bytes",
                 "cross_rack_bytes", "done_tasks")

    def __init__(self, r: JobRun):
        for name in DoneRun.__slots__:
            setattr(self, name, getattr(r, name))

    @property
    def whole(self) -> bool:
        return self.done_tasks == len(self.tasks)


class DoneRow(_Finished):
    """A finished job cut down further (SimBackend._drop_done): its spec, and the number of the
    row of SimBackend._done_stats that holds its job_stats (they no longer change once it holds
    no GPU). About 80 bytes against a DoneRun's 360 (its counters are boxed floats). It reads
    as a finished run: no placements, no finish entry, and a version no event carries."""
    __slots__ = ("spec", "row")
    version = -1

    def __init__(self, spec, row: int):
        self.spec, self.row = spec, row

