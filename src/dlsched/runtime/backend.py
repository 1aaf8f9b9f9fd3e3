"""RayBackend: the real runtime behind the Backend protocol (the simulator's twin).

Threads. The Scheduler's run loop owns this object: `poll`, `apply`, `snapshot` and the operator
commands run on its thread only. Two helper threads feed one queue that `poll` blocks on, so any
event wakes a round at once: the *waiter* (`ray.wait` on the one `wait` call kept in flight per
rank: a rank that ends, fails or dies) and the *node monitor* (polls `ray.nodes()`; Ray has no
push API for membership). The REST API's threads only put commands on the queue and read SQLite.

Mapping of plan decisions to Ray
- Launch / Resume: a detached placement group named `dlsched-pg-<job>` with one bundle per rank,
  each pinned with a label selector to the node the policy chose (`ray.io/node-id`), booking the
  rank's share of the GPU ids the policy chose (`shares`: jobs packed on one GPU, `packed`
  decisions or over-subscription, are admitted together; the ranks get the ids in
  CUDA_VISIBLE_DEVICES); it must be
  ready within `pg_timeout_s` or it is removed and the job requeued (Ray must never queue a
  group itself: its queue would compete with the policy). Each rank runs in a warm RankWorker on
  that node (one detached actor per rank, taken from the node's pool or started cold), rank 0
  gives the rendezvous address, and the program restores from the job's latest checkpoint.
- Suspend: every rank is asked to stop at the next mini-batch boundary; the gang agrees, rank 0
  checkpoints, the ranks return, workers go back to the pool, the group is removed.
- Migrate / Resize: Suspend, then Launch on the new placements (any world size).
Each suspend, resume, migration and resize is timed as it is carried out (`_switched`, seen by
`on_switch`: the server's metrics, dlsched.runtime.metrics).
The scheduler's ClusterState is the ledger; Ray's placement groups enforce it on the nodes.

Failures: an error on a rank's `wait` (ActorDiedError / ActorUnavailableError: a dead process or
node) or a program exception breaks the gang: the other ranks are killed (gloo peers would hang
in a collective), the group removed, and the job reported as JobStopped, so the policy places it
again and it restores from its last checkpoint. The node of a dead rank is kept out of rounds
for `suspect_s` (Ray notices a dead node only after its health checks fail). A program that fails
`max_failures` times is failed for good.

Restart: allocations (rank -> node, worker, run id) are in SQLite; `recover` re-attaches to the
workers of jobs that kept running (or finished) while no server was up, and requeues the rest.

Layout. This class is a thin facade: it owns the queue, `poll` / `apply`, the ledger (`state`,
`runs`, `partial`, `specs`) and the threads, and the rest lives in one module per job:
- `nodes`: NodeInfo, discovery, the scheduler's Cluster, the node monitor thread (`NodeMonitor`);
- `pool`: the warm worker pool (`WorkerPool`: new, take, release, kill, adopt, refill);
- `stats`: step records drained from rank 0, acknowledged per run, the stats log fallback,
  checkpoint pruning (`StepStats`);
- `runs`: a run's start, failed start, stop and teardown, a rank's end, a broken gang and its
  first failure, a node going (`RunsMixin`);
- `shares`: GPU sharing, the per-GPU slots each run books in Ray as the ledger's gpu_load says
  (`SharesMixin`);
- `commands`: the operator's cancel, suspend, resume, migrate (`CommandsMixin`);
- `recovery`: `recover` and re-attaching after a restart (`RecoveryMixin`).
Two styles, chosen by what a part owns. Collaborator classes where the part has state of its own
behind a narrow interface (the worker handles and idle lists, the drains in flight and the
acknowledgements, the monitor's last report): they get the few shared objects they read when
built (none is ever rebound) and nothing else touches their state; `handles` and `pool` here
are the pool's own dicts, kept for the API. Mixins where the part acts on the shared run ledger:
every method of runs, commands and recovery reads and writes the same state (`state`, `runs`,
`partial`, `_waits`, `store`, `scheduler`) and calls across the seams (a stop drains, tears down
and releases workers; a node going breaks gangs and gives partial holds back; recovery takes the
ledger again). As collaborators they would each hold the whole backend and write `self.b.`
everywhere, hiding nothing; as mixins their code reads as the one class it is, and each module's
docstring names the state it uses.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from dlsched.cluster.state import ClusterState, Snapshot
from dlsched.core.errors import DlschedError
from dlsched.core.types import GPU, Launch, Migrate, Plan, Resize, Resume, Suspend, TaskPlacement, TaskSpec
from dlsched.runtime.byo_runs import DEFAULT_MAX_GRACE_S
from dlsched.runtime.commands import CommandsMixin
from dlsched.runtime.goodput import MeasuredGoodput
from dlsched.runtime.nodes import NODE_ID_LABEL, NodeInfo, NodeMonitor, cluster_of, discover_nodes
from dlsched.runtime.pool import WARM_IMPORTS, WorkerPool
from dlsched.runtime.progress import RUNTIME_CAPABILITIES, job_stats
from dlsched.runtime.recovery import RecoveryMixin
from dlsched.runtime.runs import SAVING, STARTING, RunsMixin, _Run
from dlsched.runtime.shares import SharesMixin
from dlsched.runtime.spec import RuntimeJobSpec
from dlsched.runtime.stats import StepStats
from dlsched.runtime.wakes import Wakes
from dlsched.scheduler import events as ev

__all__ = ["NAMESPACE", "NODE_ID_LABEL", "WARM_IMPORTS", "NodeInfo", "RayBackend", "cluster_of",
           "discover_nodes"]

log = logging.getLogger("dlsched.runtime")

NAMESPACE = "dlsched"


class RayBackend(RunsMixin, SharesMixin, CommandsMixin, RecoveryMixin):
    # a policy's exception in a round holds the job it is about (or keeps the plan), see
    # dlsched.scheduler.contain: one bad job must not stop a shared cluster's scheduler
    contain_policy_errors = True
    # what this backend carries out (dlsched.scheduler.backend.CAPABILITIES); an instance on a
    # cluster without per-GPU slots cannot share GPUs (see __init__ and shares.py)
    capabilities = RUNTIME_CAPABILITIES

    def __init__(self, store, state_dir: str | Path, *, namespace: str = NAMESPACE,
                 warm_per_node: int | None = None,
                 pg_timeout_s: float = 10.0, start_timeout_s: float = 120.0, stop_timeout_s: float = 30.0,
                 node_poll_s: float = 0.5,
                 suspect_s: float = 20.0, max_failures: int = 3, stats_every_s: float = 0.5,
                 warm_imports: tuple[str, ...] = WARM_IMPORTS, max_grace_s: float = DEFAULT_MAX_GRACE_S,
                 script_roots: tuple[str, ...] = ()):
        import ray
        self.ray = ray
        self.namespace = namespace
        self.store = store
        self.state_dir = Path(state_dir)
        self.ckpt_root = self.state_dir / "checkpoints"
        self.ckpt_root.mkdir(parents=True, exist_ok=True)
        self.pg_timeout_s, self.stop_timeout_s = pg_timeout_s, stop_timeout_s
        self.max_grace_s = float(max_grace_s)    # a command job's SIGTERM grace, at most (byo.py)
        self.script_roots = tuple(str(r) for r in script_roots)   # a torchrun script's (byo_launch.py)
        self.start_timeout_s = start_timeout_s
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
        # GPU sharing needs the per-GPU slots on every GPU node (shares.py); without them the
        # groups book Ray's GPU as before and this backend cannot share GPUs
        self.nodes_without_slots = [n.name for n in self.nodes if n.gpus and not n.gpu_slots]
        self.gpu_slots = not self.nodes_without_slots
        if not self.gpu_slots:                   # (the server says so, or refuses a sharing profile)
            self.capabilities = RUNTIME_CAPABILITIES - {"gpu_sharing"}
        self.cluster = cluster_of(self.nodes)
        self.state = ClusterState(self.cluster)
        self.suspect_until = np.zeros(len(self.nodes))
        self.q: queue.Queue = queue.Queue()
        self.runs: dict[str, _Run] = {}
        self.partial: dict[str, dict[int, TaskPlacement]] = {}   # placed part of jobs not yet whole
        self.specs: dict[str, RuntimeJobSpec] = {}
        self.failures: dict[str, int] = {}
        self.warm_target = {i: (n.gpus if warm_per_node is None else warm_per_node)
                            for i, n in enumerate(self.nodes)}
        self.workers = WorkerPool(ray, namespace, self.nodes, self.node_idx, self.state,
                                  self.suspect_until, self.warm_imports, self.warm_target)
        self.handles = self.workers.handles     # worker name -> actor handle (idle or running)
        self.pool = self.workers.idle           # node -> idle worker names
        self.stats = StepStats(ray, store, self.handles, self.ckpt_root)
        self.goodput_model = MeasuredGoodput(store)   # adaptive jobs' fitted goodput (pollux)
        self._waits: dict = {}                  # ObjectRef -> (job_id, run_id, rank)
        self._wlock = threading.Lock()
        self._ticks = Wakes()                   # rounds the scheduler asked for (wake_at)
        self._closing = threading.Event()
        self._now = self.now()
        self._stats_cache: dict = {}            # job -> job_stats, at poll time _stats_at
        self._stats_at: float | None = None
        self._batch_t0: float | None = None
        self._attaching = False
        self._arrived: list[str] = []           # arrivals handed out by the last poll
        self.latencies: list[float] = []        # event -> decision (s): plan ready, or round over
        self.on_switch = None                   # sees (kind, seconds) of each switch (_switched)
        self.scheduler = None
        self.prescheduling = False              # on when a profile needs it (use_capabilities)
        self._kick = False                      # a round is due at the next poll (after recover)
        self.workers.adopt()
        self.monitor = NodeMonitor(ray, self.nodes, self.q, self._closing, node_poll_s)
        self.workers.refill()
        self._threads = [threading.Thread(target=self._waiter, daemon=True, name="dlsched-waiter"),
                         threading.Thread(target=self.monitor.run, daemon=True, name="dlsched-nodes")]
        for t in self._threads:
            t.start()

    def no_slots_reason(self) -> str:
        """Why this backend cannot share GPUs (one line), or ""."""
        lacking = self.nodes_without_slots
        if not lacking:
            return ""
        more = f" and {len(lacking) - 4} more" if len(lacking) > 4 else ""
        return (f"node(s) {', '.join(lacking[:4])}{more} declare no per-GPU slots: start each with "
                f"`ray start ... --resources '{{\"dlsched_gpu_0\": 1, \"dlsched_gpu_1\": 1, ...}}'` "
                f"(one per GPU; see docs/runtime-gpu-sharing.md)")

    def warm_ready(self, node: int) -> int:
        """Pool workers of `node` whose process is up (torch imported)."""
        return self.workers.ready(node)

    # -- Backend protocol ------------------------------------------------------------------
    def now(self) -> float:
        return time.time() - self.epoch

    def use_capabilities(self, needs) -> None:
        """Pre-scheduling is a mode: on only for a profile that needs it (runs.py, `_preschedule`)."""
        if "prescheduling" in needs:
            self.prescheduling = True

    def snapshot(self) -> Snapshot:
        up = self.state.up & (self.suspect_until <= time.time())
        free, load, used = self.state.free.copy(), self.state.gpu_load.copy(), self.state.gpu_used.copy()
        for a in (free, up, load, used):
            a.setflags(write=False)
        return Snapshot(self.cluster, free, up, load, self._now, used)

    def wake_at(self, t: float) -> None:
        if self._ticks.add(t):
            self.q.put(("wake", None, None, time.perf_counter()))

    def usage(self) -> tuple[float, float, float]:
        # effective: GPUs held by running jobs; a GPU that k of them share counts once (1/k each),
        # as in the simulator
        load = self.state.gpu_load
        eff = sum(r.tasks[tp.task].demand[GPU] * (sum(1.0 / max(int(load[tp.node, g]), 1) for g in tp.gpu_ids)
                                                  / len(tp.gpu_ids) if tp.gpu_ids else 1.0)
                  for r in self.runs.values() for tp in r.placements)
        part = sum(self._tasks_of(j)[i].demand[GPU] for j, h in self.partial.items() for i in h)
        return self.state.allocated_gpus(), float(eff), float(part)

    def job_stats(self, job_id: str) -> dict:
        """STATS_KEYS, measured (dlsched.runtime.progress); read once per job per poll."""
        if self._stats_at != self._now:
            self._stats_cache, self._stats_at = {}, self._now
        hit = self._stats_cache.get(job_id)
        if hit is None:
            hit = self._stats_cache[job_id] = job_stats(self.store, job_id, self.epoch, time.time())
        return dict(hit)

    def close(self) -> None:
        self._closing.set()
        self.q.put(("wake", None, None, time.perf_counter()))

    def kill_all(self) -> None:
        """Stop every job's ranks and every worker this backend knows (a server told to clean
        up on exit; by default a stopped server leaves jobs running for the next one)."""
        for run in list(self.runs.values()):
            self._teardown(run, kill=True)
        for name in list(self.handles):
            self.workers.kill(name)

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
            timeout = self._ticks.timeout(self.now(), 0.25)
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
                except DlschedError as e:   # an operator's bad request: one line, the caller gets it
                    log.warning("runtime: %s refused: %s", it[0], e)
                    fut = it[2]
                    if isinstance(fut, Future) and not fut.done():
                        fut.set_exception(e)
                except Exception as e:  # one bad command must not stop the scheduler
                    log.exception("runtime: %s failed", it[0])
                    fut = it[2]
                    if isinstance(fut, Future) and not fut.done():
                        fut.set_exception(e)
            # a wake due by the batch's time (wakes.py: never one stamped before its own time;
            # one that came due while the items were handled is taken at the next turn, at once)
            if self._ticks.due(self._now):
                out.append(ev.RoundTick(self._now))
            if self._kick:            # a (re)started server decides at once, events or not
                self._kick = False
                out.append(ev.RoundTick(self._now))
            if time.monotonic() - self.stats.last >= self.stats_every_s:
                self._late_starts()
                # (a run still starting is left out until its rank 0 has started: before, its rank 0
                # may still hold the last run's records; after, it may be training already, as a
                # torchrun node does while its other ranks' cold workers start)
                self.stats.collect({j: r for j, r in self.runs.items() if not r.pending or r.lead_up})
                self.workers.refill()
            if out:
                self._batch_t0 = min(t0s) if t0s else time.perf_counter()
                return out
        return None

    def apply(self, plan: Plan) -> None:
        if self._batch_t0 is not None:
            self.latencies.append(time.perf_counter() - self._batch_t0)
            self._batch_t0 = None
        for d in plan.ordered():
            t0 = time.perf_counter()
            if isinstance(d, Suspend):
                ran = d.job_id in self.runs
                self._give_partial(d.job_id)
                self._stop_run(d.job_id, "suspended")
                self.store.update_job(d.job_id, state="queued")     # preempted: waits to resume
                if d.reason:                                        # a tenancy's: reclaim, fair share
                    self.store.event(d.job_id, "preempted", d.reason)
                if ran:
                    self._switched("suspend", t0)
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
                    self._start_run(d.job_id, tuple(held.values()), tasks, taken=True,
                                    switch=("resume", t0) if isinstance(d, Resume) else None)
            elif isinstance(d, Migrate):
                self._stop_run(d.job_id, "migrating")
                self._start_run(d.job_id, d.placements, self._tasks_of(d.job_id), switch=("migrate", t0))
            elif isinstance(d, Resize):
                self._stop_run(d.job_id, "resizing")
                batch = getattr(d.adapt, "batch_size", None)    # an adaptive policy's (pollux)
                if batch:
                    self.set_batch(d.job_id, int(batch))
                self._start_run(d.job_id, d.placements, d.tasks, switch=("resize", t0))
            else:  # pragma: no cover
                raise TypeError(f"unknown decision {d!r}")

    def batch_of(self, job_id: str) -> int:
        """The global batch the job's next run trains with: the one an adaptive policy last gave
        it (kept in the store, so a restarted server or a requeued job keeps it), else its spec's."""
        b = self.store.meta(f"batch.{job_id}")
        return int(b) if b else self.specs[job_id].batch_size

    def set_batch(self, job_id: str, batch: int) -> None:
        """Train `job_id` with global batch `batch` from its next run on (the program reads
        `ctx.batch_size` at start); an event records the change."""
        if batch != self.batch_of(job_id):
            self.store.set_meta(f"batch.{job_id}", str(int(batch)))
            self.store.event(job_id, "batch", str(int(batch)))

    def _switched(self, kind: str, t0: float) -> None:
        """A run was suspended, resumed, migrated or resized (`kind`), from perf_counter() `t0`
        until now: what carrying it out took here (the stop's checkpoint; the start's placement
        group and ranks; the program's restore follows in its ranks)."""
        if self.on_switch is not None:
            self.on_switch(kind, time.perf_counter() - t0)

    def _give_partial(self, job_id: str) -> None:
        held = self.partial.pop(job_id, None)
        if held:
            tasks = self._tasks_of(job_id)
            for tp in held.values():
                self.state.give(tp.node, tasks[tp.task].vector, tp.gpu_ids)
            self._sync_shares(self._run_gpus(held.values()))

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
        if kind == "saving":                          # a run's last step is done (runs.py)
            self._preschedule(*arg)
            return
        if kind == "start_done":                      # a rank's start answered (runs.py)
            self._on_start_done(*arg)
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

    # -- helper threads (the node monitor's loop is NodeMonitor.run, in nodes.py) ------------
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
                if info is None:
                    continue
                if info[2] == SAVING:
                    self.q.put(("saving", info[:2], None, time.perf_counter()))
                elif info[2] == STARTING:
                    self.q.put(("start_done", (*info[:2], ref), None, time.perf_counter()))
                else:
                    self.q.put(("rank_done", (*info, ref), None, time.perf_counter()))
