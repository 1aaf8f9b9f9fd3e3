"""SQLite store of the runtime: jobs, allocations, checkpoints, events and per-step statistics.

The server writes here as things happen (one connection, serialised by a lock, WAL journal), so a
server killed with SIGKILL restarts from this file: every job it had accepted is here with its
state, and the allocations name the rank workers it was running on.

Every change of a job's state goes through `add_job` and `update_job`, whichever thread makes it
(the API's, the scheduler's, recovery's): `on_state`, when set, sees each state a job enters (the
server's metrics count them, dlsched.runtime.metrics).
"""
from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS jobs (
  job_id TEXT PRIMARY KEY, seq INTEGER, name TEXT, spec TEXT, state TEXT, submit_time REAL,
  start_time REAL, finish_time REAL, attempts INTEGER DEFAULT 0, step INTEGER DEFAULT 0,
  held INTEGER DEFAULT 0, error TEXT DEFAULT '', workers INTEGER, failed_rank INTEGER);
CREATE TABLE IF NOT EXISTS allocations (
  job_id TEXT, rank INTEGER, node TEXT, gpu_ids TEXT, worker TEXT, run_id TEXT,
  PRIMARY KEY (job_id, rank));
CREATE TABLE IF NOT EXISTS checkpoints (job_id TEXT, step INTEGER, path TEXT, time REAL,
  PRIMARY KEY (job_id, step));
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL, job_id TEXT,
  kind TEXT, detail TEXT);
CREATE TABLE IF NOT EXISTS stats (job_id TEXT, step INTEGER, loss REAL, accuracy REAL,
  step_s REAL, epoch INTEGER, time REAL, extra TEXT, PRIMARY KEY (job_id, step));
CREATE TABLE IF NOT EXISTS schedlog (id INTEGER PRIMARY KEY AUTOINCREMENT, time_s REAL, kind TEXT,
  job_id TEXT, detail TEXT, placements TEXT, cost TEXT, packed INTEGER);
