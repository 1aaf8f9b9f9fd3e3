"""RayBackend: the real runtime behind the Backend protocol (the simulator's twin).

Threads. The Scheduler's run loop owns this object: `poll`, `apply`, `snapshot` and the operator
commands run on its thread only. Two helper threads feed one queue that `poll` blocks on, so any
event wakes a round at once: the *waiter* (`ray.wait` on the one `wait` call kept in flight per
rank: a rank that ends, fails or dies) and the *node monitor* (polls `ray.nodes()`; Ray has no
push API for membership). The REST API's threads only put commands on the queue and read SQLite.

Mapping of plan decisions to Ray
- Launch / Resume: a detached placement group named `dlsched-pg-<job>` with one bundle per rank,
  each pinned with a label selector to the node the policy chose (`ray.io/node-id`); it must be
  ready within `pg_timeout_s` or it is removed and the job requeued (Ray must never queue a
  group itself: its queue would compete with the policy). Each rank runs in a warm RankWorker on
  that node (one detached actor per rank, taken from the node's pool or started cold), rank 0
  gives the rendezvous address, and the program restores from the job's latest checkpoint.
- Suspend: every rank is asked to stop at the next mini-batch boundary; the gang agrees, rank 0
  checkpoints, the ranks return, workers go back to the pool, the group is removed.
- Migrate / Resize: Suspend, then Launch on the new placements (any world size).
The scheduler's ClusterState is the ledger; Ray's placement groups enforce it on the nodes.

Failures: an error on a rank's `wait` (ActorDiedError / ActorUnavailableError: a dead process or
node) or a program exception breaks the gang: the other ranks are killed (gloo peers would hang
in a collective), the group removed, and the job reported as JobStopped, so the policy places it
again and it restores from its last checkpoint. The node of a dead rank is kept out of rounds
for `suspect_s` (Ray notices a dead node only after its health checks fail). A program that fails
`max_failures` times is failed for good.

Restart: allocations (rank -> node, worker, run id) are in SQLite; `recover` re-attaches to the
workers of jobs that kept running (or finished) while no server was up, and requeues the rest.
"""
from __future__ import annotations

import heapq
import json
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dlsched.cluster.state import ClusterState, Snapshot
from dlsched.cluster.topology import Cluster
from dlsched.core.errors import DlschedError
from dlsched.core.types import (GPU, Launch, Migrate, NodeSpec, Plan, Resize, Resume, Role,
                                Suspend, TaskPlacement, TaskSpec)
from dlsched.runtime.joblogs import rank_log
from dlsched.runtime.sdk import STATS_LOG, clean_checkpoints
from dlsched.runtime.spec import RuntimeJobSpec
from dlsched.scheduler import events as ev

log = logging.getLogger("dlsched.runtime")

NAMESPACE = "dlsched"
NODE_ID_LABEL = "ray.io/node-id"
# Modules a new rank worker imports before its first job (torch always): the examples' needs.
WARM_IMPORTS = ("torch.nn.parallel", "torch.optim", "sklearn.datasets")
_EPS = 1e-9


@dataclass
class NodeInfo:
    name: str
    ray_id: str
    rack: str
    gpu_type: str
    gpus: int
    cpus: float
    mem_gb: float


def discover_nodes() -> list[NodeInfo]:
    """Alive Ray nodes that can run ranks (any CPU or GPU), by name. Names, racks and GPU types
    come from the node labels `node_name`, `rack`, `gpu_type` (set with `ray start --labels`)."""
    import ray
    out: dict[str, NodeInfo] = {}
    for n in ray.nodes():
        res, lab = n.get("Resources", {}), n.get("Labels", {}) or {}
        if not n.get("Alive") or (res.get("GPU", 0) <= 0 and res.get("CPU", 0) <= 0):
            continue
        name = lab.get("node_name") or f"{n.get('NodeManagerHostname', 'node')}-{n['NodeID'][:6]}"
        gpus = int(res.get("GPU", 0))
        out[name] = NodeInfo(name, n["NodeID"], lab.get("rack", "r0"),
                             lab.get("gpu_type", "gpu" if gpus else "none"), gpus,
                             float(res.get("CPU", 0)), float(res.get("memory", 0)) / 1e9)
    return [out[k] for k in sorted(out)]


def cluster_of(nodes: list[NodeInfo], name: str = "ray") -> Cluster:
    racks: dict[str, int] = {}
    specs = []
    for i, n in enumerate(nodes):
        rid = racks.setdefault(n.rack, len(racks))
        specs.append(NodeSpec(node_id=i, name=n.name, rack=rid, domain=0, gpus=n.gpus,
                              gpu_type=n.gpu_type, gpu_mem_gb=16.0 if n.gpus else 0.0, cpus=n.cpus,
                              mem_gb=n.mem_gb, disk_mbps=1000.0, nic_gbps=10.0, gpu_link_gbps=100.0))
    return Cluster(name=name, nodes=tuple(specs), rack_names=tuple(racks),
                   rack_domain=tuple(0 for _ in racks), rack_uplink_gbps=tuple(100.0 for _ in racks),
                   domain_names=("d0",))


@dataclass(eq=False)
class _Run:
    job_id: str
    run_id: str
    tasks: tuple[TaskSpec, ...]
    placements: tuple[TaskPlacement, ...]        # in rank (task index) order
    workers: list[str]                           # worker actor name per rank
    pg: object = None
    results: dict[int, dict] = field(default_factory=dict)
    started: float = 0.0


