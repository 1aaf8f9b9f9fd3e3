"""Run lifecycle and failures: a gang's start on the placements the policy chose, its stop at a
mini-batch boundary (the gang agrees, rank 0 checkpoints), its end, and a broken gang.

Start: a detached placement group named `dlsched-pg-<job>` with one bundle per rank, each pinned
with a label selector to the node the policy chose (`ray.io/node-id`) and booking the rank's CPUs
and its share of each GPU id the policy chose (`shares.py`: per-GPU slots that mirror the
ledger's gpu_load, so jobs packed on one GPU are admitted together and an exclusive one holds its
GPUs whole); it must be ready within `pg_timeout_s` or it is removed and the job requeued (Ray
must never queue a group itself: its queue would compete with the policy). The runs already on
the new run's GPUs shrink to their new share first; when a run ends (finish, stop, failure), those
left on its GPUs grow back. The ranks see the policy's GPU ids in CUDA_VISIBLE_DEVICES. Each rank
runs in a warm RankWorker on that node, rank 0 gives the rendezvous address, and the program
restores from the job's latest checkpoint. The ranks' starts are issued, not waited for: the
waiter reports each answer (`_on_start_done`), the last confirms the run (`_confirm_start`: the
rank watches, the allocation, the "started" event), and a failed start or none within
`start_timeout_s` requeues the job; a stop asked of a run still starting waits for its starts
first (`_finish_starting`). So a cold worker (a new process importing torch, seconds on a loaded
machine) never holds the scheduler thread, its rounds or its commands. A run
id (`<job>.<attempt>`) names each start: a job is never started twice, and a late answer of an
old run is recognised and dropped.

Failures: an error on a rank's `wait` (a dead process or node) or a program exception breaks the
gang: the other ranks are killed (gloo peers would hang in a collective), the group removed, and
the job reported as JobStopped. The node of a dead rank is kept out of rounds for `suspect_s`.
A program that fails `max_failures` times is failed for good.

Pre-scheduling (seed 003; on when the profile needs the `prescheduling` capability, e.g.
`liquid: {prescheduling: true}`): rank 0 of every run is watched for its saving phase
(`RankWorker.until_saving`): its last step done and the final checkpoint being written, or
PRELOAD_LEAD_S before that by its last step's time (a save on the runtime takes well under a
second for most models, less than loading a dataset; seed 003's saving phase is the model's
transfer, seconds to minutes). Then the next jobs
in the policy's queue order (the last round's), as many ranks as the run frees, are loaded into
warm workers of the nodes the policy's placement engine would give them once the run's GPUs are
free (its filters and scorers on a transaction with the run's resources given back, as an
operator's migrate is placed): first the saving run's own workers there (they load in a thread
beside the checkpoint, and return to the pool when the run ends), then idle ones: the program's
imports and its `prepare(args)` (its dataset). Where the engine finds no place (the round may
still: another job's end), every node the run frees gets them, up to what it frees there.
(Loading every freed node always made a heavy `prepare` slower than none: a 2-rank job with
a 1 GB dataset after a run on 4 nodes built it 8 times on 2 CPUs, and started 12 s after the
GPUs freed instead of 4 s.)
When the GPUs free and the policy places such a job there, the
pool hands it the workers that have it loaded (`WorkerPool.take(node, entry)`), so its launch
overlapped the saving. The GPUs themselves are handed over when the run ends, as without
pre-scheduling: the next job's first step waits for the saving either way.

`RunsMixin` is a mixin of `RayBackend` (see there why): it acts on the backend's shared run
ledger (`state`, `runs`, `partial`, `_waits` under `_wlock`, `store`, `failures`,
`suspect_until`) and calls the pool (`workers`), the step statistics (`stats`) and the GPU
shares (`SharesMixin`: `_reserve`, `_release`, `_sync_shares`). Scheduler thread only.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from dlsched.core.types import GPU, Role, TaskPlacement, TaskSpec
from dlsched.runtime.byo_runs import command_fields, record_signal_stop
from dlsched.runtime.joblogs import job_workdir, rank_log
from dlsched.runtime.sdk import clean_checkpoints, program_key
from dlsched.scheduler import events as ev

log = logging.getLogger("dlsched.runtime")

SAVING = -1          # the rank field of a `_waits` entry that watches a run's saving phase
STARTING = -2        # the rank field of a `_waits` entry that watches a rank's start
PRELOAD_LEAD_S = 5.0  # pre-scheduling starts this long (by the job's step time) before the save


@dataclass(eq=False)
class _Run:
    job_id: str
    run_id: str
    tasks: tuple[TaskSpec, ...]
    placements: tuple[TaskPlacement, ...]        # in rank (task index) order
    workers: list[str]                           # worker actor name per rank
    pg: object = None
    amounts: list | None = None                  # the bundles its group holds (shares.py)
    results: dict[int, dict] = field(default_factory=dict)
    started: float = 0.0
    # a run starting: its ranks' start calls in flight, how many have not answered, by when they
    # must (monotonic) and the switch it carries out (kind, t0)
    starts: list = field(default_factory=list)
    pending: int = 0
    start_deadline: float = 0.0
    switch: tuple | None = None
    starting: bool = False                       # made, its ranks not all started (the API: `starting`)
    lead_up: bool = False                        # rank 0's start answered: its records are this run's


class RunsMixin:
    # -- runs --------------------------------------------------------------------------------
    def _start_run(self, job_id: str, placements, tasks: tuple[TaskSpec, ...], *, taken: bool = False,
                   switch: tuple[str, float] | None = None) -> None:
        """Start a run of `job_id` on `placements`; `switch`: (kind, perf_counter at its start) of
        the resume, migration or resize it carries out, timed once its ranks have started."""
        spec = self.specs[job_id]
        pls = sorted(placements, key=lambda tp: tp.task)
        if not taken:
            for tp in pls:
                self.state.take(tp.node, tasks[tp.task].vector, tp.gpu_ids)
        attempt = self.store.job(job_id)["attempts"] + 1
        if attempt > 1:
            # what the last run's rank 0 logged after the server last read its records (a rank
            # that outlives its gang's break by a step, then writes the final checkpoint): its
            # ranks are gone now, so its stats log is whole (records are keyed by step: idempotent)
            self.stats.from_log(job_id)
        run_id = f"{job_id}.{attempt}"
        run = _Run(job_id, run_id, tasks, tuple(pls), [], started=time.time(), starting=True)
        self.runs[job_id] = run
        self.store.update_job(job_id, attempts=attempt, state="starting")   # running once every rank has
        # the runs already on these GPUs shrink to their new share first (shares.py), then this
        # run's group fits beside them
        self._sync_shares(self._run_gpus(pls), skip=job_id)
        t_pg = time.perf_counter()
        if not self._reserve(run):
            self._fail_start(run, f"placement group not ready in {self.pg_timeout_s:g} s")
            return
        log.info("job %s: %s: placement group %.3f s", job_id, run_id, time.perf_counter() - t_pg)
        for tp in pls:
            run.workers.append(self.workers.take(tp.node, program_key(spec.entry, spec.args)))
        hs = [self.handles[w] for w in run.workers]
        # Issued, not waited for: a cold worker (a new process importing torch) answers its first
        # call seconds later, and the scheduler thread must not wait for it (rounds, commands and
        # other starts go on meanwhile). Rank 0's address is an argument of every start, so Ray
        # runs the starts once it is known; each start's answer comes back through the waiter
        # (`_on_start_done`) and the last one confirms the run (`_confirm_start`), or a failed
        # one or `start_timeout_s` ends it as a failed start.
        addr = hs[0].address.remote()
        worker_ranks = [tp.task for tp in pls if tasks[tp.task].role is Role.WORKER]
        ps_ranks = [tp.task for tp in pls if tasks[tp.task].role is Role.PS]
        num_nodes = len({tp.node for tp in pls if tasks[tp.task].role is Role.WORKER})
        ckpt = str(self.ckpt_root / job_id)
        run.starts = []
        byo = command_fields(spec, pls, self.max_grace_s)    # {} for an SDK program
        for tp, h in zip(pls, hs):
            run.starts.append(h.start.remote({**byo.get(tp.task, {}),
                "job_id": job_id, "run_id": run_id, "rank": tp.task, "world_size": len(pls),
                "worker_ranks": worker_ranks, "ps_ranks": ps_ranks,
                "ckpt_dir": ckpt, "args": spec.args, "batch_size": self.batch_of(job_id),
                "init_batch_size": spec.batch_size, "num_nodes": num_nodes,
                "iterations": spec.iterations, "epochs": spec.epochs,
                "checkpoint_every": spec.checkpoint_every, "gpus": float(tasks[tp.task].demand[GPU]),
                "entry": spec.entry, "log_path": str(rank_log(self.state_dir, job_id, tp.task)),
                "workdir": spec.workdir or str(job_workdir(self.state_dir, job_id)),
                "lead_s": PRELOAD_LEAD_S if self.prescheduling else 0.0,
                # the policy's GPU ids (the same for every job packed on them); none: no GPU
                # (a worker that ran a GPU rank before must not keep that rank's GPUs)
                "env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, tp.gpu_ids))}}, addr))
        run.pending = len(run.starts)
        run.switch = switch
        run.start_deadline = time.monotonic() + self.start_timeout_s
        with self._wlock:
            for ref in run.starts:
                self._waits[ref] = (job_id, run_id, STARTING)

    def _on_start_done(self, job_id: str, run_id: str, ref) -> None:
        """One rank's start answered (the waiter saw its ref ready)."""
        run = self.runs.get(job_id)
        if run is None or run.run_id != run_id or not run.pending:
            return                                    # stopped, failed or confirmed meanwhile
        try:
            self.ray.get(ref)
        except Exception as e:
            self._fail_start(run, f"ranks did not start: {type(e).__name__}: {str(e)[:500]}")
            return
        run.pending -= 1
        if run.starts and ref is run.starts[0]:
            run.lead_up = True
        if not run.pending:
            self._confirm_start(run)

    def _late_starts(self) -> None:
        """Runs whose ranks did not all start within `start_timeout_s`: failed starts."""
        now = time.monotonic()
        for run in [r for r in self.runs.values() if r.pending and r.start_deadline <= now]:
            self._fail_start(run, f"ranks did not start in {self.start_timeout_s:g} s")

    def _finish_starting(self, run: _Run) -> bool:
        """Wait for a run still starting (a stop asked of it meanwhile); False if it failed."""
        if not run.pending:
            return True
        try:
            self.ray.get(run.starts, timeout=max(1.0, run.start_deadline - time.monotonic()))
        except Exception:
            return False
        run.pending = 0
        self._confirm_start(run)
        return True

    def _confirm_start(self, run: _Run) -> None:
        """Every rank of `run` started: watch them, record the allocation and the start."""
        job_id, run_id, pls, tasks = run.job_id, run.run_id, run.placements, run.tasks
        hs = [self.handles[w] for w in run.workers]
        log.info("job %s: %s: ranks started %.3f s after the run was made", job_id, run_id,
                 time.time() - run.started)
        with self._wlock:
            for ref in run.starts:
                self._waits.pop(ref, None)
            for tp, h in zip(pls, hs):
                self._waits[h.wait.remote(run_id)] = (job_id, run_id, tp.task)
            if self.prescheduling:
                self._waits[hs[0].until_saving.remote(run_id)] = (job_id, run_id, SAVING)
        run.starts = []
        self.store.set_allocation(job_id, [
            {"rank": tp.task, "node": self.nodes[tp.node].name, "gpu_ids": tp.gpu_ids, "worker": w,
             "run_id": run_id} for tp, w in zip(pls, run.workers)])
        j = self.store.job(job_id)
        self.store.update_job(job_id, state="running", start_time=j["start_time"] or time.time(),
                              workers=sum(1 for t in tasks if t.role is Role.WORKER))
        # only now: until the store says running, the API shows `starting` with its reason from
        # this flag (cleared earlier, a loaded machine showed `starting` without one)
        run.starting = False
        self.store.event(job_id, "started", f"{run_id} on " + ", ".join(
            f"{tp.task}@{self.nodes[tp.node].name}" for tp in pls))
        if run.switch is not None:
            self._switched(*run.switch)

    def _preschedule(self, job_id: str, run_id: str) -> None:
        """`run_id` entered its saving phase: load the next waiting jobs (the policy's order, as
        many ranks as the run frees) into workers of each of its nodes (module docstring)."""
        run = self.runs.get(job_id)
        if run is None or run.run_id != run_id or self.scheduler is None:
            return
        free: dict[int, int] = {}
        mine: dict[int, list[str]] = {}                 # its own workers, per node
        for tp, w in zip(run.placements, run.workers):
            free[tp.node] = free.get(tp.node, 0) + 1
            mine.setdefault(tp.node, []).append(w)
        total = sum(free.values())
        nxt = []                       # the next jobs, in order, as many ranks as the run frees
        for jid in self.scheduler.queue_order:
            rec, spec = self.scheduler.jobs.get(jid), self.specs.get(jid)
            if rec is None or spec is None or jid in self.runs or spec.command:   # (nothing to preload)
                continue
            if nxt and sum(len(r.tasks) for _, r, _ in nxt) + len(rec.tasks) > total:
                break
            nxt.append((jid, rec, spec))
        if not nxt:
            return
        ctx = self.scheduler.context(self.snapshot())
        ctx.txn.unhold(run.placements, [run.tasks[tp.task].vector for tp in run.placements])
        for jid, rec, spec in nxt:
            try:
                where = self._placed_where(ctx, rec)
            except Exception as e:        # a policy's own filter or scorer: a guess, never fatal
                log.warning("job %s: pre-scheduling could not place it (%s: %s); loading every freed node",
                            jid, type(e).__name__, e)
                where = None
            if where is None:
                where = {node: min(len(rec.tasks), k) for node, k in free.items()}
            parts = []
            for node, k in where.items():
                loaded = self.workers.preload(node, spec.entry, spec.args, k, mine.get(node, []))
                parts.append(f"{self.nodes[node].name}: {', '.join(loaded) or 'loaded already'}")
            self.store.event(jid, "preloaded", f"program and data loading while {job_id} saves ({'; '.join(parts)})")

    def _placed_where(self, ctx, rec) -> dict[int, int] | None:
        """{node: ranks} where the policy's placement engine puts the job, as a round places it
        (Scheduler.place: its filters, scorers and gang rule), on ctx's transaction, where it
        stays (the next job's answer counts it); None when it does not place the job whole."""
        if not self.scheduler.place(rec, ctx).ok:
            return None
        d = ctx.txn.plan.decisions[-1]
        if d.job_id != rec.job_id:
            return None
        where: dict[int, int] = {}
        for tp in d.placements:
            where[tp.node] = where.get(tp.node, 0) + 1
        return where

    def _fail_start(self, run: _Run, reason: str) -> None:
        """A launch that could not happen: give everything back and requeue (reported as JobStopped
        at the next poll, so the policy places it again)."""
        log.warning("job %s: %s", run.job_id, reason)
        self._teardown(run, kill=True)
        self.store.update_job(run.job_id, state="queued")
        self.store.event(run.job_id, "start_failed", reason)
        self.q.put(("stopped", (run.job_id, reason), None, time.perf_counter()))

    def _teardown(self, run: _Run, *, kill: bool, reusable: dict | None = None) -> None:
        with self._wlock:
            for ref in [r for r, v in self._waits.items() if v[1] == run.run_id]:
                del self._waits[ref]
        self.stats.forget(run.run_id)
        for tp, w in zip(run.placements, run.workers):
            if kill:
                self.workers.kill(w)
            else:
                self.workers.release(w, tp.node, (reusable or {}).get(w, True))
        self._release(run)              # its group, once Ray has the resources back (shares.py)
        for tp in run.placements:
            self.state.give(tp.node, run.tasks[tp.task].vector, tp.gpu_ids)
        self.runs.pop(run.job_id, None)
        self.store.clear_allocation(run.job_id)
        self._sync_shares(self._run_gpus(run.placements))     # the runs left on its GPUs grow back

    def _remove_pg_named(self, name: str) -> None:
        from ray.util.placement_group import get_placement_group, remove_placement_group
        try:
            remove_placement_group(get_placement_group(name))
        except Exception:
            pass

    def _stop_run(self, job_id: str, why: str, *, kill: bool = False) -> dict:
        """Checkpoint at the next mini-batch boundary, stop the ranks, free the GPUs. A program
        that runs its own loop (it reported progress but never entered ctx.steps) cannot stop
        there: it is stopped at once instead of after `stop_timeout_s`. Returns {clean,
        lost_steps, detail}: whether it stopped at a checkpoint, and the steps it loses if not."""
        run = self.runs.get(job_id)
        if run is None:
            return {"clean": True, "lost_steps": 0, "detail": ""}
        ray = self.ray
        t0 = time.time()
        if not self._finish_starting(run):    # (stopped while its ranks were starting)
            kill = True
        hs = [self.handles.get(w) for w in run.workers]
        reusable, signal_stop = {}, None
        spec = self.specs.get(job_id)
        grace = min(spec.grace_s, self.max_grace_s) if spec is not None and spec.command else None
        own_loop = bool(grace is None and not kill and hs and hs[0] is not None and self._own_loop(hs[0]))
        if own_loop:
            self.stats.drain(run)             # its last reports, before its ranks go
            kill = True
        if not kill and all(h is not None for h in hs):
            try:
                wait_s = self.stop_timeout_s if grace is None else grace + 10  # SIGKILL at grace
                ray.get([h.stop.remote(run.run_id, grace or 0.0) for h in hs], timeout=10)
                res = ray.get([h.wait.remote(run.run_id, wait_s) for h in hs], timeout=wait_s + 10)
                if any(r is None for r in res):
                    kill = True
                else:
                    reusable = {w: r.get("reusable", True) for w, r in zip(run.workers, res)}
                    if grace is not None:
                        signal_stop = record_signal_stop(self.store, job_id, res, grace)
            except Exception:
                kill = True
        if not kill:
            self.stats.drain(run)
        self._teardown(run, kill=kill, reusable=reusable)
        out = {"clean": not kill, "lost_steps": 0, "detail": ""}
        if signal_stop is not None:               # a command job: what the script's progress says
            out.update(lost_steps=signal_stop["lost_steps"] or 0, signal=True, detail=signal_stop["detail"])
        if kill:
            if not own_loop:
                self.stats.from_log(job_id)   # what rank 0 logged before it was stopped
            step = int(self.store.job(job_id)["step"] or 0)
            ck = max((c["step"] for c in self.store.checkpoints(job_id)), default=0)
            out["lost_steps"] = max(step - ck, 0)
            cause = ("its program runs its own loop (it never calls ctx.steps), so it cannot stop "
                     "at a mini-batch boundary; its ranks were stopped at once" if own_loop else
                     "its ranks did not stop at a mini-batch boundary in time and were stopped")
            out["detail"] = (f"{cause}; {out['lost_steps']} steps since its last checkpoint "
                             f"(step {ck}) are lost, it resumes from step {ck}")
            self.store.event(job_id, "stop_unclean", out["detail"])
        self.store.event(job_id, "stopped", why)
        self.store.event(job_id, "stop_s", f"{time.time() - t0:.3f}")   # a switch's cost (progress.py)
        return out

    def _own_loop(self, h) -> bool:
        """Rank 0 of a run reports progress but never entered ctx.steps: its program runs its
        own loop and cannot stop at a mini-batch boundary (a program still loading has not
        reported yet: it gets the usual wait)."""
        try:
            st = self.ray.get(h.status.remote(), timeout=5)
        except Exception:
            return False
        return st.get("state") == "running" and st.get("reported") and not st.get("in_steps")

    # -- a rank ends, the gang breaks --------------------------------------------------------
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
                self.stats.drain(run)
                self._teardown(run, kill=False, reusable={w: run.results[tp.task].get("reusable", True)
                                                          for tp, w in zip(run.placements, run.workers)})
                self.store.update_job(job_id, state="done", finish_time=time.time())
                self.store.event(job_id, "finished", run_id)
                clean_checkpoints(self.ckpt_root / job_id, keep=1)     # the final one stays
                self.stats.prune_checkpoints(job_id)
                out.append(ev.JobFinish(self._now, job_id))
            else:                                    # stopped without being asked: requeue
                self.stats.drain(run)
                self._teardown(run, kill=False)
                self.store.update_job(job_id, state="queued")
                out.append(ev.JobStopped(self._now, job_id, "ranks stopped"))

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
            self.stats.drain(run)                    # rank 0's worker lives: ask it
        else:
            self.stats.from_log(job_id)
        self._teardown(run, kill=True)
        self.store.event(job_id, "gang_broken", reason[:2000])
        if res["state"] == "failed":
            self.failures[job_id] = self.failures.get(job_id, 0) + 1
            # a program that cannot be loaded would fail the same way again: not retried
            if res.get("permanent") or self.failures[job_id] >= self.max_failures:
                tb = res.get("traceback") or ""
                head = f"rank {rank} on {self.nodes[node].name} failed first: {res.get('error', '')}"
                self.store.update_job(job_id, state="failed", finish_time=time.time(), failed_rank=rank,
                                      error=(head + "\n" + tb[-(3900 - len(head)):]) if tb else head)
                out.append(ev.JobFinish(self._now, job_id))
                return
        self.store.update_job(job_id, state="queued")
        out.append(ev.JobStopped(self._now, job_id, reason[:200]))

    # -- a node goes or comes back (the node monitor's report) -------------------------------
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
                self.workers.kill(w)
            out.append(ev.NodeDown(self._now, node))
        else:
            n.ray_id = ray_id
            self._check_slots(node)                   # back with its per-GPU slots? (shares.py)
            self.suspect_until[node] = 0
            out.append(ev.NodeUp(self._now, node))
