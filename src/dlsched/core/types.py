"""Frozen value types: resources, nodes, tasks, jobs, Status and Plan decisions.

Resource vectors are numpy float64 arrays of length NRES in the order of RESOURCES:

    gpu   GPUs (count)           cpu   cores
    mem   host memory, GB        disk  disk bandwidth, MB/s
    net   NIC bandwidth, Gbps

Every node capacity, node free vector and task demand uses this order, so the hot paths
(filters, scorers, the transaction) are vector operations over an (nodes x NRES) array.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any
from functools import lru_cache

import numpy as np

RESOURCES: tuple[str, ...] = ("gpu", "cpu", "mem", "disk", "net")
NRES = len(RESOURCES)
GPU, CPU, MEM, DISK, NET = range(NRES)
_UNITS = (("GPU", "GPUs"), ("CPU", "CPUs"), ("GB of memory",) * 2, ("MB/s of disk",) * 2, ("Gbps of network",) * 2)


def amount(r: int, x: float, gpu_type: str | None = None) -> str:
    """An amount of resource r in the user's terms: "1 GPU", "8 V100 GPUs", "16 GB of memory"."""
    unit = _UNITS[r][0 if abs(x - 1) < 1e-9 else 1]
    return f"{x:g} {gpu_type + ' ' if gpu_type and r == GPU else ''}{unit}"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One server. Bandwidths in Gbps except disk (MB/s)."""
    node_id: int
    name: str
    rack: int
    domain: int
    gpus: int
    gpu_type: str
    gpu_mem_gb: float
    cpus: float
    mem_gb: float
    disk_mbps: float
    nic_gbps: float
    gpu_link_gbps: float
    # GPU affinity groups inside the server (PCIe switch / socket): number of GPUs per group.
    gpus_per_group: int = 0

    def capacity(self) -> np.ndarray:
        return np.array([self.gpus, self.cpus, self.mem_gb, self.disk_mbps, self.nic_gbps], dtype=np.float64)


@lru_cache(maxsize=65536)
def demand_vector(demand: tuple[float, ...]) -> np.ndarray:
    """The read-only numpy vector of a demand tuple (cached: tasks of a job share one)."""
    v = np.asarray(demand, dtype=np.float64)
    v.setflags(write=False)
    return v


@lru_cache(maxsize=65536)
def demand_dims(demand: tuple[float, ...]) -> tuple[int, ...]:
    """The resource indices a demand asks for (> 0): the only columns a fit check must read."""
    return tuple(i for i, x in enumerate(demand) if x > 0)


class Role(str, enum.Enum):
    WORKER = "worker"
    PS = "ps"
    TASK = "task"


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One schedulable unit of a job: a worker, a parameter server, or an independent task.

    `demand` is a length-NRES tuple (see RESOURCES). `duration_s` is set for independent tasks
    (bag-of-tasks jobs); DL workers progress together at the job's rate instead."""
    index: int
    role: Role
    demand: tuple[float, ...]
    duration_s: float | None = None

    @property
    def gpus(self) -> float:
        return self.demand[GPU]

    @property
    def vector(self) -> np.ndarray:
        return demand_vector(self.demand)

    @property
    def dims(self) -> tuple[int, ...]:
        return demand_dims(self.demand)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as submitted. `kind` is "dl" (a synchronous gang of workers and optional parameter
    servers that progress together) or "tasks" (independent tasks, each with its own duration).

    Work of a DL job: `iterations` when the model is known and the iteration count is given;
    otherwise `duration_s`, the run time at its ideal (packed) placement, taken from a trace."""
    job_id: str
    submit_time_s: float
    kind: str = "dl"
    tasks: tuple[TaskSpec, ...] = ()
    user: str = "default"
    priority: int = 0
    deadline_s: float | None = None
    model: str | None = None
    comm: str = "allreduce"           # allreduce | ps | none
    batch_size: int | None = None
    iterations: float | None = None
    duration_s: float | None = None
    gpu_type: str | None = None       # required GPU type, or None for any
    # the GPU types the job may run on at all, when not every type will do (a throughput table
    # with no entry for a type: dlsched.workload.throughputs); gpu_type, when set, wins
    gpu_types: tuple[str, ...] | None = None
    # Liquid's phases (T_e = T_l + N (T_t + T_sy) + T_sa; dlsched.sim.phases): the launch phase
    # is launch_s when given, else the transfer of data_gb and the model over the job's NICs
    # (none when neither is given); the saving phase lasts save_s. GPUs are held in all three.
    data_gb: float | None = None
    launch_s: float | None = None
    save_s: float = 0.0
    # the leaf of the queue tree the job runs in (dlsched.tenancy; None: its user's default
    # queue, else `default`); a trace's virtual cluster
    queue: str | None = None
    # what a trace recorded (dlsched.workload.formats), on the clock of submit_time_s: when the
    # job really started and ended (None where the trace does not say); never read by a policy or
    # the simulator, kept so that a replay can be set beside what happened
    recorded_start_s: float | None = None
    recorded_end_s: float | None = None
    # the trace's columns no JobSpec field holds, as a JSON object (string: the job stays hashable)
    extra: str | None = None
    # False: no policy may suspend, migrate or resize the job once it runs (a runtime job's
    # `preemptible: false`; Transaction.release/migrate/commit_resize refuse it)
    preemptible: bool = True

    def __repr__(self) -> str:
        # the fields a trace recorded show only when set: a job without them reads (and hashes,
        # benchmarks/eventlog_hash.py) as it did before they existed
        parts = [f"{f}={getattr(self, f)!r}" for f in _JOB_FIELDS
                 if (f not in _RECORDED or getattr(self, f) is not None)
                 and (f != "preemptible" or not self.preemptible)]
        return f"JobSpec({', '.join(parts)})"

    @property
    def is_gang(self) -> bool:
        """DL jobs are synchronous: no progress until every worker and PS is placed."""
        return self.kind == "dl"

    @property
    def num_workers(self) -> int:
        return sum(1 for t in self.tasks if t.role is Role.WORKER)

    @property
    def num_ps(self) -> int:
        return sum(1 for t in self.tasks if t.role is Role.PS)

    @property
    def gpus(self) -> float:
        return float(sum(t.demand[GPU] for t in self.tasks))


_JOB_FIELDS = tuple(f for f in JobSpec.__dataclass_fields__)
_RECORDED = ("recorded_start_s", "recorded_end_s", "extra")


class Code(enum.Enum):
    SUCCESS = "success"
    UNSCHEDULABLE = "unschedulable"          # does not fit now; may fit later
    UNSCHEDULABLE_FOREVER = "unschedulable_forever"  # can never fit (larger than any node / cluster)
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Status:
    """The outcome of a filter, a commit or a placement attempt, with human-readable reasons."""
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @classmethod
    def success(cls) -> "Status":
        return _SUCCESS

    @classmethod
    def unschedulable(cls, *reasons: str) -> "Status":
        return cls(Code.UNSCHEDULABLE, tuple(reasons))

    def __bool__(self) -> bool:  # pragma: no cover - guard against `if status:` misuse
        raise TypeError("use Status.ok, not bool(Status)")


_SUCCESS = Status()


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """Task `task` of a job on node `node`, using the GPU indices `gpu_ids` of that node."""
    task: int
    node: int
    gpu_ids: tuple[int, ...] = ()


# Decisions. Two fields are part of every backend's contract (see dlsched.scheduler.backend):
# - cost: what the switch costs, when the policy models it (a dlsched.workload.packing.SwitchCost,
#   Gandiva's suspend-to-host-memory); None = the backend's own cost (the simulator's
#   restart_delay_s, the runtime's real checkpoint and restart). A backend without the
#   "costed_switches" capability must refuse a profile that issues costed decisions.
# - packed: the job shares the GPUs of its placements with the job(s) already on them (GPU
#   sharing, Gandiva's packing and over-subscription). Needs the "gpu_sharing" capability.
@dataclass(frozen=True, slots=True)
class Launch:
    """Start these tasks (a whole job, or more tasks of a partly placed non-gang job)."""
    job_id: str
    placements: tuple[TaskPlacement, ...]
    cost: Any = None
    packed: bool = False


@dataclass(frozen=True, slots=True)
class Suspend:
    """Checkpoint the job at a mini-batch boundary and free everything it holds."""
    job_id: str
    cost: Any = None
    reason: str = ""          # why (a tenancy's preemption: "reclaim: for j7 (team-a)"); the log's detail


@dataclass(frozen=True, slots=True)
class Resume:
    """Restart a suspended job on these placements from its last checkpoint."""
    job_id: str
    placements: tuple[TaskPlacement, ...]
    cost: Any = None
    packed: bool = False


@dataclass(frozen=True, slots=True)
class Migrate:
    """Move a running job to new placements (checkpoint, stop, restart elsewhere)."""
    job_id: str
    placements: tuple[TaskPlacement, ...]
    cost: Any = None


@dataclass(frozen=True, slots=True)
class Resize:
    """Give a job a new set of tasks (another worker / PS count); costs a restart."""
    job_id: str
    tasks: tuple[TaskSpec, ...]
    placements: tuple[TaskPlacement, ...]
    cost: Any = None
    #: the job's batch size is its own from now on: an object the simulator asks for the job's
    #: profile (dlsched.sim.adaptive, Pollux); None: the job trains with its submitted batch.
    #: Not part of the decision's equality: it carries the job's model, one object per policy
    adapt: Any = field(default=None, compare=False)


Decision = Launch | Suspend | Resume | Migrate | Resize


@dataclass(slots=True)
class Plan:
    """What one scheduling round decided, in the order the backend must apply it
    (suspensions first so that the resources they free can be reused in the same round)."""
    decisions: list = field(default_factory=list)

    def add(self, decision) -> None:
        self.decisions.append(decision)

    def __len__(self) -> int:
        return len(self.decisions)

    def ordered(self) -> list:
        if len(self.decisions) < 2:
            return list(self.decisions)         # (most plans: one launch)
        first = [d for d in self.decisions if isinstance(d, Suspend)]
        rest = [d for d in self.decisions if not isinstance(d, Suspend)]
        return first + rest
