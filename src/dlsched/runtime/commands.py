"""Operator commands: cancel, suspend (hold), resume (release) and migrate (or resize).

The REST API's threads put a command on the backend's queue (`RayBackend.command`) and wait on a
future; the scheduler thread runs it in `poll` through `_op_<kind>` and sets the future with its
result (a dict for the API) or its exception (a DlschedError is a 409). A command appends the
events it causes to `out`, the batch `poll` returns, so the scheduler sees them in that round.

`CommandsMixin` is a mixin of `RayBackend` (see there why): it reads the scheduler's job
records, the ledger (`state`, `runs`, `specs`, `nodes`) and the store, and stops runs
(`_stop_run`) or hands a plan to `scheduler.execute`. Scheduler thread only.
"""
from __future__ import annotations

import time

import numpy as np

from dlsched.core.errors import DlschedError
from dlsched.core.types import Migrate, Plan, Resize
from dlsched.runtime.store import ACTIVE
from dlsched.scheduler import events as ev


class CommandsMixin:
    def _op_state(self, job_id: str, out: list) -> dict:
        """The live state as a simulator state document (dlsched.runtime.whatif): read here, on
        the scheduler thread, so the records, the ledger and the store agree."""
        from dlsched.runtime.whatif import live_state
        return live_state(self)

    def _op_admit(self, job_id: str, out: list, spec) -> str:
        """Why the job of `spec` (a RuntimeJobSpec) can never run on this cluster, in its own
        fields and numbers ("" when it can): the scheduler's own arrival check (NeverFits),
        asked at submit so that such a job is refused there instead of rejected once queued."""
        job = spec.to_jobspec("(new)", 0.0)
        reason = self.scheduler.never_fits(job, self)
        ten = self.scheduler.tenancy
        if not reason and ten is not None:
            return ten.never_fits(job)              # above its queue's limits, with the numbers
        if not reason:
            return ""
        cap = self.snapshot().capacity
        g_max, g_all = float(cap[:, 0].max(initial=0)), float(cap[:, 0].sum())
        c_max = float(cap[:, 1].max(initial=0))
        grow = " (the node list is read when the server starts: restart it after adding nodes)"
        if spec.gpus_per_worker > g_max:
            return (f"field 'gpus_per_worker': a worker needs {spec.gpus_per_worker:g} GPUs; the largest "
                    f"node has {g_max:g}{grow}")
        if max(spec.cpus_per_worker, spec.ps_cpus if spec.ps else 0) > c_max:
            return f"field 'cpus_per_worker': a rank needs more CPUs than the largest node has ({c_max:g}){grow}"
        need = spec.workers * spec.gpus_per_worker
        if need > g_all:
            return (f"field 'workers': {spec.workers} workers x {spec.gpus_per_worker:g} GPUs = {need:g} GPUs "
                    f"at once; the cluster has {g_all:g}{grow}")
        return reason + grow

    def _rec(self, job_id: str):
        rec = self.scheduler.jobs.get(job_id) if self.scheduler else None
        if rec is None:
            raise DlschedError(f"unknown job {job_id}")
        return rec

    def _op_cancel(self, job_id: str, out: list) -> dict:
        j = self.store.job(job_id)
        if j is None:
            raise DlschedError(f"unknown job {job_id}")
        if j["state"] not in ACTIVE:
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

    def _op_suspend(self, job_id: str, out: list, by: str = "an operator") -> dict:
        """Stop the job until it is resumed: `suspended`, with who suspended it and when. A run
        whose program cannot stop at a mini-batch boundary (it never calls ctx.steps) is
        stopped at once, and the answer says so and how many steps since its last checkpoint
        are lost (`clean`, `lost_steps`, `detail`)."""
        rec = self._rec(job_id)
        from dlsched.scheduler.core import JobState
        if rec.state in (JobState.DONE, JobState.REJECTED, JobState.HELD):
            return {"job_id": job_id, "state": self.store.job(job_id)["state"], "changed": False}
        t0 = time.perf_counter()
        self._give_partial(job_id)
        stop = {"clean": True, "lost_steps": 0}
        if job_id in self.runs:
            stop = self._stop_run(job_id, "suspended by operator")
            self._switched("suspend", t0)
        j = self.store.job(job_id)
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())
        why = f"suspended by {by} at {when}"
        if not stop["clean"]:
            why += f"; stopped without a checkpoint: {stop['detail']}"
        self.store.update_job(job_id, state="suspended", held=1, error=why)
        self.store.event(job_id, "suspended", why)
        out.append(ev.JobHeld(self._now, job_id, "operator"))
        detail = ("checkpointed, nothing lost" if stop["clean"] and not stop.get("signal") else
                  f"SIGTERM: {stop['detail']}" if stop["clean"] else f"could not stop cleanly: {stop['detail']}")
        return {"job_id": job_id, "state": "suspended", "changed": True, "step": j["step"],
                "clean": stop["clean"], "lost_steps": stop["lost_steps"], "detail": detail,
                "stop_s": time.perf_counter() - t0}

    def _op_resume(self, job_id: str, out: list) -> dict:
        rec = self._rec(job_id)
        from dlsched.scheduler.core import JobState
        if rec.state is not JobState.HELD:
            return {"job_id": job_id, "state": self.store.job(job_id)["state"], "changed": False}
        self.store.update_job(job_id, state="queued", held=0, error="")
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
            batch = self.batch_of(job_id)            # (a command job: none)
            if workers < 1 or (batch is not None and batch % workers):
                raise DlschedError(f"workers: must be >= 1 and divide batch_size {batch}, got {workers}")
            tasks = spec.tasks(workers)
        # the policy's own placement engine (its filters and scorers) on a transaction where the
        # job's current resources are free: one engine for rounds, trials and operator commands
        sched = self.scheduler
        ctx = sched.context(self.snapshot())
        txn = ctx.txn
        txn.unhold(run.placements, [run.tasks[tp.task].vector for tp in run.placements])
        up = ctx.snap.up
        old = {tp.node for tp in run.placements}
        if nodes:
            unknown = [n for n in nodes if n not in self.node_idx]
            if unknown:
                raise DlschedError(f"unknown node {unknown[0]} (nodes: {', '.join(self.node_idx)})")
            order = [self.node_idx[n] for n in nodes]
        else:
            order = [i for i in range(len(self.nodes)) if i not in old] + sorted(old)
        order = [i for i in order if up[i]]

        def mask(ids) -> np.ndarray:
            m = np.zeros(len(self.nodes), dtype=bool)
            m[list(ids)] = True
            return m
        placements = []
        for k, t in enumerate(tasks):
            if nodes and order:
                # named nodes: ranks spread over them in turn (each the first that fits from its turn)
                tries = [mask([i]) for i in order[k % len(order):] + order[:k % len(order)]]
            else:                                        # nodes it does not use now first
                tries = [mask(i for i in order if i not in old), mask(order)] if order else []
            for allowed in tries:
                node, _ = sched.choose_node(ctx, rec.spec, t, allowed=allowed)
                if node is not None:
                    placements.append(txn.reserve(job_id, t, node))
                    break
            else:
                raise DlschedError(f"job {job_id} does not fit on {', '.join(self.nodes[i].name for i in order) or 'any node'}")
        resized = tasks is not rec.tasks
        if not resized and sorted(tp.node for tp in placements) == sorted(tp.node for tp in run.placements):
            # nothing would move: a restart for nothing is refused (the placements are only
            # reserved in this round's transaction: dropping them changes nothing)
            here = ", ".join(sorted({self.nodes[i].name for i in old}))
            if nodes:
                raise DlschedError(f"job {job_id} is already on {here}: nothing to move")
            raise DlschedError(f"no other node fits job {job_id} (it runs on {here}); "
                               f"name the nodes with --nodes, or free some first")
        d = (Resize(job_id, tasks, tuple(placements)) if resized
             else Migrate(job_id, tuple(placements)))
        t0 = time.perf_counter()
        self.scheduler.execute(Plan([d]), self)
        return {"job_id": job_id, "state": "running", "changed": True, "resized": resized,
                "move_s": time.perf_counter() - t0,
                "nodes": [self.nodes[tp.node].name for tp in placements]}