class RayBackend:
    # a policy's exception in a round holds the job it is about (or keeps the plan), see
    # Scheduler._contained_round: one bad job must not stop a shared cluster's scheduler
    contain_policy_errors = True

    def __init__(self, store, state_dir: str | Path, *, namespace: str = NAMESPACE,
                 warm_per_node: int | None = None,
                 pg_timeout_s: float = 10.0, stop_timeout_s: float = 30.0, node_poll_s: float = 0.5,
                 suspect_s: float = 20.0, max_failures: int = 3, stats_every_s: float = 0.5,
                 warm_imports: tuple[str, ...] = WARM_IMPORTS):
        import ray
        self.ray = ray
        self.namespace = namespace
        self.store = store
        self.state_dir = Path(state_dir)
        self.ckpt_root = self.state_dir / "checkpoints"
        self.ckpt_root.mkdir(parents=True, exist_ok=True)
        self.pg_timeout_s, self.stop_timeout_s = pg_timeout_s, stop_timeout_s
        self.node_poll_s, self.suspect_s, self.max_failures = node_poll_s, suspect_s, max_failures
        self.stats_every_s = stats_every_s
        self.warm_imports = tuple(warm_imports)
        ep = store.meta("epoch")
        if ep is None:
            ep = repr(time.time())
            store.set_meta("epoch", ep)
        self.epoch = float(ep)                  # the clock: seconds since the store was created
        self.nodes = discover_nodes()
        if not self.nodes:
            raise DlschedError("the Ray cluster has no node with CPUs or GPUs to run jobs on")
        self.node_idx = {n.name: i for i, n in enumerate(self.nodes)}
        self.cluster = cluster_of(self.nodes)
        self.state = ClusterState(self.cluster)
        self.suspect_until = np.zeros(len(self.nodes))
        self.q: queue.Queue = queue.Queue()
        self.runs: dict[str, _Run] = {}
        self.partial: dict[str, dict[int, TaskPlacement]] = {}   # placed part of jobs not yet whole
        self.specs: dict[str, RuntimeJobSpec] = {}
        self.failures: dict[str, int] = {}
        self.handles: dict[str, object] = {}
        self._ping: dict[str, object] = {}     # worker -> its first ping (ready when it is up)
        self.pool: dict[int, list[str]] = {i: [] for i in range(len(self.nodes))}
        self._worker_seq = 0
        self._waits: dict = {}                  # ObjectRef -> (job_id, run_id, rank)
        self._wlock = threading.Lock()
        self._ticks: list[float] = []
        self._tickset: set[float] = set()
        self._closing = threading.Event()
        self._now = self.now()
        self._batch_t0: float | None = None
        self._attaching = False
        self._last_stats = 0.0
        self._stat_refs: list = []              # (job id, run id, drain call in flight)
        self._acked: dict[str, int] = {}        # run id -> highest record seq stored
        self._arrived: list[str] = []           # arrivals handed out by the last poll
        self.latencies: list[float] = []        # event -> decision (s): plan ready, or round over
        self.scheduler = None
        self._kick = False                      # a round is due at the next poll (after recover)
        self._adopt_workers()
        self.warm_target = {i: (n.gpus if warm_per_node is None else warm_per_node)
                            for i, n in enumerate(self.nodes)}
        self._reported: dict[int, tuple] = {}   # node -> (up, ray id) the monitor last queued
        self._refill_pool()
        self._threads = [threading.Thread(target=self._waiter, daemon=True, name="dlsched-waiter"),
                         threading.Thread(target=self._monitor, daemon=True, name="dlsched-nodes")]
        for t in self._threads:
            t.start()

    # -- workers ---------------------------------------------------------------------------
    def _remote_cls(self):
        from dlsched.runtime.worker import RankWorker
        return self.ray.remote(RankWorker)

    def _new_worker(self, node: int) -> str:
        n = self.nodes[node]
        while True:
            self._worker_seq += 1
            name = f"w-{n.name}-{self._worker_seq}"
            if name not in self.handles:
                break
        h = self._remote_cls().options(
            name=name, namespace=self.namespace, lifetime="detached", num_cpus=0, max_concurrency=16,
            label_selector={NODE_ID_LABEL: n.ray_id}).remote(n.name, self.warm_imports)
        self.handles[name] = h
        self._ping[name] = h.ping.remote()
        return name

    def _refill_pool(self) -> None:
        """Keep `warm_target` idle workers per live node (a killed or retired worker is replaced
        in the background, so the next start does not wait for a new process)."""
        now = time.time()
        for i in range(len(self.nodes)):
            if self.state.up[i] and self.suspect_until[i] <= now:
                while len(self.pool[i]) < self.warm_target[i]:
                    self.pool[i].append(self._new_worker(i))

    def _take_worker(self, node: int) -> str:
        """An idle worker of `node`, one whose process is up first; a new one if none is idle."""
        lst = self.pool[node]
        if not lst:
            return self._new_worker(node)
        pings = {self._ping[w]: w for w in lst if w in self._ping}
        up = [w for w in lst if w not in self._ping]
        if not up and pings:
            ready, _ = self.ray.wait(list(pings), num_returns=1, timeout=0)
            up = [pings[r] for r in ready]
        w = up[0] if up else lst[0]
        lst.remove(w)
        return w

    def warm_ready(self, node: int) -> int:
        """Pool workers of `node` whose process is up (torch imported)."""
        refs = [self._ping[w] for w in self.pool[node] if w in self._ping]
        if not refs:
            return 0
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        return len(ready) + sum(1 for w in self.pool[node] if w not in self._ping)

    def _adopt_workers(self) -> None:
        """Find the workers a previous server left (by name); idle ones join the pool."""
        ray = self.ray
        names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if a.get("namespace") == self.namespace and a["name"].startswith("w-")]
        for name in names:
            try:
                h = ray.get_actor(name, namespace=self.namespace)
                info = ray.get(h.ping.remote(), timeout=5)
            except Exception:
                continue
            node = self.node_idx.get(info["node"])
            if node is None:
                continue
            self.handles[name] = h
            seq = name.rsplit("-", 1)[-1]
            if seq.isdigit():
                self._worker_seq = max(self._worker_seq, int(seq))
            st = ray.get(h.status.remote(), timeout=5)
            if st["state"] == "idle":
                self.pool[node].append(name)

    def _release_worker(self, name: str, node: int, reusable: bool) -> None:
        h = self.handles.get(name)
        if h is None:
            return
        if reusable and self.state.up[node]:
            h.release.remote()
            self.pool[node].append(name)
        else:
            self._kill_worker(name)

    def _kill_worker(self, name: str) -> None:
        h = self.handles.pop(name, None)
        self._ping.pop(name, None)
        if h is not None:
            try:
                self.ray.kill(h, no_restart=True)
            except Exception:
                pass
        for lst in self.pool.values():
            if name in lst:
                lst.remove(name)

    # -- Backend protocol ------------------------------------------------------------------
    def now(self) -> float:
        return time.time() - self.epoch

    def snapshot(self) -> Snapshot:
        up = self.state.up & (self.suspect_until <= time.time())
        free, load = self.state.free.copy(), self.state.gpu_load.copy()
        for a in (free, up, load):
            a.setflags(write=False)
        return Snapshot(self.cluster, free, up, load, self._now)

    def wake_at(self, t: float) -> None:
        if t not in self._tickset:
            self._tickset.add(t)
            heapq.heappush(self._ticks, t)
            self.q.put(("wake", None, None, time.perf_counter()))

    def usage(self) -> tuple[float, float, float]:
        eff = sum(sum(t.demand[GPU] for t in r.tasks) for r in self.runs.values())
        part = sum(self._tasks_of(j)[i].demand[GPU] for j, h in self.partial.items() for i in h)
        return self.state.allocated_gpus(), float(eff), float(part)

    def job_stats(self, job_id: str) -> dict:
        j = self.store.job(job_id)
        return {"gpu_s": 0.0, "nic_bytes": 0.0, "cross_rack_bytes": 0.0,
                "first_progress_s": j["start_time"] if j else None}

    def close(self) -> None:
        self._closing.set()
        self.q.put(("wake", None, None, time.perf_counter()))

    def kill_all(self) -> None:
        """Stop every job's ranks and every worker this backend knows (a server told to clean
        up on exit; by default a stopped server leaves jobs running for the next one)."""
        for run in list(self.runs.values()):
            self._teardown(run, kill=True)
        for name in list(self.handles):
            self._kill_worker(name)

    def poll(self) -> list | None:
        if self._batch_t0 is not None:              # the last batch's round decided nothing
            self.latencies.append(time.perf_counter() - self._batch_t0)
            self._batch_t0 = None
        if self._arrived and self.scheduler is not None:
            from dlsched.scheduler.core import JobState
            for job_id in self._arrived:            # jobs the scheduler found can never fit
                rec = self.scheduler.jobs.get(job_id)
                if rec is not None and rec.state is JobState.REJECTED:
                    self.store.update_job(job_id, state="rejected", finish_time=time.time(),
                                          error=rec.reject_reason)
                    self.store.event(job_id, "rejected", rec.reject_reason)
            self._arrived = []
        while not self._closing.is_set():
            timeout = 0.25
            if self._ticks:
                timeout = max(0.0, min(timeout, self._ticks[0] - self.now()))
            items = []
            try:
                items.append(self.q.get(timeout=timeout))
                while True:
                    items.append(self.q.get_nowait())
            except queue.Empty:
                pass
            if self._closing.is_set():
                break
            out: list = []
            self._now = self.now()
            t0s = [it[3] for it in items if it[0] != "wake"]
            for it in items:
                try:
                    self._handle(it, out)
                except Exception as e:  # one bad command must not stop the scheduler
                    log.exception("runtime: %s failed", it[0])
                    fut = it[2]
                    if isinstance(fut, Future) and not fut.done():
                        fut.set_exception(e)
            while self._ticks and self._ticks[0] <= self.now() + 1e-3:
                t = heapq.heappop(self._ticks)
                self._tickset.discard(t)
                out.append(ev.RoundTick(self._now))
            if self._kick:            # a (re)started server decides at once, events or not
                self._kick = False
                out.append(ev.RoundTick(self._now))
            if time.monotonic() - self._last_stats >= self.stats_every_s:
                self._collect_stats()
                self._refill_pool()
            if out:
                self._batch_t0 = min(t0s) if t0s else time.perf_counter()
                return out
        return None

    def apply(self, plan: Plan) -> None:
        if self._batch_t0 is not None:
            self.latencies.append(time.perf_counter() - self._batch_t0)
            self._batch_t0 = None
        for d in plan.ordered():
            if isinstance(d, Suspend):
                self._give_partial(d.job_id)
                self._stop_run(d.job_id, "suspended")
                self.store.update_job(d.job_id, state="suspended")
            elif isinstance(d, (Launch, Resume)):
                if self._attaching:
                    continue
                tasks = self._tasks_of(d.job_id)
                held = self.partial.setdefault(d.job_id, {})
                for tp in d.placements:             # a non-gang policy may place a job in parts:
                    self.state.take(tp.node, tasks[tp.task].vector, tp.gpu_ids)   # hold them,
                    held[tp.task] = tp
                if len(held) == len(tasks):          # and start the gang once it is whole
                    del self.partial[d.job_id]
                    self._start_run(d.job_id, tuple(held.values()), tasks, taken=True)
            elif isinstance(d, Migrate):
                self._stop_run(d.job_id, "migrating")
                self._start_run(d.job_id, d.placements, self._tasks_of(d.job_id))
            elif isinstance(d, Resize):
                self._stop_run(d.job_id, "resizing")
                self._start_run(d.job_id, d.placements, d.tasks)
            else:  # pragma: no cover
                raise TypeError(f"unknown decision {d!r}")

    def _give_partial(self, job_id: str) -> None:
        held = self.partial.pop(job_id, None)
        if held:
            tasks = self._tasks_of(job_id)
            for tp in held.values():
                self.state.give(tp.node, tasks[tp.task].vector, tp.gpu_ids)

    def _tasks_of(self, job_id: str) -> tuple[TaskSpec, ...]:
        rec = self.scheduler.jobs.get(job_id) if self.scheduler is not None else None
        return rec.tasks if rec is not None else self.specs[job_id].tasks()

    def policy_error(self, job_id: str | None, reason: str) -> None:
        """The policy raised in a round (scheduler thread). The job it is about is stopped if
        it runs, and held with the reason (an operator's `resume` lets it be placed again)."""
        if job_id is None:
            self.store.event("", "policy_error", reason[:2000])
            return
        self._give_partial(job_id)
        if job_id in self.runs:
            self._stop_run(job_id, "held: policy error")
        self.store.update_job(job_id, state="held", held=1, error=reason[:4000])
        self.store.event(job_id, "policy_error", reason[:2000])

    # -- commands from the API (any thread) -------------------------------------------------
    def submit(self, job_id: str) -> None:
        self.q.put(("submit", job_id, None, time.perf_counter()))

    def command(self, kind: str, job_id: str, timeout: float = 120.0, **kw) -> dict:
        fut: Future = Future()
        self.q.put((kind, (job_id, kw), fut, time.perf_counter()))
        return fut.result(timeout=timeout)

    # -- event handling (scheduler thread) ---------------------------------------------------
    def _handle(self, it, out: list) -> None:
        kind, arg, fut, _ = it
        if kind == "wake":
            return
        if kind == "submit":
            out.append(self._arrival(arg))
            return
        if kind == "rank_done":
            self._on_rank_done(*arg, out=out)
            return
        if kind == "node":
            self._on_node(*arg, out=out)
            return
        if kind == "stopped":                         # a launch that failed (see _fail_start)
            out.append(ev.JobStopped(self._now, *arg))
            return
        job_id, kw = arg
        res = getattr(self, f"_op_{kind}")(job_id, out, **kw)
        if fut is not None and not fut.done():
            fut.set_result(res)

    def _arrival(self, job_id: str) -> ev.JobArrival:
        j = self.store.job(job_id)
        spec = RuntimeJobSpec(**j["spec"])
        self.specs[job_id] = spec
        self._arrived.append(job_id)
        return ev.JobArrival(self._now, spec.to_jobspec(job_id, j["submit_time"] - self.epoch))

    def _rec(self, job_id: str):
        rec = self.scheduler.jobs.get(job_id) if self.scheduler else None
        if rec is None:
            raise DlschedError(f"unknown job {job_id}")
        return rec

    def _op_cancel(self, job_id: str, out: list) -> dict:
        j = self.store.job(job_id)
        if j is None:
            raise DlschedError(f"unknown job {job_id}")
        if j["state"] not in ("queued", "running", "suspended", "held"):
            return {"job_id": job_id, "state": j["state"], "changed": False}
        self._give_partial(job_id)
        if job_id in self.runs:
            self._stop_run(job_id, "cancelled")     # at a mini-batch boundary: workers stay warm
        self.store.update_job(job_id, state="cancelled", finish_time=time.time(), held=0)
        self.store.event(job_id, "cancelled")
        pending = [e for e in out if isinstance(e, ev.JobArrival) and e.job.job_id == job_id]
        if pending:                                  # submitted in this very batch: never arrives
            out.remove(pending[0])
        elif job_id in (self.scheduler.jobs if self.scheduler else {}):
            out.append(ev.JobFinish(self._now, job_id))
        return {"job_id": job_id, "state": "cancelled", "changed": True}

    def _op_suspend(self, job_id: str, out: list) -> dict:
        rec = self._rec(job_id)
        from dlsched.scheduler.core import JobState
        if rec.state in (JobState.DONE, JobState.REJECTED, JobState.HELD):
            return {"job_id": job_id, "state": self.store.job(job_id)["state"], "changed": False}
        t0 = time.perf_counter()
        self._give_partial(job_id)
        if job_id in self.runs:
            self._stop_run(job_id, "suspended by operator")
        self.store.update_job(job_id, state="held", held=1)
        out.append(ev.JobHeld(self._now, job_id, "operator"))
        return {"job_id": job_id, "state": "held", "changed": True, "stop_s": time.perf_counter() - t0}

    def _op_resume(self, job_id: str, out: list) -> dict:
        rec = self._rec(job_id)
        from dlsched.scheduler.core import JobState
        if rec.state is not JobState.HELD:
            return {"job_id": job_id, "state": self.store.job(job_id)["state"], "changed": False}
        self.store.update_job(job_id, state="suspended" if rec.first_start_s is not None else "queued", held=0,
                              error="")
        self.store.event(job_id, "released")
        out.append(ev.JobReleased(self._now, job_id))
        return {"job_id": job_id, "state": "queued", "changed": True}

    def _op_migrate(self, job_id: str, out: list, nodes: list[str] | None = None,
                    workers: int | None = None) -> dict:
        """Move a running job to `nodes` (names; default: any other nodes that fit, preferring
        nodes it does not use now), optionally with another number of workers (resize)."""
        rec = self._rec(job_id)
        run = self.runs.get(job_id)
        if run is None:
            raise DlschedError(f"job {job_id} is not running (state {self.store.job(job_id)['state']})")
        spec = self.specs[job_id]
        tasks = rec.tasks
        if workers is not None and workers != spec.workers:
            if workers < 1 or spec.batch_size % workers:
                raise DlschedError(f"workers: must be >= 1 and divide batch_size {spec.batch_size}, got {workers}")
            tasks = spec.tasks(workers)
        free = self.state.free.copy()
        load = self.state.gpu_load.copy()
        for tp in run.placements:
            free[tp.node] += run.tasks[tp.task].vector
            for g in tp.gpu_ids:
                load[tp.node, g] -= 1
        up = self.snapshot().up
        if nodes:
            unknown = [n for n in nodes if n not in self.node_idx]
            if unknown:
                raise DlschedError(f"unknown node {unknown[0]} (nodes: {', '.join(self.node_idx)})")
            order = [self.node_idx[n] for n in nodes]
        else:
            old = {tp.node for tp in run.placements}
            order = [i for i in range(len(self.nodes)) if i not in old] + sorted(old)
        order = [i for i in order if up[i]]
        placements = []
        for k, t in enumerate(tasks):
            # named nodes: ranks spread over them in turn (each the first that fits from its turn)
            turn = order[k % len(order):] + order[:k % len(order)] if nodes and order else order
            for i in turn:
                if (free[i] + _EPS >= t.vector).all():
                    free[i] -= t.vector
                    k = int(np.ceil(t.demand[GPU] - _EPS))
                    n = self.nodes[i].gpus
                    gids = tuple(int(g) for g in np.argsort(load[i, :n], kind="stable")[:k]) if k else ()
                    for g in gids:
                        load[i, g] += 1
                    placements.append(TaskPlacement(t.index, i, gids))
                    break
            else:
                raise DlschedError(f"job {job_id} does not fit on {', '.join(self.nodes[i].name for i in order) or 'any node'}")
        d = (Resize(job_id, tasks, tuple(placements)) if tasks is not rec.tasks
             else Migrate(job_id, tuple(placements)))
        t0 = time.perf_counter()
        self.scheduler.execute(Plan([d]), self)
        return {"job_id": job_id, "state": "running", "changed": True, "move_s": time.perf_counter() - t0,
                "nodes": [self.nodes[tp.node].name for tp in placements]}

    # -- runs --------------------------------------------------------------------------------
    def _start_run(self, job_id: str, placements, tasks: tuple[TaskSpec, ...], *, taken: bool = False) -> None:
        ray = self.ray
        from ray.util.placement_group import placement_group, remove_placement_group
        spec = self.specs[job_id]
        pls = sorted(placements, key=lambda tp: tp.task)
        bundles, selectors = [], []
        for tp in pls:
            t = tasks[tp.task]
            b = {}
            if t.demand[GPU] > 0:
                b["GPU"] = float(t.demand[GPU])
            b["CPU"] = max(float(t.demand[1]), 0.01)
            bundles.append(b)
            selectors.append({NODE_ID_LABEL: self.nodes[tp.node].ray_id})
        if not taken:
            for tp in pls:
                self.state.take(tp.node, tasks[tp.task].vector, tp.gpu_ids)
        attempt = self.store.job(job_id)["attempts"] + 1
        run_id = f"{job_id}.{attempt}"
        run = _Run(job_id, run_id, tasks, tuple(pls), [], started=time.time())
        self.runs[job_id] = run
        self.store.update_job(job_id, attempts=attempt)
        pg_name = f"dlsched-pg-{job_id}"
        self._remove_pg_named(pg_name)
        pg = placement_group(bundles, strategy="PACK", name=pg_name,
                             lifetime="detached", bundle_label_selector=selectors)
        run.pg = pg
        t_pg = time.perf_counter()
        if not pg.wait(self.pg_timeout_s):
            remove_placement_group(pg)
            run.pg = None
            self._fail_start(run, f"placement group not ready in {self.pg_timeout_s:g} s")
            return
        t_ready = time.perf_counter()
        for tp in pls:
            run.workers.append(self._take_worker(tp.node))
        hs = [self.handles[w] for w in run.workers]
        try:
            addr, port = ray.get(hs[0].address.remote(), timeout=60)
            worker_ranks = [tp.task for tp in pls if tasks[tp.task].role is Role.WORKER]
            ps_ranks = [tp.task for tp in pls if tasks[tp.task].role is Role.PS]
            ckpt = str(self.ckpt_root / job_id)
            starts = []
            for tp, h in zip(pls, hs):
                starts.append(h.start.remote({
                    "job_id": job_id, "run_id": run_id, "rank": tp.task, "world_size": len(pls),
                    "worker_ranks": worker_ranks, "ps_ranks": ps_ranks, "master_addr": addr,
                    "master_port": port, "ckpt_dir": ckpt, "args": spec.args, "batch_size": spec.batch_size,
                    "iterations": spec.iterations, "epochs": spec.epochs,
                    "checkpoint_every": spec.checkpoint_every, "gpus": float(tasks[tp.task].demand[GPU]),
                    "entry": spec.entry, "log_path": str(rank_log(self.state_dir, job_id, tp.task)),
                    "env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, tp.gpu_ids))} if tp.gpu_ids else {}}))
            t_addr = time.perf_counter()
            ray.get(starts, timeout=60)
            log.info("job %s: %s: placement group %.3f s, rank 0 address %.3f s, ranks started %.3f s",
                     job_id, run_id, t_ready - t_pg, t_addr - t_ready, time.perf_counter() - t_addr)
        except Exception as e:
            self._fail_start(run, f"ranks did not start: {type(e).__name__}: {e}")
            return
        with self._wlock:
            for tp, h in zip(pls, hs):
                self._waits[h.wait.remote(run_id)] = (job_id, run_id, tp.task)
        self.store.set_allocation(job_id, [
            {"rank": tp.task, "node": self.nodes[tp.node].name, "gpu_ids": tp.gpu_ids, "worker": w,
             "run_id": run_id} for tp, w in zip(pls, run.workers)])
        j = self.store.job(job_id)
        self.store.update_job(job_id, state="running", start_time=j["start_time"] or time.time(),
                              workers=sum(1 for t in tasks if t.role is Role.WORKER))
        self.store.event(job_id, "started", f"{run_id} on " + ", ".join(
            f"{tp.task}@{self.nodes[tp.node].name}" for tp in pls))

    def _fail_start(self, run: _Run, reason: str) -> None:
        """A launch that could not happen: give everything back and requeue (reported as JobStopped
        at the next poll, so the policy places it again)."""
        log.warning("job %s: %s", run.job_id, reason)
        self._teardown(run, kill=True)
        self.store.update_job(run.job_id, state="suspended")
        self.store.event(run.job_id, "start_failed", reason)
        self.q.put(("stopped", (run.job_id, reason), None, time.perf_counter()))

    def _teardown(self, run: _Run, *, kill: bool, reusable: dict | None = None) -> None:
        from ray.util.placement_group import remove_placement_group
        with self._wlock:
            for ref in [r for r, v in self._waits.items() if v[1] == run.run_id]:
                del self._waits[ref]
        self._stat_refs = [x for x in self._stat_refs if x[1] != run.run_id]
        self._acked.pop(run.run_id, None)
        for tp, w in zip(run.placements, run.workers):
            if kill:
                self._kill_worker(w)
            else:
                self._release_worker(w, tp.node, (reusable or {}).get(w, True))
        if run.pg is not None:
            try:
                remove_placement_group(run.pg)
            except Exception:
                pass
        for tp in run.placements:
            self.state.give(tp.node, run.tasks[tp.task].vector, tp.gpu_ids)
        self.runs.pop(run.job_id, None)
        self.store.clear_allocation(run.job_id)

    def _remove_pg_named(self, name: str) -> None:
        from ray.util.placement_group import get_placement_group, remove_placement_group
        try:
            remove_placement_group(get_placement_group(name))
        except Exception:
            pass

    def _stop_run(self, job_id: str, why: str, *, kill: bool = False) -> None:
        """Checkpoint at the next mini-batch boundary, stop the ranks, free the GPUs."""
        run = self.runs.get(job_id)
        if run is None:
            return
        ray = self.ray
        hs = [self.handles.get(w) for w in run.workers]
        reusable = {}
        if not kill and all(h is not None for h in hs):
            try:
                ray.get([h.stop.remote(run.run_id) for h in hs], timeout=10)
                res = ray.get([h.wait.remote(run.run_id, self.stop_timeout_s) for h in hs],
                              timeout=self.stop_timeout_s + 10)
                if any(r is None for r in res):
                    kill = True
                else:
                    reusable = {w: r.get("reusable", True) for w, r in zip(run.workers, res)}
            except Exception:
                kill = True
        if not kill:
            self._drain(run)
        self._teardown(run, kill=kill, reusable=reusable)
        self.store.event(job_id, "stopped", why)

    def _drain(self, run: _Run) -> bool:
        """Store every step record and checkpoint rank 0 of `run` holds. False when rank 0 could
        not be asked (its worker died): the records it had are then read from its stats log."""
        mine = [ref for j, r, ref in self._stat_refs if r == run.run_id]
        if mine:                                     # drains in flight hold records too
            self._stat_refs = [x for x in self._stat_refs if x[1] != run.run_id]
            for ref in mine:
                try:
                    self._save_stats(run.job_id, run.run_id, *self.ray.get(ref, timeout=10))
                except Exception:
                    pass
        h = self.handles.get(run.workers[0]) if run.workers else None
        try:
            if h is None:
                raise DlschedError("rank 0 has no worker")
            stats, ckpts = self.ray.get(h.drain.remote(self._acked.get(run.run_id, 0)), timeout=10)
        except Exception as e:
            log.warning("job %s: %s: step records not drained (%s); reading the stats log", run.job_id,
                        run.run_id, type(e).__name__)
            self._stats_from_log(run.job_id)
            return False
        self._save_stats(run.job_id, run.run_id, stats, ckpts)
        return True

    def _save_stats(self, job_id: str, run_id: str, stats: list, ckpts: list) -> None:
        # records are acknowledged to the run that produced them: a drain answered after its
        # run ended must not move the next run's acknowledgement (its seq restarts at 1)
        if stats or ckpts:
            seq = max(r["seq"] for r in stats + ckpts)
            self._acked[run_id] = max(self._acked.get(run_id, 0), seq)
        self.store.add_stats(job_id, stats)
        for c in ckpts:
            self.store.add_checkpoint(job_id, c["step"], c["path"], c["time"])
        if ckpts:
            self._prune_checkpoints(job_id)

    def _prune_checkpoints(self, job_id: str) -> None:
        gone = [c["path"] for c in self.store.checkpoints(job_id) if not Path(c["path"]).exists()]
        self.store.drop_checkpoints(job_id, gone)

    def _collect_stats(self) -> None:
        """Drain rank 0's step records without blocking the scheduler thread: the calls issued
        last time are read if they are done, and new ones issued."""
        self._last_stats = time.monotonic()
        if self._stat_refs:
            refs = [ref for _, _, ref in self._stat_refs]
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
            ready = set(ready)
            keep = []
            for job_id, run_id, ref in self._stat_refs:
                if ref in ready:
                    try:
                        stats, ckpts = self.ray.get(ref)
                    except Exception:
                        continue
                    self._save_stats(job_id, run_id, stats, ckpts)
                else:
                    keep.append((job_id, run_id, ref))
            self._stat_refs = keep
        busy = {r for _, r, _ in self._stat_refs}
        for r in self.runs.values():
            if r.run_id not in busy and r.workers and r.workers[0] in self.handles:
                ref = self.handles[r.workers[0]].drain.remote(self._acked.get(r.run_id, 0))
                self._stat_refs.append((r.job_id, r.run_id, ref))

    def _on_rank_done(self, job_id: str, run_id: str, rank: int, ref, *, out: list) -> None:
        run = self.runs.get(job_id)
        if run is None or run.run_id != run_id:
            return                                   # a run already stopped on purpose
        try:
            res = self.ray.get(ref)
        except Exception as e:                       # the rank's process or node died
            res = {"state": "died", "error": f"{type(e).__name__}: {str(e)[:300]}"}
            node = next(tp.node for tp in run.placements if tp.task == rank)
            self.suspect_until[node] = time.time() + self.suspect_s
        if res is None:
            return
        run.results[rank] = res
        if res.get("state") in ("died", "failed", "unknown"):
            self._break_gang(run, rank, res, out)
        elif len(run.results) == len(run.placements):
            states = {r.get("state") for r in run.results.values()}
            if states == {"done"}:
                self._drain(run)
                self._teardown(run, kill=False, reusable={w: run.results[tp.task].get("reusable", True)
                                                          for tp, w in zip(run.placements, run.workers)})
                self.store.update_job(job_id, state="done", finish_time=time.time())
                self.store.event(job_id, "finished", run_id)
                clean_checkpoints(self.ckpt_root / job_id, keep=1)     # the final one stays
                self._prune_checkpoints(job_id)
                out.append(ev.JobFinish(self._now, job_id))
            else:                                    # stopped without being asked: requeue
                self._drain(run)
                self._teardown(run, kill=False)
                self.store.update_job(job_id, state="suspended")
                out.append(ev.JobStopped(self._now, job_id, "ranks stopped"))

    def _stats_from_log(self, job_id: str) -> None:
        """Step records rank 0 also logged beside the checkpoints (read after a rank or the
        server died: records it had not handed over yet)."""
        p = self.ckpt_root / job_id / STATS_LOG
        if not p.exists():
            return
        recs = []
        for line in p.read_text().splitlines():
            try:
                recs.append(json.loads(line))
            except ValueError:
                pass                                   # a line cut by the crash
        self.store.add_stats(job_id, recs)

    def _first_failure(self, run: _Run, rank: int, res: dict) -> tuple[int, dict]:
        """The rank whose program failed first. A program's exception makes its peers fail too
        (their collective loses a member), and their results may come in first: ask the other
        ranks' workers for theirs and take the earliest failure. A peer whose worker died (its
        process was killed, its node lost) is the cause instead: the program did not fail, and
        the result says `died` (not counted against the job's max_failures)."""
        best = (res.get("failed_at", float("inf")), rank, res)
        others = [(tp.task, self.handles.get(w)) for tp, w in zip(run.placements, run.workers) if tp.task != rank]
        refs = {h.status.remote(): rk for rk, h in others if h is not None}
        if not refs:
            return rank, res
        ready, late = self.ray.wait(list(refs), num_returns=len(refs), timeout=5.0)
        if late:             # a live worker answers status at once (threaded actor): presumed lost
            return refs[late[0]], {"state": "died", "error": "worker does not answer (lost)"}
        for ref in ready:
            try:
                r = (self.ray.get(ref) or {}).get("result") or {}
            except Exception as e:                   # the peer's worker is gone
                return refs[ref], {"state": "died", "error": f"worker died ({type(e).__name__})"}
            if r.get("state") == "failed" and r.get("failed_at", float("inf")) < best[0]:
                best = (r["failed_at"], refs[ref], r)
        return best[1], best[2]

    def _break_gang(self, run: _Run, rank: int, res: dict, out: list) -> None:
        job_id = run.job_id
        if res.get("state") == "failed":
            rank, res = self._first_failure(run, rank, res)
        node = next(tp.node for tp in run.placements if tp.task == rank)
        reason = f"rank {rank} on {self.nodes[node].name} {res['state']}: {res.get('error', '')}"
        log.warning("job %s: gang broken: %s", job_id, reason)
        if res["state"] == "failed":
            self._drain(run)                         # rank 0's worker lives: ask it
        else:
            self._stats_from_log(job_id)
        self._teardown(run, kill=True)
        self.store.event(job_id, "gang_broken", reason[:2000])
        if res["state"] == "failed":
            self.failures[job_id] = self.failures.get(job_id, 0) + 1
            if self.failures[job_id] >= self.max_failures:
                tb = res.get("traceback") or ""
                head = f"rank {rank} on {self.nodes[node].name} failed first: {res.get('error', '')}"
                self.store.update_job(job_id, state="failed", finish_time=time.time(), failed_rank=rank,
                                      error=(head + "\n" + tb[-(3900 - len(head)):]) if tb else head)
                out.append(ev.JobFinish(self._now, job_id))
                return
        self.store.update_job(job_id, state="suspended")
        out.append(ev.JobStopped(self._now, job_id, reason[:200]))

    def _on_node(self, node: int, up, ray_id, *, out: list) -> None:
        if bool(self.state.up[node]) == up:
            return
        n = self.nodes[node]
        self.state.up[node] = up
        self.store.event("", "node_up" if up else "node_down", n.name)
        if not up:
            for run in [r for r in self.runs.values() if any(tp.node == node for tp in r.placements)]:
                rank = next(tp.task for tp in run.placements if tp.node == node)
                self._break_gang(run, rank, {"state": "died", "error": "node down"}, out)
            for job_id in [j for j, h in self.partial.items() if any(tp.node == node for tp in h.values())]:
                self._give_partial(job_id)
                out.append(ev.JobStopped(self._now, job_id, f"node {n.name} down"))
            for w in list(self.pool[node]):
                self._kill_worker(w)
            out.append(ev.NodeDown(self._now, node))
        else:
            n.ray_id = ray_id
            self.suspect_until[node] = 0
            out.append(ev.NodeUp(self._now, node))

    # -- helper threads ----------------------------------------------------------------------
    def _waiter(self) -> None:
        ray = self.ray
        while not self._closing.is_set():
            with self._wlock:
                refs = list(self._waits)
            if not refs:
                time.sleep(0.05)
                continue
            try:
                ready, _ = ray.wait(refs, num_returns=1, timeout=0.2)
            except Exception:
                time.sleep(0.1)
                continue
            for ref in ready:
                with self._wlock:
                    info = self._waits.pop(ref, None)
                if info is not None:
                    self.q.put(("rank_done", (*info, ref), None, time.perf_counter()))

    def _monitor(self) -> None:
        while not self._closing.wait(self.node_poll_s):
            try:
                alive = {}
                for n in self.ray.nodes():
                    lab = n.get("Labels") or {}
                    name = lab.get("node_name") or f"{n.get('NodeManagerHostname', 'node')}-{n['NodeID'][:6]}"
                    if n.get("Alive"):
                        alive[name] = n["NodeID"]
            except Exception:
                continue
            for i, info in enumerate(self.nodes):
                up = info.name in alive
                now = (up, alive.get(info.name))
                # compared with what was last queued, not with the scheduler thread's view: a
                # thread busy for a while (a start waiting on a new worker) must not get the same
                # change queued at every poll
                last = self._reported.get(i, (True, info.ray_id))
                if now == last:
                    continue
                self._reported[i] = now
                if up and last[0]:
                    # the node came back under a new Ray id before we saw it go
                    self.q.put(("node", (i, False, None), None, time.perf_counter()))
                self.q.put(("node", (i, up, now[1]), None, time.perf_counter()))

    # -- restart -------------------------------------------------------------------------------
    def recover(self, scheduler) -> dict:
        """Attach a scheduler. Jobs the store has as active are handed to it again; jobs whose
        ranks are still up (running or finished while no server was there) are re-attached, the
        others requeued from their last checkpoint. Returns counts for the log."""
        ray = self.ray
        self.scheduler = scheduler
        counts = {"reattached": 0, "requeued": 0, "held": 0}
        attached_pgs = set()
        for j in self.store.jobs(("queued", "running", "suspended", "held")):
            job_id = j["job_id"]
            scheduler.handle(self._arrival(job_id), self)
            alloc = self.store.allocation(job_id)
            ok = False
            if j["state"] == "running" and alloc:
                ok = self._reattach(job_id, alloc)
            if ok:
                run = self.runs[job_id]
                self._attaching = True
                try:
                    scheduler.execute(Plan([Launch(job_id, run.placements)]), self)
                finally:
                    self._attaching = False
                attached_pgs.add(f"dlsched-pg-{job_id}")
                counts["reattached"] += 1
                self.store.event(job_id, "reattached", run.run_id)
                continue
            if alloc:
                for a in alloc:
                    self._kill_worker(a["worker"])
                self.store.clear_allocation(job_id)
                self._remove_pg_named(f"dlsched-pg-{job_id}")
            if j["held"]:
                scheduler.handle(ev.JobHeld(self._now, job_id, "operator"), self)
                counts["held"] += 1
            elif j["state"] == "running":
                self._stats_from_log(job_id)
                self.store.update_job(job_id, state="suspended")
                self.store.event(job_id, "requeued", "server restart: ranks gone")
                counts["requeued"] += 1
        for d in self.ckpt_root.glob("*"):
            # half-written files of jobs that do not run; never of a re-attached job, whose rank
            # 0 may be writing its next checkpoint right now
            if d.name not in self.runs:
                clean_checkpoints(d, keep=2)
        for name in [n for n, h in self.handles.items() if not any(n in r.workers for r in self.runs.values())]:
            if not any(name in lst for lst in self.pool.values()):
                self._kill_worker(name)               # a worker of a job that is not active any more
        try:
            from ray.util import placement_group_table
            for pg in placement_group_table().values():
                nm = pg.get("name", "")
                if nm.startswith("dlsched-pg-") and nm not in attached_pgs and pg.get("state") != "REMOVED":
                    self._remove_pg_named(nm)
        except Exception:
            pass
        self._kick = True
        self.q.put(("wake", None, None, time.perf_counter()))
        return counts

    def _reattach(self, job_id: str, alloc: list[dict]) -> bool:
        ray = self.ray
        from ray.util.placement_group import get_placement_group
        run_id = alloc[0]["run_id"]
        hs = []
        for a in alloc:
            h = self.handles.get(a["worker"])
            if h is None or a["node"] not in self.node_idx:
                return False
            hs.append(h)
        try:
            sts = ray.get([h.status.remote() for h in hs], timeout=10)
        except Exception:
            return False
        if any(s["run_id"] != run_id or s["state"] not in ("running", "finished") for s in sts):
            return False
        rec = self.scheduler.jobs[job_id]
        spec = self.specs[job_id]
        tasks = spec.tasks(self.store.job(job_id)["workers"])
        rec.tasks = tasks
        pls = tuple(TaskPlacement(a["rank"], self.node_idx[a["node"]], tuple(a["gpu_ids"])) for a in alloc)
        try:
            pg = get_placement_group(f"dlsched-pg-{job_id}")
        except Exception:
            pg = None
        run = _Run(job_id, run_id, tasks, pls, [a["worker"] for a in alloc], pg=pg, started=time.time())
        for tp in pls:
            self.state.take(tp.node, tasks[tp.task].vector, tp.gpu_ids)
        self.runs[job_id] = run
        with self._wlock:
            for tp, h in zip(pls, hs):
                self._waits[h.wait.remote(run_id)] = (job_id, run_id, tp.task)
        return True
