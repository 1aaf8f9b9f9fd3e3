"""SimBackend: the discrete-event simulator behind the Backend protocol.

Jobs advance lazily: a running DL job keeps (remaining work, rate, time of last update); its
remaining work is brought up to date only when its rate changes, and its finish event is pushed
for now + remaining / rate. A rate change bumps the job's version, so finish events pushed
earlier are recognised as stale and dropped when popped (a finish later than the job's live
entry waits outside the heap until that entry pops: `_push_finish`; the heap pops the same
entries in the same order). Rates change when a job starts,
stops, moves, is resized, finishes a restart, or when a job it shares a link or a GPU with does
any of these (links are shared max-min fairly; see dlsched.workload.speed, and
dlsched.sim.network for the incremental re-share: only the jobs whose share moved are re-rated).

Work units: iterations for jobs with a model and an iteration count; otherwise seconds at the
ideal placement (a trace's duration). Independent tasks (`tasks` jobs) each run for their own
duration_s.

Rooms: the event heap and its records are engine.py, a job's simulated state run.py (JobRun).
Switch costs: what a suspend, resume, migrate, resize or pack costs (restart_delay_s for plain
decisions, a decision's own `cost` for Gandiva's, packing's speed) is computed in
dlsched.sim.switch_cost, which states the model; this module only applies it to the job's state.
Lost time (job_stats switch_lost_s): the seconds a job held resources without progress because
of a restart (restore, waiting for its GPUs' previous job to checkpoint, restart_delay_s) or of
its first start (start_delay_s, its launch phase).
Phases: a DL job's launch and saving phases (JobSpec launch_s / data_gb, save_s) and Liquid's
pre-scheduling of the next job during a saving phase are modelled in dlsched.sim.phases; this
module charges the launch as a first start's hold and runs the saving phase between the last
iteration and the job's finish.
"""
from __future__ import annotations

from array import array
from heapq import heappush

import numpy as np

from dlsched.cluster.state import ClusterState, Snapshot
from dlsched.cluster.topology import Cluster
from dlsched.core.types import GPU, JobSpec, Launch, Migrate, Plan, Resize, Resume, Suspend, TaskPlacement
from dlsched.scheduler import events as ev
from dlsched.sim import phases, switch_cost
from dlsched.sim.engine import (P_ARRIVAL, P_FINISH, P_NODE, P_RATE, P_TICK, EngineLog, EventHeap, Arrive,
                                Finish, NodeChange, RateChange, SaveDone, TaskDone, Tick)
from dlsched.scheduler.eventlog import StatsBlock, StatsRow
from dlsched.sim.fastrate import VERSION as _VERSION
from dlsched.sim.run import DoneRow, DoneRun, JobRun
from dlsched.workload.loss import observed_loss
from dlsched.sim.network import net_shares
from dlsched.workload.speed import SpeedModel, SpeedParams


