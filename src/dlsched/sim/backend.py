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

Rooms: the event heap and its records are engine.py, a job's simulated state run.py (JobRun),
what a job holds and the switches that change it holding.py (Holding), its rates and their
refresh rates.py (Rates); SimBackend, here, mixes those two in and keeps the Backend protocol,
the event handlers and the finished jobs' stats.
"""
from __future__ import annotations

from array import array

import numpy as np

from dlsched.cluster.state import ClusterState, Snapshot
from dlsched.cluster.topology import Cluster
from dlsched.core.types import JobSpec, Launch, Migrate, Plan, Resize, Resume, Suspend
from dlsched.scheduler import events as ev
from dlsched.sim import adaptive, switch_cost
from dlsched.sim.engine import (P_ARRIVAL, P_FINISH, P_NODE, P_TICK, EngineLog, EventHeap, Arrive,
                                Finish, NodeChange, RateChange, Reshare, SaveDone, TaskDone, Tick)
from dlsched.scheduler.eventlog import StatsBlock, StatsRow
from dlsched.sim.holding import Holding
from dlsched.sim.rates import Rates
from dlsched.sim.run import DoneRow, DoneRun, JobRun, Waiting
from dlsched.workload.loss import observed_loss
from dlsched.sim.network import net_shares
from dlsched.workload.speed import SpeedModel, SpeedParams


class SimBackend(Holding, Rates):
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
    # Nothing reads the scheduler from another thread here: a static order's round may read its
    # waiting list itself, not a copy (docs/decisions/0059; the runtime's API threads read the
    # last round's list, so it keeps the copy).
    lend_queue = True
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
    # Re-share windows (dlsched.sim.rates, `_refresh`; docs/simulator.md, "Re-share windows"):
    # after an update whose region re-shared more than `reshare_region` flows, link changes wait
    # for the next multiple of the speed settings' `reshare_window_s` and are applied together
    # (0 s: every change at once, exact max-min shares at every event).
    reshare_region = 256

    def __init__(self, cluster: Cluster, jobs: list[JobSpec], *, speed: SpeedParams | None = None,
                 restart_delay_s: float = 30.0, node_events: list[tuple[float, int, bool]] = (),
                 record_rates: bool = True, start_delay_s: float = 0.0, prescheduling: bool = False):
        self.cluster = cluster
        self.state = ClusterState(cluster)
        self.speed = SpeedModel(cluster, speed)
        self.reshare_window_s = float(self.speed.params.reshare_window_s)
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
        # Re-share windows (dlsched.sim.rates, _refresh): the link changes held for the window's
        # end, whether changes are held now, the pending Reshare's time, and whether it is due.
        self._net_pend: dict[str, tuple[int, ...] | None] = {}
        self._net_batch = False
        self._reshare_at: float | None = None
        self._reshare_due = False
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
        runs = self.runs
        for d in plan.ordered():
            r = runs[d.job_id]
            if type(r) is Waiting:
                r = runs[d.job_id] = r.started()
            self._own(r)
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
                    # (a runtime job's BatchChoice, simulated: no goodput profile, its speed model)
                    if d.adapt is not None and hasattr(d.adapt, "profile"):
                        r.adapt = d.adapt
                        self._adaptive = True
                        self._interfere = self._interfere or bool(getattr(d.adapt, "interference", 0.0))
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
        if self._interfere:            # Pollux's --interference, from the allocations now
            self._touched.update(adaptive.interfered(self.runs))
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
            self.runs[job.job_id] = Waiting(job, job.tasks, float(work), now, k)
            self.log.append((now, "arrival", job.job_id, ""))
            out.append(ev.JobArrival(now, job))
        elif cls is RateChange:
            r = self._own(self.runs.get(e.job_id))
            if r is not None and e.version == r.version and not r.finished:
                self._touched.add(r.spec.job_id)
                if r.prof is not None and r.prof.link_bytes:
                    self._net_dirty.add(r.spec.job_id)   # it now competes for its links
        elif cls is Reshare:
            self._reshare_at = None
            self._reshare_due = True
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

    # -- finished jobs ----------------------------------------------------------------------------
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
