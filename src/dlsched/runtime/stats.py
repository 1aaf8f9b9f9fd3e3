"""Per-step statistics and checkpoints, from rank 0 to the store.

Rank 0 keeps each step record (and each checkpoint it wrote) until the server acknowledges
having stored it; it also appends each record to `stats.jsonl` beside the checkpoints. The
scheduler thread drains running jobs every `stats_every_s` without blocking (`collect`: the calls
issued last time are read if done, new ones issued), a run that ends is drained at once (`drain`),
and a run whose rank 0 cannot be asked (its worker or node died, or the server restarted) is read
from the stats log instead (`from_log`).

`StepStats` owns the drains in flight and the acknowledgement per run id; it reads the worker
handles (the pool's `handles`). Scheduler thread only.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from dlsched.core.errors import DlschedError
from dlsched.runtime.sdk import STATS_LOG

log = logging.getLogger("dlsched.runtime")


class StepStats:
    def __init__(self, ray, store, handles: dict[str, object], ckpt_root: Path):
        self.ray, self.store, self.handles, self.ckpt_root = ray, store, handles, ckpt_root
        self.last = 0.0                          # time.monotonic() of the last collect
        self.refs: list = []                     # (job id, run id, drain call in flight)
        self.acked: dict[str, int] = {}          # run id -> highest record seq stored

    def forget(self, run_id: str) -> None:
        """A run is over: its drains in flight and its acknowledgement go."""
        self.refs = [x for x in self.refs if x[1] != run_id]
        self.acked.pop(run_id, None)

    def drain(self, run) -> bool:
        """Store every step record and checkpoint rank 0 of `run` holds. False when rank 0 could
        not be asked (its worker died): the records it had are then read from its stats log."""
        mine = [ref for j, r, ref in self.refs if r == run.run_id]
        if mine:                                     # drains in flight hold records too
            self.refs = [x for x in self.refs if x[1] != run.run_id]
            for ref in mine:
                try:
                    self.save(run.job_id, run.run_id, *self.ray.get(ref, timeout=10))
                except Exception:
                    pass
        h = self.handles.get(run.workers[0]) if run.workers else None
        try:
            if h is None:
                raise DlschedError("rank 0 has no worker")
            stats, ckpts = self.ray.get(h.drain.remote(self.acked.get(run.run_id, 0)), timeout=10)
        except Exception as e:
            log.warning("job %s: %s: step records not drained (%s); reading the stats log", run.job_id,
                        run.run_id, type(e).__name__)
            self.from_log(run.job_id)
            return False
        self.save(run.job_id, run.run_id, stats, ckpts)
        return True

    def save(self, job_id: str, run_id: str, stats: list, ckpts: list) -> None:
        # records are acknowledged to the run that produced them: a drain answered after its
        # run ended must not move the next run's acknowledgement (its seq restarts at 1)
        if stats or ckpts:
            seq = max(r["seq"] for r in stats + ckpts)
            self.acked[run_id] = max(self.acked.get(run_id, 0), seq)
        self.store.add_stats(job_id, stats)
        for c in ckpts:
            self.store.add_checkpoint(job_id, c["step"], c["path"], c["time"])
        if ckpts:
            self.prune_checkpoints(job_id)

    def prune_checkpoints(self, job_id: str) -> None:
        gone = [c["path"] for c in self.store.checkpoints(job_id) if not Path(c["path"]).exists()]
        self.store.drop_checkpoints(job_id, gone)

    def collect(self, runs: dict) -> None:
        """Drain rank 0's step records of `runs` (job id -> run) without blocking the scheduler
        thread: the calls issued last time are read if they are done, and new ones issued."""
        self.last = time.monotonic()
        if self.refs:
            refs = [ref for _, _, ref in self.refs]
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
            ready = set(ready)
            keep = []
            for job_id, run_id, ref in self.refs:
                if ref in ready:
                    try:
                        stats, ckpts = self.ray.get(ref)
                    except Exception:
                        continue
                    self.save(job_id, run_id, stats, ckpts)
                else:
                    keep.append((job_id, run_id, ref))
            self.refs = keep
        busy = {r for _, r, _ in self.refs}
        for r in runs.values():
            if r.run_id not in busy and r.workers and r.workers[0] in self.handles:
                ref = self.handles[r.workers[0]].drain.remote(self.acked.get(r.run_id, 0))
                self.refs.append((r.job_id, r.run_id, ref))

    def from_log(self, job_id: str) -> None:
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