class SimBackend:
    """Simulated cluster. `jobs` arrive at their submit times; `node_events` is a list of
    (time, node_id, up) failures and repairs."""
    # the model carries out every decision: costed switches (a decision's SwitchCost), GPU
    # sharing (packing, with the interference model), preemption, migration, resize, progress,
    # and Liquid's pre-scheduling (dlsched.sim.phases)
    capabilities = frozenset(("preemption", "migration", "resize", "costed_switches", "gpu_sharing", "progress",
                              "prescheduling"))
    # Every change of the cluster's state reaches the scheduler as an event or comes from a plan
    # it made, so a periodic round with nothing new may be skipped (Component.quiet_until). The
    # real runtime frees GPUs when checkpoints end and measures speeds between events: it runs
    # every round.
    quiet_rounds = True
    # Finishes later than a job's live entry wait outside the heap (_push_finish); False pushes
    # every one at once, as the first versions did (tests compare the two).
    defer_finishes = True
    # A finished job's stats become a row of typed columns (_drop_done); False keeps a DoneRun
    # for each (tests compare the two).
    compact_done = True
    # The jobs a re-share moved are re-rated in compiled code where the shares are
    # (dlsched.sim.fastrate); False keeps them all in Python (tests compare the two).
    compiled_rerate = True
    # A run of the FIFO family on jobs whose speed does not depend on placement runs whole in
    # compiled code (dlsched.sim.fastloop, through `drive`); False keeps it in Python (tests
    # compare the two).
    compiled_loop = True
    compiled_run = False       # whether it did (set by `drive`)

    def __init__(self, cluster: Cluster, jobs: list[JobSpec], *, speed: SpeedParams | None = None,
                 restart_delay_s: float = 30.0, node_events: list[tuple[float, int, bool]] = (),
                 record_rates: bool = True, start_delay_s: float = 0.0, prescheduling: bool = False):
        self.cluster = cluster
        self.state = ClusterState(cluster)
        self.speed = SpeedModel(cluster, speed)
        self.restart_delay_s = float(restart_delay_s)
        # A first launch holds its resources without progress for start_delay_s (0: starts at
        # once; Pollux's simulator charges its 30 s rescale_time on the first start too).
        self.start_delay_s = float(start_delay_s)
        if self.restart_delay_s < 0 or self.start_delay_s < 0:
            raise ValueError("restart_delay_s and start_delay_s must be >= 0")
        self.heap = EventHeap()
        self._now = 0.0
        self.runs: dict[str, JobRun] = {}
        self._gpu_jobs: dict[tuple[int, int], list[str]] = {}
        self._touched: set[str] = set()
        self.net = net_shares(self.speed.link_capacity)   # running jobs on shared links, their shares
        self._net_dirty: set[str] = set()         # jobs whose flow may have changed
        self._done: list[JobRun] = []             # finished since the last _refresh (_drop_done)
        self._done_stats: StatsBlock | None = None   # finished jobs' job_stats, a row each
        self._effective = 0.0
        self._eff_gpu_s = 0.0      # integral of _effective up to _eff_t (exact, between samples too)
        self._eff_t = 0.0
        self._partial = 0.0
        self._partial_jobs: set[str] = set()
        self.log = EngineLog()     # (time, kind, job_id, detail) records, in columns
        self.record_rates = record_rates
        self._ticks: set[float] = set()
        self._gpu_free_at: dict[tuple[int, int], float] = {}   # GPU slot -> end of a checkpoint
        # Pre-scheduling (dlsched.sim.phases): a saving job hands its resources on at once;
        # GPU slot -> end of the saving phase on it.
        self.prescheduling = bool(prescheduling)
        self._saving_until: dict[tuple[int, int], float] = {}
        # Arrivals are fed one at a time, in (time, list position) order, each with the sequence
        # number it had when every arrival was pushed at the start: the heap holds what is
        # running, not a million future arrivals (EventHeap.reserve).
        self._jobs = list(jobs)
        times = np.array([float(job.submit_time_s) for job in self._jobs], dtype=np.float64)
        self._arr_times = times
        self._arr_order = np.argsort(times, kind="stable")
        self._arr_seq0 = self.heap.reserve(len(self._jobs))
        self._arr_next = 0
        self._arr_event: Arrive | None = None
        self._arr_k = -1           # the list position of the arrival in the heap
        # the compiled re-rate (fastrate.FlowRuns) once the shares are compiled, and each job's
        # place among all job ids in sorted order (its sequence numbers then: _refresh)
        self._flows = None
        self._rank: array | None = None
        self._ranked = True        # False once a job came from outside the list (no rank)
        self._seq0: int | None = None
        self._rec_buf: list | None = None   # rate records of one _rerate, put in job order
        self._feed_arrival()
        self._ghost_t = -np.inf    # the latest deferred finish never pushed (see _push_finish)
        for t, node, up in node_events:
            self.heap.push(float(t), P_NODE, NodeChange(int(node), bool(up)))

    # -- Backend protocol -----------------------------------------------------------------------
    def drive(self, scheduler, progress=None) -> bool:
        """Run `scheduler`'s whole loop here, if this run is one dlsched.sim.fastloop compiles
        (Scheduler.run asks first): True when it ran, False to run Scheduler's own loop."""
        if not self.compiled_loop:
            return False
        from dlsched.sim import fastloop
        self.compiled_run = fastloop.run(scheduler, self, progress)
        return self.compiled_run

    def now(self) -> float:
        return self._now

    def use_capabilities(self, needs) -> None:
        """Told by Scheduler.run which capabilities the profile needs: those that are modes of
        the model (prescheduling) are turned on."""
        if "prescheduling" in needs:
            self.prescheduling = True

    def snapshot(self) -> Snapshot:
        return self.state.snapshot(self._now)

    def wake_at(self, time: float) -> None:
        if time not in self._ticks:
            self._ticks.add(time)
            self.heap.push(float(time), P_TICK, Tick())

    def usage(self) -> tuple[float, float, float]:
        return self.state.allocated_gpus(), self._effective, self._partial

    def effective_gpu_s(self) -> float:
        """GPU-seconds held by jobs making progress, from the start to now. Exact: the timeline's
        samples miss the rate changes the scheduler does not see (the end of a restore)."""
        return self._eff_gpu_s + self._effective * (self._now - self._eff_t)

    def _add_effective(self, delta: float) -> None:
        self._eff_gpu_s += self._effective * (self._now - self._eff_t)
        self._eff_t = self._now
        self._effective += delta

    def job_stats(self, job_id: str) -> dict:
        """The vocabulary of dlsched.scheduler.backend.STATS_KEYS, from the model."""
        r = self.runs.get(job_id)
        if type(r) is DoneRow:              # a finished job's row (_drop_done)
            block, i = self._done_stats, r.row
            return {k: col[i] for k, col in zip(block.keys, block.cols)}
        if r is None:
            return {"step": None, "remaining": None, "progress": 0.0, "rate": 0.0, "loss": None, "gpu_s": 0.0,
                    "first_progress_s": None, "suspends": 0, "resumes": 0, "switch_lost_s": 0.0,
                    "switch_lost_gpu_s": 0.0, "nic_bytes": 0.0, "cross_rack_bytes": 0.0}
        self._own(r)
        self._advance(r, self._now)
        return self._stats_of(r)

    def _own(self, r):
        """`r` (a run or None), out of the compiled re-rate's array mode if it was in it: every
        entry point that reads or changes one job's fields passes it through here first."""
        if r is not None and r.slot >= 0:
            self._flows.own(r)
        return r

    def final_stats(self, job_id: str):
        """job_stats for the run's result: a finished job's row of `_done_stats` as it is (a
        StatsRow, equal to the dict job_stats reads from it), without a dict and a second row."""
        r = self.runs.get(job_id)
        if type(r) is DoneRow:
            return StatsRow(self._done_stats, r.row)
        return self.job_stats(job_id)

    def _stats_of(self, r) -> dict:
        """job_stats of a run brought up to now."""
        spec = r.spec
        total = spec.iterations if spec.iterations is not None else (spec.duration_s or 0.0)
        # work left (iterations, or seconds at the ideal placement) and its current rate
        st = {"step": None, "remaining": r.remaining, "rate": r.rate,
              "progress": 1.0 if r.finished or total <= 0 else min(max(1.0 - r.remaining / total, 0.0), 1.0),
              "loss": None, "gpu_s": r.gpu_s + r.hold_gpus * (self._now - r.hold_since),
              "first_progress_s": r.first_progress_s, "suspends": r.suspends, "resumes": r.resumes,
              "switch_lost_s": r.lost_s, "switch_lost_gpu_s": r.lost_gpu_s,
              "nic_bytes": r.nic_bytes, "cross_rack_bytes": r.cross_rack_bytes}
        if spec.kind == "dl" and spec.iterations is not None:
            # iterations done and the training loss now (its curve + seeded noise: workload/loss.py)
            st["step"] = spec.iterations - r.remaining
            st["loss"] = observed_loss(spec, st["step"])
        return st

    def poll(self) -> list | None:
        """Pop every event at the next time; return those the Scheduler must see."""
        heap = self.heap
        out: list = []
        while heap:
            t = heap.peek_time()
            if out and t > self._now:
                break
            if not out and t > self._now:
                self._now = t
            _, _, _, e = heap.pop()
            self._handle(e, out)
            if not heap or heap.peek_time() > self._now:
                self._refresh()
                if out:
                    break
        if not out:
            self._refresh()
            # Every entry pushed is popped by now, and the clock stops at the latest: one a
            # deferred finish would have been, had it been pushed (_push_finish).
            if self._ghost_t > self._now:
                self._now = self._ghost_t
            return None
        return out

    def _feed_arrival(self) -> None:
        """Push the next arrival (see __init__)."""
        i = self._arr_next
        if i < len(self._arr_order):
            k = self._arr_k = int(self._arr_order[i])
            self._arr_next = i + 1
            e = self._arr_event = Arrive(self._jobs[k])
            self.heap.push_seq(float(self._arr_times[k]), P_ARRIVAL, self._arr_seq0 + k, e)

    def apply(self, plan: Plan) -> None:
        now = self._now
        for d in plan.ordered():
            r = self._own(self.runs[d.job_id])
            cost = d.cost   # a switch cost carried by the decision (Gandiva), None: the run's default
            if isinstance(d, Suspend):
                if cost is not None:
                    self._checkpoint(r, now, cost)
                self._stop(r, now)
                r.suspends += 1
            elif isinstance(d, Launch):
                first = not r.placements
                if self.start_delay_s > 0 and first:
                    r.starting = True
                if cost is not None:
                    self._costed_start(r, d.placements, now, 0.0)
                elif first:
                    self._launch_phase(r, d.placements, now)
                r.packed = d.packed
                self._take(r, d.placements, now)
            elif isinstance(d, Resume):
                r.restoring = True
                if cost is not None:
                    new = [tp.node for tp in d.placements]
                    delay = switch_cost.resume_restore_s(cost, r.spec.model, r.last_nodes, new, self.cluster.nodes)
                    self._costed_start(r, d.placements, now, delay)
                r.packed = d.packed
                r.resumes += 1
                self._take(r, d.placements, now)
            elif isinstance(d, (Migrate, Resize)):
                # A suspended job's checkpoint lies where it last ran.
                old = {tp.node for tp in r.placements.values()} or set(r.last_nodes)
                fresh = not r.placements and r.version == 0   # never placed: its first start
                if cost is not None and r.placements:
                    self._checkpoint(r, now, cost)
                self._stop(r, now)
                if isinstance(d, Resize):
                    r.tasks = d.tasks
                r.restoring = not fresh
                r.starting = fresh and self.start_delay_s > 0
                if cost is not None:
                    new = [tp.node for tp in d.placements]
                    delay = switch_cost.move_restore_s(cost, r.spec.model, old, new, self.cluster.nodes)
                    self._costed_start(r, d.placements, now, delay)
                elif fresh:
                    self._launch_phase(r, d.placements, now)
                r.packed = False
                self._take(r, d.placements, now)
            else:  # pragma: no cover - Plan only holds the decision types above
                raise TypeError(f"unknown decision {d!r}")
        self._refresh()

    # -- events ---------------------------------------------------------------------------------
    def _handle(self, e, out: list) -> None:
        now = self._now
        cls = type(e)          # the engine's records are final classes: `is`, not isinstance
        if cls is Finish:
            r = self._own(self.runs.get(e.job_id))
            if r is not None and e is r.fin_ev:
                r.fin_ev = None
                d = r.deferred
                if d is not None:         # a later finish waited for this entry (_push_finish)
                    r.deferred = None
                    t, seq, version = d
                    if version == r.version:
                        r.fin_ev = Finish(e.job_id, version)
                        r.fin_at = t
                        self.heap.push_seq(t, P_FINISH, seq, r.fin_ev)
                    elif t > self._ghost_t:
                        self._ghost_t = t
            if r is None or r.finished or e.version != r.version:
                return  # stale
            self._advance(r, now)
            if r.spec.save_s > 0 and r.spec.kind == "dl":
                self._start_saving(r, now)
                return
            self._finish(r, now)
            out.append(ev.JobFinish(now, r.spec.job_id))
        elif cls is SaveDone:
            r = self._own(self.runs.get(e.job_id))
            if r is None or r.finished or e.version != r.version:
                return  # stale
            self._finish(r, now)
            out.append(ev.JobFinish(now, r.spec.job_id))
        elif cls is TaskDone:
            r = self._own(self.runs[e.job_id])
            if e.version != r.version or e.task not in r.placements:
                return
            tp = r.placements.pop(e.task)
            self._give(r, tp, now)
            r.done_tasks += 1
            out.append(ev.TaskFinish(now, r.spec.job_id, e.task))
            if r.done_tasks == len(r.tasks):
                r.finished = True
                self.log.append((now, "finish", r.spec.job_id, ""))
                out.append(ev.JobFinish(now, r.spec.job_id))
        elif cls is Arrive:
            k = -1
            if e is self._arr_event:
                k = self._arr_k
                self._feed_arrival()
            elif self._ranked:
                self._unrank()
            job = e.job
            work = job.iterations if job.iterations is not None else (job.duration_s or 0.0)
            self.runs[job.job_id] = JobRun(job, job.tasks, float(work), last_t=now, k=k)
            self.log.append((now, "arrival", job.job_id, ""))
            out.append(ev.JobArrival(now, job))
        elif cls is RateChange:
            r = self._own(self.runs.get(e.job_id))
            if r is not None and e.version == r.version and not r.finished:
                self._touched.add(r.spec.job_id)
                if r.prof is not None and r.prof.link_bytes:
                    self._net_dirty.add(r.spec.job_id)   # it now competes for its links
        elif cls is Tick:
            self._ticks.discard(now)
            out.append(ev.RoundTick(now))
        elif cls is NodeChange:
            self._node_change(e, now, out)

    def _node_change(self, e: NodeChange, now: float, out: list) -> None:
        if self.state.up[e.node] == e.up:
            return
        self.state.up[e.node] = e.up
        self.log.append((now, "node_up" if e.up else "node_down", "", str(e.node)))
        if not e.up:
            for r in list(self.runs.values()):
                if not r.finished and any(tp.node == e.node for tp in r.placements.values()):
                    self._stop(self._own(r), now)
                    out.append(ev.JobStopped(now, r.spec.job_id, f"node {e.node} down"))
            out.append(ev.NodeDown(now, e.node))
        else:
            out.append(ev.NodeUp(now, e.node))

    # -- resources ------------------------------------------------------------------------------
    def _hold(self, r: JobRun, now: float, delta_gpus: float) -> None:
        r.gpu_s += r.hold_gpus * (now - r.hold_since)
        r.hold_since = now
        r.hold_gpus += delta_gpus

    def _take(self, r: JobRun, placements, now: float) -> None:
        for tp in placements:
            task = r.tasks[tp.task]
            self.state.take(tp.node, task.vector, tp.gpu_ids)
            r.placements[tp.task] = tp
            self._hold(r, now, task.demand[GPU])
            for g in tp.gpu_ids:
                users = self._gpu_jobs.setdefault((tp.node, g), [])
                if users:
                    self._touched.update(j for j in users if self.runs[j].spec.kind == "dl")
                users.append(r.spec.job_id)
            if task.duration_s is not None and r.spec.kind == "tasks":
                self.heap.push(now + task.duration_s, P_FINISH, TaskDone(r.spec.job_id, tp.task, r.version))
                self._add_effective(task.demand[GPU])
                if r.first_progress_s is None:
                    r.first_progress_s = now
        if r.spec.kind == "dl":
            self._touched.add(r.spec.job_id)
        if type(placements) is tuple and hasattr(self.log, "append_take"):   # the detail is made when read
            self.log.append_take(now, r.spec.job_id, placements)
        else:
            self.log.append((now, "take", r.spec.job_id, ";".join(f"{tp.task}@{tp.node}" for tp in placements)))

    def _give(self, r: JobRun, tp: TaskPlacement, now: float) -> None:
        task = r.tasks[tp.task]
        self.state.give(tp.node, task.vector, tp.gpu_ids)
        self._hold(r, now, -task.demand[GPU])
        for g in tp.gpu_ids:
            self._unlist(r, (tp.node, g))
        if r.spec.kind == "tasks":
            self._add_effective(-task.demand[GPU])

    def _unlist(self, r: JobRun, slot: tuple[int, int]) -> None:
        """Take the job off a GPU slot's users; the jobs left there are re-rated."""
        lst = self._gpu_jobs[slot]
        lst.remove(r.spec.job_id)
        if lst:
            self._touched.update(j for j in lst if self.runs[j].spec.kind == "dl")
        else:
            del self._gpu_jobs[slot]

    def _checkpoint(self, r: JobRun, now: float, cost) -> None:
        """A costed suspend (always followed by _stop): finish the current mini-batch, then copy
        GPU memory to the host. The job's GPUs (and the job itself) are busy until both are done."""
        w = 0.0
        if r.prof is not None and r.spec.kind == "dl":
            unit = 1.0 if r.prof.iteration_based else r.prof.ideal_iter_s
            total = r.spec.iterations if r.spec.iterations is not None else (r.spec.duration_s or 0.0)
            self._advance(r, now)
            w = switch_cost.boundary_wait_s(cost, unit, total - r.remaining, r.remaining, r.rate)
            if w > 0:
                self._advance(r, now + w)                # credit the whole mini-batch
                r.last_t = now
        busy = switch_cost.checkpoint_done_at(cost, r.spec.model, now, w)
        r.start_after = max(r.start_after, busy)
        for tp in r.placements.values():
            for g in tp.gpu_ids:
                key = (tp.node, g)
                if self._gpu_free_at.get(key, 0.0) < busy:
                    self._gpu_free_at[key] = busy

    def _costed_start(self, r: JobRun, placements, now: float, restore_s: float) -> None:
        """The next (re)start of `r` on `placements` begins when its GPUs and its own checkpoint
        are free and then takes restore_s without progress."""
        busy = [r.start_after, *(self._gpu_free_at.get((tp.node, g), 0.0)
                                 for tp in placements for g in tp.gpu_ids)]
        r.restoring = True
        r.restore_s = switch_cost.costed_hold_s(now, busy, restore_s)

    def _launch_phase(self, r: JobRun, placements, now: float) -> None:
        """A first start holds start_delay_s + its launch phase, overlapped with the savings
        still running on its GPUs (dlsched.sim.phases); nothing changes for a job without a
        launch phase placed where nobody saves."""
        launch = phases.launch_s(r.spec, placements, self.cluster.nodes) if r.spec.kind == "dl" else 0.0
        busy = [t for tp in placements for g in tp.gpu_ids
                if (t := self._saving_until.get((tp.node, g), now)) > now]
        if launch > 0 or busy:
            r.starting = True
            r.restore_s = phases.first_start_hold_s(now, self.start_delay_s + launch, busy)

    def _start_saving(self, r: JobRun, now: float) -> None:
        """The last iteration is done: the job saves for save_s, holding its GPUs, then
        finishes. With pre-scheduling its resources go back to the ledger at once (its GPUs
        stay busy until the saving ends) and the scheduler is woken to place the next job."""
        self._set_rate(r, 0.0, now)
        r.saving = True
        r.version += 1
        end = now + r.spec.save_s
        self.heap.push(end, P_FINISH, SaveDone(r.spec.job_id, r.version))
        self._net_dirty.add(r.spec.job_id)
        self.log.append((now, "saving", r.spec.job_id, ""))
        if not self.prescheduling:
            return
        for tp in r.placements.values():
            self.state.give(tp.node, r.tasks[tp.task].vector, tp.gpu_ids)
            for g in tp.gpu_ids:
                self._unlist(r, (tp.node, g))
                self._saving_until[(tp.node, g)] = max(self._saving_until.get((tp.node, g), 0.0), end)
        r.placements.clear()
        self.wake_at(now)

    def _end_saving(self, r: JobRun, now: float) -> None:
        """Whatever ends a saving phase (its end, a stop): a job that handed its resources on
        stops holding its GPUs now."""
        if r.saving and not r.placements:
            self._hold(r, now, -r.hold_gpus)
        r.saving = False

    def _stop(self, r: JobRun, now: float) -> None:
        """Checkpoint (progress is kept) and free everything the job holds."""
        self._advance(r, now)
        self._set_rate(r, 0.0, now)
        cut = switch_cost.unspent_hold_s(r.restart_until, now)    # a restart cut short: charge
        if cut > 0:                                                # only what it spent
            r.lost_s -= cut
            r.lost_gpu_s -= cut * r.hold_gpus
            r.restart_until = now
        if r.placements:
            r.last_nodes = tuple(sorted({tp.node for tp in r.placements.values()}))
        for tp in list(r.placements.values()):
            self._give(r, tp, now)
        r.placements.clear()
        self._end_saving(r, now)
        r.version += 1          # drops pending finish / task events
        r.restoring = True
        self._net_dirty.add(r.spec.job_id)
        r.prof = None
        self._touched.add(r.spec.job_id)
        self.log.append((now, "stop", r.spec.job_id, ""))

    def _finish(self, r: JobRun, now: float) -> None:
        self._set_rate(r, 0.0, now)
        for tp in list(r.placements.values()):
            self._give(r, tp, now)
        r.placements.clear()
        self._end_saving(r, now)
        r.finished = True
        self._net_dirty.add(r.spec.job_id)
        r.prof = None
        self._touched.discard(r.spec.job_id)
        self._done.append(r)
        self.log.append((now, "finish", r.spec.job_id, ""))

    # -- rates ----------------------------------------------------------------------------------
    def _advance(self, r: JobRun, now: float) -> None:
        dt = now - r.last_t
        if dt > 0 and r.rate > 0:
            done = min(r.rate * dt, r.remaining)
            r.remaining -= done
            if r.prof is not None:
                per = 1.0 if r.prof.iteration_based else 1.0 / r.prof.ideal_iter_s
                r.nic_bytes += done * per * r.prof.nic_bytes
                r.cross_rack_bytes += done * per * r.prof.cross_rack_bytes
        r.last_t = now

    def _set_rate(self, r: JobRun, rate: float, now: float, seq: int | None = None) -> None:
        if r.spec.kind == "dl":
            # Effective GPUs: held by jobs making progress; a GPU that k progressing jobs share
            # (packing, over-subscription) counts once: 1/k to each.
            c = r.hold_gpus / r.share if rate > 0 else 0.0
            if c != r.eff_gpus:
                self._add_effective(c - r.eff_gpus)
                r.eff_gpus = c
        if rate == r.rate:
            return
        self._advance(r, now)
        r.rate = rate
        r.version += 1
        if rate > 0:
            if r.first_progress_s is None:
                r.first_progress_s = now
            self._push_finish(r, now + max(r.remaining, 0.0) / rate, seq)
        if self.record_rates:
            if self._rec_buf is not None:      # in _rerate with the compiled re-rate: in job order
                self._rec_buf.append((r.spec.job_id, rate))
            else:
                self.log.append((now, "rate", r.spec.job_id, f"{rate:.9g}"))

    def _push_finish(self, r: JobRun, t: float, seq: int | None = None) -> None:
        """The job's finish entry for its current version at time t. A re-rated job's earlier
        entries are stale; most re-rates slow a job down (a new flow on its links), and an entry
        at or after the job's live one waits outside the heap: it is pushed, with the sequence
        number taken now, when the live one pops (stale). So the heap pops the same events in
        the same order as if every entry were pushed at once, without a push and a stale pop
        per re-rate. A waiting entry that goes stale is never pushed; its time still counts
        where the clock ends (poll). `seq`: the sequence number reserved for it (None: the next)."""
        if seq is None:
            seq = self.heap.reserve()
        d = r.deferred
        if d is not None:
            r.deferred = None
            if d[0] > self._ghost_t:
                self._ghost_t = d[0]
        if self.defer_finishes and r.fin_ev is not None and r.fin_at <= t:
            r.deferred = (t, seq, r.version)
        else:
            r.fin_ev = Finish(r.spec.job_id, r.version)
            r.fin_at = t
            self.heap.push_seq(t, P_FINISH, seq, r.fin_ev)

    def _interference(self, r: JobRun) -> float:
        if not self._gpu_jobs:
            return 1.0
        others: dict[str, str | None] = {}       # job id -> model, in the order met
        for tp in r.placements.values():
            for g in tp.gpu_ids:
                for other in self._gpu_jobs.get((tp.node, g), ()):
                    if other != r.spec.job_id and other not in others:
                        others[other] = self.runs[other].spec.model
        r.share = 1 + len(others)
        if not others:
            return 1.0       # sharing_factor of a job alone on its GPUs
        packed = r.packed or any(self.runs[o].packed for o in others)
        return switch_cost.sharing_factor(r.spec.model, list(others.items()), packed,
                                          self.speed.params.factor)

    def _target_rate(self, r: JobRun, shares) -> float:
        r.factor = None
        if r.finished or r.saving or not r.whole or r.spec.kind != "dl" or self._now < r.restart_until:
            return 0.0
        prof = r.prof
        base = 1.0 if prof is None else prof.rate(shares if prof.link_bytes else {})
        f = self._interference(r)
        if shares is not None:
            r.factor = f     # kept for the re-rates that only a re-share causes (_refresh)
            # and the rate formula's constants (JobComm.rate_at), in the order _rerate reads them
            it = prof.iteration_based
            r.consts = (prof.local_comm_s, prof.max_link_bytes, prof.compute_s, prof.overlap,
                        1.0 if it else prof.ideal_iter_s, 1.0 if it else 1.0 / prof.ideal_iter_s,
                        prof.nic_bytes, prof.cross_rack_bytes, f)
        return base * f

    def _refresh(self) -> None:
        """Bring every touched job's rate up to date (and all link-sharing jobs if needed)."""
        if not self._touched and not self._net_dirty:
            return
        now = self._now
        runs = self.runs
        touched = self._touched
        flows_rt = self._flows
        if flows_rt is not None:
            # out of array mode (fastrate) before Python reads them: a touched job is re-rated
            # in Python, and a changed flow may be removed (its slot given to another)
            for jid in touched | self._net_dirty:
                self._own(runs[jid])
        for jid in (sorted(touched) if len(touched) > 1 else touched):
            r = runs[jid]
            if r.finished:
                continue
            if r.placements and len(r.placements) + r.done_tasks == len(r.tasks):   # r.whole
                if r.restoring or r.starting:
                    delay = switch_cost.restart_hold_s(r.restoring, self.restart_delay_s,
                                                       self.start_delay_s, r.restore_s)
                    r.restore_s = None
                    r.lost_s += delay
                    r.lost_gpu_s += delay * r.hold_gpus
                    r.restoring = r.starting = False
                    r.restart_until = now + delay
                    if delay > 0:
                        self.heap.push(r.restart_until, P_RATE, RateChange(jid, r.version))
                if r.prof is None:
                    r.prof = self.speed.profile(r.spec, tuple(r.placements.values()), r.tasks)
                    if r.prof is not None and r.prof.link_bytes:
                        self._net_dirty.add(jid)
            elif r.prof is not None:
                r.prof = None
        # Gang jobs holding part of their tasks: the partial-hold waste.
        partial_jobs = self._partial_jobs
        for jid in touched:
            r = runs[jid]
            if r.spec.kind == "dl" and not r.finished and r.placements and not r.whole:
                partial_jobs.add(jid)
            else:
                partial_jobs.discard(jid)
        todo = touched
        changed: dict[str, float] = {}
        self._seq0 = None
        if self._net_dirty:
            # Flows: jobs that use shared links and are not restarting. Only the components
            # of the links they change are re-shared, and only jobs whose share moved re-rated.
            # A job with no flow now and none before changes nothing: it is left out (most jobs
            # of a trace without models never have one).
            changes = {}
            flows = self.net.flows
            for jid in (sorted(self._net_dirty) if len(self._net_dirty) > 1 else self._net_dirty):
                r = runs[jid]
                use = (not r.finished and not r.saving and r.prof is not None and r.prof.link_bytes
                       and now >= r.restart_until)
                if use:
                    changes[jid] = self.speed.solver_links(r.prof)
                elif jid in flows:
                    changes[jid] = None
            if changes:
                if flows_rt is not None:
                    changed = self._rerate_compiled(changes, now)
                else:
                    changed = self.net.update(changes)
                    if self.compiled_rerate and self._ranked:
                        self._start_flows()
                if changed:
                    todo = todo | changed.keys()
        order = sorted(todo) if len(todo) > 1 else todo
        if flows_rt is not None:
            # sequence numbers seq + rank (a block _rerate_compiled reserved, if it ran)
            seq0 = self._seq0 if self._seq0 is not None else self.heap.reserve(len(self._rank))
            self._rerate(order, seq0, changed, now, self._rank)
        else:
            # One sequence number per job, in this order, for a finish it may push: the same
            # order of entries as taking them one at a time (gaps do not matter).
            self._rerate(order, self.heap.reserve(len(order)), changed, now)
        if partial_jobs or self._partial:
            self._partial = float(sum(runs[j].hold_gpus for j in partial_jobs))
        self._touched.clear()
        self._net_dirty.clear()
        if self._done:
            self._drop_done()

    def _job_shares(self, r: JobRun) -> dict | None:
        """{link: the job's share} for a job with link bytes (its flow's rate on every link it
        crosses; a link's capacity without a flow), else None."""
        if r.prof is None or not r.prof.link_bytes:
            return None
        s = self.net.share(r.spec.job_id)
        cap = self.speed.link_capacity
        return {link: (float(cap[link]) if s is None else s) for link in r.prof.link_bytes}

    def _start_flows(self) -> None:
        """Turn the compiled re-rate on (dlsched.sim.fastrate) once the shares are compiled:
        each job's rank among all job ids in sorted order, for its sequence numbers."""
        from dlsched.sim import fastrate, netfast
        real = getattr(self.net, "_real", self.net)
        if type(real) is not netfast.FastNetShares or not fastrate.available():
            self.compiled_rerate = False          # (this backend's: not to be asked again)
            return
        ids = [job.job_id for job in self._jobs]
        rank = np.empty(len(ids), dtype=np.int64)
        rank[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
        self._rank = array("q", rank.tobytes())     # read as Python ints, 8 bytes a job
        self._flows = fastrate.FlowRuns(real)

    def _unrank(self) -> None:
        """A job came from outside the list (no rank): back to Python re-rates for good."""
        self._ranked = False
        fl = self._flows
        if fl is not None:
            for r in list(fl.runs):
                if r is not None:
                    fl.own(r)
            self._flows = None
            self._rank = None

    def _rerate_compiled(self, changes: dict, now: float) -> dict:
        """The re-share and the compiled re-rate of the jobs in array mode it moved
        (fastrate.FlowRuns.rerate); {job: share} for those Python must re-rate. Reserves the
        update's block of sequence numbers (self._seq0; a job's is seq0 + its rank)."""
        net, fl = self.net, self._flows
        n = net.update_slots(changes)
        seq0 = self._seq0 = self.heap.reserve(len(self._rank))
        real = fl.net
        npy, npush, nrec, self._ghost_t = fl.rerate(n, real._out_slot, real._out_rate, now, seq0,
                                                    self.defer_finishes, self.record_rates, self._ghost_t)
        names, runs_at, rank = real._names, fl.runs, self._rank
        if npush:
            heap = self.heap._heap
            for s, t in zip(fl._push_slot[:npush].tolist(), fl._push_t[:npush].tolist()):
                r = runs_at[s]
                jid = r.spec.job_id
                r.fin_ev = ev = Finish(jid, int(fl.is_[s, _VERSION]))
                heappush(heap, (t, P_FINISH, seq0 + rank[r.k], ev))
        if nrec:
            self._rec_buf = [(names[s], rt) for s, rt in zip(fl._rec_slot[:nrec].tolist(),
                                                              fl._rec_rate[:nrec].tolist())]
        return dict(zip(map(names.__getitem__, fl._py_slot[:npy].tolist()), fl._py_share[:npy].tolist()))

    def _rerate(self, order, seq: int, changed: dict, now: float, rank=None) -> None:
        """_refresh's last loop: each job of `order` brought to its rate, the i-th with sequence
        number seq + i for a finish it pushes (with `rank`, a job's list position -> its rank:
        seq + its rank, the same order). A touched job (its placement, co-runners or state
        changed) through _target_rate and _set_rate. A job that only a re-share moved is the
        most frequent on a busy cluster (tens per arrival): its interference factor is the one
        last computed, and its rate is rate(shares) * factor for one share on every link, as
        JobComm.rate_at computes; _set_rate, _advance and _push_finish are written out here for
        it, the same operations in the same order. With the compiled re-rate on (self._flows),
        most of those were re-rated there already; the jobs here enter its array mode after."""
        runs, touched = self.runs, self._touched
        heap = self.heap._heap
        defer, record = self.defer_finishes, self.record_rates
        flows_rt = self._flows if rank is not None else None    # (on from the next _refresh)
        if flows_rt is not None and record:
            # rate records in job order with the compiled re-rate's (_rerate_compiled)
            if self._rec_buf is None:
                self._rec_buf = []
            record = False
        for i, jid in enumerate(order):
            r = runs[jid]
            sq = seq + i if rank is None else seq + rank[r.k]
            self._own(r)                    # the compiled re-rate gave it back (its rate is 0)
            if r.factor is None or jid in touched:     # (otherwise in `changed`)
                self._set_rate(r, self._target_rate(r, self._job_shares(r)), now, sq)
            else:
                self._rerate_shared(r, jid, changed[jid], now, sq, heap, defer, record)
            if flows_rt is not None and r.factor is not None and not r.finished:
                flows_rt.enter(r, rank[r.k])
        buf = self._rec_buf
        if buf is not None:
            self._rec_buf = None
            buf.sort()
            for jid, rate in buf:
                self.log.append((now, "rate", jid, f"{rate:.9g}"))

    def _rerate_shared(self, r: JobRun, jid: str, share: float, now: float, seq: int, heap, defer: bool,
                       record: bool) -> None:
        """_rerate for a job that only a re-share moved (see there)."""
        # JobComm.rate_at(share) * factor, the same operations (constants: _target_rate)
        local, most, c, overlap, num, per, nic, cross, factor = r.consts
        comm = local + most / share
        t = c + comm - overlap * (c if c <= comm else comm)
        rate = num / t * factor
        eff = r.hold_gpus / r.share if rate > 0 else 0.0
        if eff != r.eff_gpus:
            self._add_effective(eff - r.eff_gpus)
            r.eff_gpus = eff
        old = r.rate
        if rate == old:
            return
        dt = now - r.last_t           # _advance
        if dt > 0 and old > 0:
            done = old * dt
            rem = r.remaining
            if done > rem:
                done = rem
            r.remaining = rem - done
            r.nic_bytes += done * per * nic
            r.cross_rack_bytes += done * per * cross
        r.last_t = now
        r.rate = rate
        r.version += 1
        if rate > 0:
            if r.first_progress_s is None:
                r.first_progress_s = now
            t = now + max(r.remaining, 0.0) / rate     # _push_finish(r, t) with this seq
            d = r.deferred
            if d is not None:
                r.deferred = None
                if d[0] > self._ghost_t:
                    self._ghost_t = d[0]
            if defer and r.fin_ev is not None and r.fin_at <= t:
                r.deferred = (t, seq, r.version)
            else:
                r.fin_ev = Finish(jid, r.version)
                r.fin_at = t
                heappush(heap, (t, P_FINISH, seq, r.fin_ev))
        if record:
            self.log.append((now, "rate", jid, f"{rate:.9g}"))
        elif self._rec_buf is not None:
            self._rec_buf.append((jid, rate))

    def _drop_done(self) -> None:
        """Cut down the jobs finished since the last _refresh, once nothing refers to them (no
        finish entry of theirs in the heap or waiting for it, not partly held). What is still
        read of a finished job is its job_stats, and those no longer change once it holds no
        GPU: they become a row of `_done_stats` (typed columns), and `runs` keeps a DoneRow
        (its spec and the row's number; every event still in the heap for it is stale). A job whose GPU
        count did not come back to exactly 0.0 (float residue of fractional GPUs: its gpu_s
        would still grow with the clock) keeps a DoneRun, which computes them when asked."""
        runs = self.runs
        for r in self._done:
            jid = r.spec.job_id
            if (r.finished and r.fin_ev is None and r.deferred is None and runs.get(jid) is r
                    and jid not in self._partial_jobs and not r.placements):
                row = self._done_row(r) if self.compact_done and r.hold_gpus == 0.0 else None
                runs[jid] = DoneRun(r) if row is None else DoneRow(r.spec, row)
        self._done.clear()

    def _done_row(self, r: JobRun) -> int | None:
        """The finished job's job_stats as a new row of `_done_stats`; its number (None: the
        stats have other keys than the rows so far)."""
        st = self._stats_of(r)
        block = self._done_stats
        if block is None:
            block = self._done_stats = StatsBlock(tuple(st))
        elif tuple(st) != block.keys:
            return None
        block.add(st)
        return block.n - 1
