"""What a simulated job holds, and the switches that change it: SimBackend's resource bookkeeping
(`_take`, `_give`, a GPU slot's users, the GPU-seconds held) and the steps of a suspend, resume,
migrate, resize, saving phase, stop and finish (`_checkpoint`, `_costed_start`, `_launch_phase`,
`_start_saving`, `_end_saving`, `_stop`, `_finish`).

A module of its own because these are the backend's verbs between a decision and a rate: `apply`
and the event handlers (dlsched.sim.backend) call them, and they mark the jobs whose rate must be
brought up to date (`_touched`, `_net_dirty`) for `_refresh` (dlsched.sim.rates). The cost
models they apply are stated in dlsched.sim.switch_cost and dlsched.sim.phases. `Holding` is
mixed into SimBackend: its methods read and write SimBackend's state, as before.
"""
from __future__ import annotations

from dlsched.core.types import GPU, TaskPlacement
from dlsched.sim import phases, switch_cost
from dlsched.sim.engine import P_FINISH, SaveDone, TaskDone
from dlsched.sim.run import JobRun


class Holding:
    """SimBackend's resources and switches (mixed in; see the module)."""

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
