"""Restart: a new server takes over the jobs, workers and placement groups the last one left.

SQLite holds jobs, allocations (rank -> node, GPUs, worker, run id) and checkpoints. `recover`
hands every active job to the scheduler again; a job whose workers still run (or finished) its
recorded run id is re-attached (`_reattach`: the ledger takes its placements again and a `wait`
goes in flight per rank), every other active job is requeued from its last checkpoint after its
workers are killed: a job is never started twice. Workers and groups of jobs that are not
active any more are removed.

`RecoveryMixin` is a mixin of `RayBackend` (see there why). The backend's constructor has
adopted the named workers of its namespace already (`WorkerPool.adopt`). Scheduler thread, once,
before `Scheduler.run`.
"""
from __future__ import annotations

import time

from dlsched.core.types import Launch, Plan, TaskPlacement
from dlsched.runtime.runs import SAVING, _Run
from dlsched.runtime.sdk import clean_checkpoints
from dlsched.runtime.store import ACTIVE
from dlsched.scheduler import events as ev


class RecoveryMixin:
    def recover(self, scheduler) -> dict:
        """Attach a scheduler. Jobs the store has as active are handed to it again; jobs whose
        ranks are still up (running or finished while no server was there) are re-attached, the
        others requeued from their last checkpoint. Returns counts for the log."""
        self.scheduler = scheduler
        counts = {"reattached": 0, "requeued": 0, "held": 0}
        attached_pgs = set()
        for j in self.store.jobs(ACTIVE):
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
                    self.workers.kill(a["worker"])
                self.store.clear_allocation(job_id)
                self._remove_pg_named(f"dlsched-pg-{job_id}")
            if j["held"]:
                scheduler.handle(ev.JobHeld(self._now, job_id, "operator"), self)
                counts["held"] += 1
            elif j["state"] in ("running", "starting"):
                self.stats.from_log(job_id)
                self.store.update_job(job_id, state="queued")
                self.store.event(job_id, "requeued", "server restart: ranks gone")
                counts["requeued"] += 1
        for d in self.ckpt_root.glob("*"):
            # half-written files of jobs that do not run; never of a re-attached job, whose rank
            # 0 may be writing its next checkpoint right now
            if d.name not in self.runs:
                clean_checkpoints(d, keep=2)
        for name in [n for n, h in self.handles.items() if not any(n in r.workers for r in self.runs.values())]:
            if not any(name in lst for lst in self.pool.values()):
                self.workers.kill(name)               # a worker of a job that is not active any more
        try:
            from ray.util import placement_group_table
            for pg in placement_group_table().values():
                nm = pg.get("name", "")
                if nm.startswith("dlsched-pg-") and nm not in attached_pgs and pg.get("state") != "REMOVED":
                    self._remove_pg_named(nm)
        except Exception:
            pass
        # once stale groups are gone, the re-attached runs book the GPU shares the ledger gives
        # them now (shares.py; a group made before the slots, or lost, is made again)
        self._sync_shares({(tp.node, g) for r in self.runs.values() for tp in r.placements for g in tp.gpu_ids})
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
        try:                           # what its group books (shares.py), so that it changes only when needed
            amounts = [dict(b) for b in pg.bundle_specs] if pg is not None else None
        except Exception:
            amounts = None
        run = _Run(job_id, run_id, tasks, pls, [a["worker"] for a in alloc], pg=pg, amounts=amounts,
                   started=time.time())
        for tp in pls:
            self.state.take(tp.node, tasks[tp.task].vector, tp.gpu_ids)
        self.runs[job_id] = run
        with self._wlock:
            for tp, h in zip(pls, hs):
                self._waits[h.wait.remote(run_id)] = (job_id, run_id, tp.task)
            if self.prescheduling:
                self._waits[hs[0].until_saving.remote(run_id)] = (job_id, run_id, SAVING)
        return True