"""

# Job states the store knows (docs: `dlsched jobs`):
#   queued     waits to be placed: never started, preempted by the policy, or resumed
#   starting   placed; its ranks are starting (a cold worker imports torch: seconds)
#   running    every rank started
#   suspended  stopped by a user (`job suspend`) until resumed; `error` says by whom and when
#   held       stopped by the system until resumed: the policy raised about it (`error`: why)
ACTIVE = ("queued", "starting", "running", "suspended", "held")
FINAL = ("done", "failed", "cancelled", "rejected")


class Store:
    def __init__(self, path: str | Path):
        self.path = str(path)
        self._lock = threading.RLock()
        self.db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.on_state: Callable[[str], None] | None = None    # sees the state each job enters
        with self._lock:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
            cols = {r[1] for r in self.db.execute("PRAGMA table_info(jobs)")}
            if "failed_rank" not in cols:        # a store written before the column existed
                self.db.execute("ALTER TABLE jobs ADD COLUMN failed_rank INTEGER")
            # a store written before `suspended` meant a user's suspend: a preempted job waiting
            # was `suspended`, a user's suspend `held` with no reason
            if self.meta("states") != "2":
                self.db.execute("UPDATE jobs SET state='queued' WHERE state='suspended' AND held=0")
                self.db.execute("UPDATE jobs SET state='suspended', error='suspended by a user' "
                                "WHERE state='held' AND held=1 AND (error IS NULL OR error='')")
                self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('states', '2')")

    def close(self) -> None:
        with self._lock:
            self.db.close()

    def _x(self, sql: str, args=()) -> list[sqlite3.Row]:
        with self._lock:
            return self.db.execute(sql, args).fetchall()

    # -- meta ------------------------------------------------------------------------------
    def meta(self, key: str, default: str | None = None) -> str | None:
        r = self._x("SELECT value FROM meta WHERE key=?", (key,))
        return r[0]["value"] if r else default

    def set_meta(self, key: str, value: str) -> None:
        self._x("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # -- jobs ------------------------------------------------------------------------------
    def add_job(self, spec: dict, submit_time: float) -> str:
        with self._lock:
            seq = (self._x("SELECT COALESCE(MAX(seq), 0) AS m FROM jobs")[0]["m"]) + 1
            job_id = f"j{seq:04d}"
            self._x("INSERT INTO jobs (job_id, seq, name, spec, state, submit_time, workers) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (job_id, seq, spec["name"], json.dumps(spec), "queued", submit_time, spec["workers"]))
            self.event(job_id, "submitted", spec["name"])
        if self.on_state is not None:
            self.on_state("queued")
        return job_id

    def update_job(self, job_id: str, **cols) -> None:
        if not cols:
            return
        sets = ", ".join(f"{k}=?" for k in cols)
        watch = "state" in cols and self.on_state is not None
        with self._lock:
            old = self._x("SELECT state FROM jobs WHERE job_id=?", (job_id,)) if watch else None
            self._x(f"UPDATE jobs SET {sets} WHERE job_id=?", (*cols.values(), job_id))
        if old and old[0]["state"] != cols["state"]:        # a state entered, not one rewritten
            self.on_state(cols["state"])

    def job(self, job_id: str) -> dict | None:
        r = self._x("SELECT * FROM jobs WHERE job_id=?", (job_id,))
        return _job(r[0]) if r else None

    def jobs(self, states: tuple[str, ...] | None = None) -> list[dict]:
        if states:
            q = ",".join("?" * len(states))
            rows = self._x(f"SELECT * FROM jobs WHERE state IN ({q}) ORDER BY seq", states)
        else:
            rows = self._x("SELECT * FROM jobs ORDER BY seq")
        return [_job(r) for r in rows]

    def state_counts(self) -> dict[str, int]:
        """How many jobs are in each state (states no job is in are absent)."""
        return {r["state"]: r["n"] for r in self._x("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")}

    # -- allocations -------------------------------------------------------------------------
    def set_allocation(self, job_id: str, ranks: list[dict]) -> None:
        with self._lock:
            self.db.execute("BEGIN")
            try:
                self.db.execute("DELETE FROM allocations WHERE job_id=?", (job_id,))
                for r in ranks:
                    self.db.execute("INSERT INTO allocations VALUES (?,?,?,?,?,?)",
                                    (job_id, r["rank"], r["node"], json.dumps(list(r["gpu_ids"])),
                                     r["worker"], r["run_id"]))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def clear_allocation(self, job_id: str) -> None:
        self._x("DELETE FROM allocations WHERE job_id=?", (job_id,))

    def allocation(self, job_id: str) -> list[dict]:
        rows = self._x("SELECT * FROM allocations WHERE job_id=? ORDER BY rank", (job_id,))
        return [{**dict(r), "gpu_ids": json.loads(r["gpu_ids"])} for r in rows]

    def allocations_all(self) -> dict[str, list[dict]]:
        """{job: its allocation} of every job that holds one."""
        out: dict[str, list[dict]] = {}
        for r in self._x("SELECT * FROM allocations ORDER BY job_id, rank"):
            out.setdefault(r["job_id"], []).append({**dict(r), "gpu_ids": json.loads(r["gpu_ids"])})
        return out

    # -- checkpoints, events, stats -----------------------------------------------------------
    def add_checkpoint(self, job_id: str, step: int, path: str, t: float) -> None:
        self._x("INSERT OR REPLACE INTO checkpoints VALUES (?,?,?,?)", (job_id, step, path, t))

    def checkpoints(self, job_id: str) -> list[dict]:
        return [dict(r) for r in self._x("SELECT * FROM checkpoints WHERE job_id=? ORDER BY step", (job_id,))]

    def drop_checkpoints(self, job_id: str, paths: list[str]) -> None:
        for p in paths:
            self._x("DELETE FROM checkpoints WHERE job_id=? AND path=?", (job_id, p))

    def event(self, job_id: str, kind: str, detail: str = "", t: float | None = None) -> None:
        self._x("INSERT INTO events (time, job_id, kind, detail) VALUES (?,?,?,?)",
                (time.time() if t is None else t, job_id, kind, detail))

    def events(self, job_id: str | None = None, limit: int = 1000) -> list[dict]:
        """The newest `limit` events (of one job, or all), oldest first."""
        if job_id:
            rows = self._x("SELECT * FROM events WHERE job_id=? ORDER BY id DESC LIMIT ?", (job_id, limit))
        else:
            rows = self._x("SELECT * FROM events ORDER BY id DESC LIMIT ?", (limit,))
        return [dict(r) for r in reversed(rows)]

    # -- the scheduler's typed event log (dlsched.scheduler.eventlog), kept across restarts --------
    def log_record(self, rec) -> None:
        c = rec.cost
        cost = None if c is None else json.dumps(dataclasses.asdict(c) if dataclasses.is_dataclass(c) else repr(c))
        self._x("INSERT INTO schedlog (time_s, kind, job_id, detail, placements, cost, packed) VALUES (?,?,?,?,?,?,?)",
                (rec.time_s, rec.kind, rec.job_id,
                 f"{rec.stats[0]:.6g} {rec.stats[1]}" if rec.kind == "round" else rec.detail,  # kept as text
                 json.dumps([[tp.task, tp.node, list(tp.gpu_ids)] for tp in rec.placements]), cost, int(rec.packed)))

    def schedlog(self, since_id: int = 0, limit: int = 100000) -> list[dict]:
        rows = self._x("SELECT * FROM schedlog WHERE id>? ORDER BY id LIMIT ?", (since_id, limit))
        out = []
        for r in rows:
            d = dict(r)
            d["placements"] = json.loads(d["placements"] or "[]")
            d["cost"] = json.loads(d["cost"]) if d["cost"] else None
            d["packed"] = bool(d["packed"])
            out.append(d)
        return out

    def schedlog_kinds(self, kinds: tuple[str, ...]) -> list[dict]:
        """The log's records of these kinds, oldest first, with their placements (the rows the
        web view's timeline reads: dlsched.web.placements)."""
        q = ",".join("?" * len(kinds))
        rows = self._x(f"SELECT time_s, kind, job_id, detail, placements FROM schedlog WHERE kind IN ({q}) "
                       "ORDER BY id", kinds)
        return [{**dict(r), "placements": json.loads(r["placements"] or "[]")} for r in rows]

    def schedlog_all(self, page: int = 100000) -> list[dict]:
        """The whole log, oldest first, read a page at a time."""
        out: list[dict] = []
        while True:
            part = self.schedlog(since_id=out[-1]["id"] if out else 0, limit=page)
            out += part
            if len(part) < page:
                return out

    def add_stats(self, job_id: str, recs: list[dict]) -> None:
        if not recs:
            return
        rows = []
        for r in recs:
            extra = {k: v for k, v in r.items()
                     if k not in ("step", "loss", "accuracy", "step_s", "epoch", "time", "seq")}
            rows.append((job_id, r["step"], r.get("loss"), r.get("accuracy"), r.get("step_s"),
                         r.get("epoch"), r.get("time"), json.dumps(extra)))
        with self._lock:
            # a step re-run after a restart from an older checkpoint replaces the earlier record
            self.db.executemany("INSERT OR REPLACE INTO stats VALUES (?,?,?,?,?,?,?,?)", rows)
            self.db.execute("UPDATE jobs SET step=MAX(step, ?) WHERE job_id=?",
                            (max(r["step"] for r in recs) + 1, job_id))

    def first_step_time(self, job_id: str, after: float, before: float | None = None) -> float | None:
        """When the job's first step record at or after `after` (and not after `before`) was made."""
        row = self._x("SELECT MIN(time) FROM stats WHERE job_id=? AND time>=? AND time<=?",
                      (job_id, after, float("inf") if before is None else before))
        return row[0][0] if row else None

    def stats(self, job_id: str, since_step: int = -1, limit: int = 100000) -> list[dict]:
        rows = self._x("SELECT * FROM stats WHERE job_id=? AND step>? ORDER BY step LIMIT ?",
                       (job_id, since_step, limit))
        out = []
        for r in rows:
            d = dict(r)
            d.update(json.loads(d.pop("extra") or "{}"))
            out.append(d)
        return out


def _job(r: sqlite3.Row) -> dict:
    d = dict(r)
    d["spec"] = json.loads(d["spec"])
    d["held"] = bool(d["held"])
    return d
