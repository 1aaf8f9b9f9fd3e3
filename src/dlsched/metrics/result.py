"""Metrics of a run.

Per job: submit, first start (all tasks placed), finish, waiting time (first start - submit),
starting time (first progress - first start: on the runtime the ranks' start and the program's
loading, in the simulator the start cost; wait + starting = time to first progress), JCT (finish - submit), run time, preemptions, migrations, deadline met, GPU-seconds held, bytes
over NICs and across racks, time of first progress.

Per run (summary.json): jobs, finished, rejected, unfinished, makespan (last finish - first
submit), mean / median / p95 / p99 JCT, mean wait, GPU utilisation (time-average of allocated
GPUs over the makespan, divided by the cluster's GPUs) and effective utilisation (GPUs of jobs
making progress), NIC and cross-rack bytes, scheduling time (wall clock in policy code), and
partial_hold_gpu_s: GPU-seconds held by gang jobs still waiting for the rest of their workers.

Switching (Gandiva's mechanisms, and every preemptive policy): time to first progress per job
(first_progress_s - submit; mean_ttfp_s, median_ttfp_s, p95_ttfp_s over the jobs that made any
progress: early feedback for hyper-parameter search), suspensions, resumes and migrations, and
the time lost to them: switch_lost_s (seconds jobs held resources without progress while
restarting), switch_lost_gpu_s (the same in GPU-seconds) and switch_lost_frac (switch_lost_gpu_s
over the GPU-seconds held).
"""
from __future__ import annotations

import gc
import json
import math
from array import array
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SUMMARY_KEYS = ("jobs", "mean_jct_s", "median_jct_s", "p95_jct_s", "p99_jct_s", "makespan_s",
                "mean_wait_s", "gpu_util", "nic_bytes", "cross_rack_bytes", "sched_time_s",
                "partial_hold_gpu_s")


@dataclass
class SimResult:
    policy: str
    cluster: str
    workload: str
    total_gpus: int
    jobs: Any                 # pandas.DataFrame, one row per job
    summary: dict
    timeline: Any             # pandas.DataFrame: time_s, allocated_gpus, effective_gpus, partial_gpus, running_jobs, queued_jobs
    rounds: Any = None        # pandas.DataFrame: time_s, wall_s (scheduling time), queued_jobs per round
    # the engine's event log: (time_s, kind, job_id, detail); a list, or the simulator's EngineLog
    # (a sequence of those tuples, kept in columns, equal to the list of them)
    events: Any = field(default_factory=list)
    # the scheduler's log, less its round records; a list of LogRecords or a CompactLog
    decisions: Any = field(default_factory=list)
    nodes: list = field(default_factory=list)       # the cluster's nodes: name, rack, gpu_type, gpus
    # with a tenancy: time_s, queue, used_gpus, entitled_gpus (allocation against entitlement)
    queue_series: Any = None

    def save(self, out_dir: str | Path, provenance: dict | None = None) -> Path:
        """jobs.parquet, timeline.parquet, rounds.parquet, events.parquet, log.parquet (the
        scheduler's decisions with their placements, for `dlsched view`), cluster.json (its nodes,
        when known), queues.parquet (with a tenancy: each queue's allocation against its
        entitlement over time) and summary.json in out_dir (each written to a temporary name and renamed, so
        none is left half-written); summary.json also records `provenance` when given (how the
        run was made: see the CLI)."""
        import pandas as pd
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        _atomic(out / "jobs.parquet", lambda p: self.jobs.to_parquet(p, index=False))
        _atomic(out / "timeline.parquet", lambda p: self.timeline.to_parquet(p, index=False))
        _atomic(out / "rounds.parquet", lambda p: self.rounds.to_parquet(p, index=False))
        cols = ["time_s", "kind", "job_id", "detail"]
        # the simulator's EngineLog hands over its columns (no tuple per record); an empty log
        # takes the other path, whose empty columns are of dtype object as before
        ev = (pd.DataFrame(self.events.columns(), columns=cols)
              if callable(getattr(self.events, "columns", None)) and len(self.events)
              else pd.DataFrame(list(self.events), columns=cols))
        _atomic(out / "events.parquet", lambda p: ev.to_parquet(p, index=False))
        _atomic(out / "log.parquet", lambda p: decisions_frame(self.decisions).to_parquet(p, index=False))
        if self.nodes:
            write_json(out / "cluster.json", {"name": self.cluster, "nodes": self.nodes})
        if self.queue_series is not None:
            _atomic(out / "queues.parquet", lambda p: self.queue_series.to_parquet(p, index=False))
        write_json(out / "summary.json", {**self.summary, **({"provenance": provenance} if provenance else {})})
        return out


def decisions_frame(log):
    """The scheduler's typed log (less its `stats` records, whose counters jobs.parquet has) as a
    table: time_s, kind, job_id, detail, placements (JSON: [[task, node, [GPU ids]], ...]),
    packed; the columns of the runtime store's `schedlog`."""
    import pandas as pd
    if getattr(log, "compact", False):
        t, kind, job, detail, placed, packed = log.placement_columns(drop="stats")
    else:
        recs = [r for r in log if r.kind != "stats"]
        t, kind, job = [r.time_s for r in recs], [r.kind for r in recs], [r.job_id for r in recs]
        detail = [r.detail or "" for r in recs]
        placed, packed = [r.placements for r in recs], [bool(r.packed) for r in recs]
    dumps = json.dumps
    # most records place nothing (arrivals, finishes, rounds): their "[]" is one shared string
    pjson = [dumps([[tp.task, tp.node, list(tp.gpu_ids)] for tp in p]) if p else "[]" for p in placed]
    cols = ["time_s", "kind", "job_id", "detail", "placements", "packed"]
    if not t:
        return pd.DataFrame([], columns=cols)      # (empty columns given as lists would be float64)
    return pd.DataFrame(dict(zip(cols, (t, kind, job, detail, pjson, packed))), columns=cols)


def cluster_nodes(cluster) -> list[dict]:
    """The nodes of a Cluster as the web view draws them: name, rack (its name), GPU type, GPUs."""
    return [{"name": n.name, "rack": cluster.rack_names[n.rack], "gpu_type": n.gpu_type, "gpus": int(n.gpus)}
            for n in cluster.nodes]


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def write_json(path: Path, data: dict) -> None:
    """`data` as indented JSON in `path`, written to a temporary name and renamed."""
    _atomic(path, lambda p: Path(p).write_text(json.dumps(data, indent=2) + "\n"))


def _integral(t: np.ndarray, v: np.ndarray, t0: float, t1: float) -> float:
    """Integral over [t0, t1] of the step function v (value v[i] from t[i] to t[i+1])."""
    if len(t) == 0 or t1 <= t0:
        return 0.0
    ends = np.append(t[1:], t1)
    a = np.clip(t, t0, t1)
    b = np.clip(ends, t0, t1)
    return float(np.sum(v * (b - a)))


def _nan(x) -> float:
    return float("nan") if x is None else float(x)


def _clean(x):
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, (np.floating,)):
        return _clean(float(x))
    if isinstance(x, np.integer):
        return int(x)
    return x


class _Job:
    """A job as the event log tells it (the JobRecord's fields the metrics need)."""
    __slots__ = ("spec", "ntasks", "state", "placed", "done", "first_start_s", "finish_s", "preemptions",
                 "migrations", "stats", "held_by")

    def __init__(self, spec, ntasks: int):
        self.spec, self.ntasks, self.state = spec, ntasks, "pending"
        # task indices placed now, and tasks of a bag that ended: rebound, never mutated, so
        # that every job can start with the one empty frozenset (a 1M-job log replays 1M jobs)
        self.placed: frozenset | set = _NONE
        self.done: frozenset | set = _NONE
        self.first_start_s = self.finish_s = None
        self.preemptions = self.migrations = 0
        self.stats: dict = _NO_STATS
        self.held_by = ""


# A job's state in the jobs table, in the words `dlsched jobs` uses on the runtime (queued,
# running, suspended by a user, held by the system, done, cancelled, rejected; `partial`: a
# gang job placed in part, in the simulator): the replay's own state names map to them here
_TABLE_STATE = {"pending": "queued", "suspended": "queued"}


def table_state(j: "_Job") -> str:
    if j.state == "held" and j.held_by == "operator":
        return "suspended"
    return _TABLE_STATE.get(j.state, j.state)


_STARTS = frozenset(("launch", "resume", "migrate", "resize"))
_NONE: frozenset = frozenset()
_NO_STATS: dict = {}


def jobs_from_log(log) -> dict[str, _Job]:
    """Replay the typed event log (dlsched.scheduler.eventlog) into per-job facts: the same
    state machine as the Scheduler's records, so a log from either backend gives the metrics.
    (Hot: one pass over every record of a run; the common kinds are tested first.)"""
    jobs: dict[str, _Job] = {}
    get = jobs.get
    # a CompactLog's rows: the fields read here, without a LogRecord per record
    rows = log.rows(drop="round") if hasattr(log, "rows") else (
        (r[0], r[1], r[2], r.detail, r.placements, r.spec, r.stats) for r in log)
    for t, kind, job_id, detail, placements, spec, stats in rows:
        if kind == "arrival":
            jobs[job_id] = _Job(spec, len(spec.tasks))
            continue
        j = get(job_id)
        if j is None:
            continue                                 # node events
        if kind in _STARTS:
            tasks = {tp.task for tp in placements}
            if kind == "launch" or kind == "resume":
                j.placed = j.placed | tasks
            elif kind == "migrate":
                j.placed = tasks
                j.migrations += 1
            else:                                    # resize: a new task list, all placed
                j.placed, j.ntasks = tasks, len(tasks)
            # whole: every task placed or done (a finished task is never placed)
            if len(j.placed) + len(j.done) >= j.ntasks or j.spec.kind == "tasks":
                if j.first_start_s is None:
                    j.first_start_s = t
                j.state = "running"
            else:
                j.state = "partial"
        elif kind == "finish":
            j.placed = _NONE
            j.state = "done"
            j.finish_s = t
        elif kind == "stats":
            j.stats = stats or {}
        elif kind == "suspend":
            j.placed = _NONE
            j.state = "suspended"
            j.preemptions += 1
        elif kind == "stopped":
            j.placed = _NONE
            if j.state != "suspended":
                j.state = "suspended"
                j.preemptions += 1
        elif kind == "held":
            if j.placed:
                j.preemptions += 1
            j.placed = _NONE
            j.state = "held"
            j.held_by = detail
        elif kind == "released":
            if j.state == "held":
                j.state = "suspended" if j.first_start_s is not None else "pending"
        elif kind == "task_finish":
            k = int(detail)
            j.placed = j.placed - {k}
            j.done = j.done | {k}
        elif kind == "rejected":
            j.state = "rejected"
        elif kind == "cancel":                       # the runtime: a user ended it
            if j.placed:
                j.preemptions += 1
            j.placed = _NONE
            j.state = "cancelled"
    return jobs


def _round(rec) -> tuple[float, int]:
    """(wall seconds, queued jobs) of a round record: its stats, or its detail as a store keeps
    it ("<wall> <queued>")."""
    if rec.stats is not None:
        return float(rec.stats[0]), int(rec.stats[1])
    wall, queued = (rec.detail or "0 0").split()
    return float(wall), int(queued)


def _rounds_table(log):
    """The rounds table (time_s, wall_s, queued_jobs) of a log's round records: from a
    CompactLog's columns where it can (`round_columns`), else record by record."""
    import pandas as pd
    cols = log.round_columns() if hasattr(log, "round_columns") else None
    if cols is not None:
        return pd.DataFrame({"time_s": cols[0], "wall_s": cols[1], "queued_jobs": cols[2]})
    recs = log.of_kind("round") if hasattr(log, "of_kind") else (r for r in log if r[1] == "round")
    return pd.DataFrame([(r[0], *_round(r)) for r in recs], columns=["time_s", "wall_s", "queued_jobs"])


def build_result(scheduler, backend, *, policy: str, cluster_name: str, workload_name: str,
                 release: bool = False) -> SimResult:
    """The run's metrics, from the scheduler's event log (with its round records) with each
    job's final counters appended (`stats` records), and the utilisation samples. `release`:
    the scheduler and backend are not used after this (dlsched.simulate's case): their per-job
    state and the scheduler's log are let go as soon as the result has what it needs from
    them, so that a 1M-job run does not hold both at its peak."""
    # A result allocates a few containers per job while the whole run stays alive: at the
    # default gen-0 threshold the collector re-scans that live set hundreds of times (about a
    # third of the result's time on the whole Philly trace). Collect less often meanwhile.
    saved = gc.get_threshold()
    gc.set_threshold(max(saved[0], 50_000), *saved[1:])
    try:
        return _build_result(scheduler, backend, policy=policy, cluster_name=cluster_name,
                             workload_name=workload_name, release=release)
    finally:
        gc.set_threshold(*saved)


def _build_result(scheduler, backend, *, policy: str, cluster_name: str, workload_name: str,
                  release: bool) -> SimResult:
    from dlsched.scheduler.eventlog import CompactLog
    now = backend.now()
    # The logs are kept in columns (CompactLog, the backend's EngineLog) and read as records:
    # a 1M-job run writes about 4M of them, and a list of tuples would cost 4x the memory.
    # a backend that keeps finished jobs' stats in rows hands those rows on (final_stats)
    final = getattr(backend, "final_stats", backend.job_stats)
    stats = CompactLog.of_stats(now, ((j, final(j)) for j in scheduler.jobs))
    eff = backend.effective_gpu_s() if hasattr(backend, "effective_gpu_s") else None
    sched_log = scheduler.log if getattr(scheduler.log, "compact", False) else CompactLog(scheduler.log)
    timeline = scheduler.timeline
    # The rounds table and the decisions (the log less its round records, with the stats
    # records) straight from the scheduler's log: one copy of its columns, not two.
    rounds = _rounds_table(sched_log)
    tenancy = getattr(scheduler, "tenancy", None)       # per-queue accounts (dlsched.tenancy)
    tsum = tenancy.accounts.summary(scheduler.jobs.values(), now) if tenancy is not None else None
    decisions = sched_log.joined(stats, drop="round")
    del stats, sched_log
    if release:
        # what the result needs is in the decisions, the rounds, eff and the timeline now
        runs = getattr(backend, "runs", None)
        if isinstance(runs, dict):
            runs.clear()
        scheduler.jobs.clear()
        scheduler.log = CompactLog()
    res = result_from_log(decisions, timeline, total_gpus=backend.cluster.total_gpus,
                          effective_gpu_s=eff, engine_log=backend.log, policy=policy,
                          cluster_name=cluster_name, workload_name=workload_name, rounds=rounds)
    res.nodes = cluster_nodes(backend.cluster)
    if len(backend.cluster.gpu_types) > 1 and len(res.jobs):
        from dlsched.metrics.gputypes import types_run
        ran = types_run(decisions, backend.cluster)
        res.jobs["gpu_type_run"] = [ran.get(j, "") for j in res.jobs["job_id"]]
    if tsum is not None:
        import pandas as pd
        res.summary.update(tsum, tenancy=tenancy.mode.name)
        res.queue_series = pd.DataFrame(tenancy.accounts.series,
                                        columns=["time_s", "queue", "used_gpus", "entitled_gpus"])
        if len(res.jobs):
            rho = tenancy.accounts.rho
            res.jobs["ftf_rho"] = [rho.get(j, float("nan")) for j in res.jobs["job_id"]]
    return res


def result_from_log(log, timeline, *, total_gpus: int, effective_gpu_s: float | None = None,
                    engine_log=(), policy: str = "", cluster_name: str = "", workload_name: str = "",
                    rounds=None) -> SimResult:
    """Every metric of a run from its typed event log (dlsched.scheduler.eventlog), its
    utilisation samples (time, allocated, effective, partial GPUs, running, queued jobs); round
    times come from its `round` records. `effective_gpu_s`: the exact integral when the
    backend has it (the simulator), else the samples' integral. `rounds`: the rounds table
    already read (`_rounds_table`), the log then holding no round records."""
    import pandas as pd

    if rounds is None:
        rounds_df = _rounds_table(log)
        # decisions: the log without its round records (their wall seconds are the one thing in
        # the log that is not a function of the seed; the rounds table keeps them)
        # a compact log stays compact (a sequence of records; it compares equal to a list of them)
        decisions = (log.joined(drop="round") if getattr(log, "compact", False)
                     else [r for r in log if r[1] != "round"])
    else:
        rounds_df = rounds
        decisions = log
    recs = jobs_from_log(log)
    n = len(recs)
    # column by column (a comprehension per column is several times cheaper than a row loop
    # appending to 26 columns); numbers in typed arrays rather than lists of boxed floats: a
    # 1M-job run's table is built with a tenth of the memory (the columns and dtypes are those
    # of lists of the same values)
    R = list(recs.values())
    specs = [r.spec for r in R]
    sts = [r.stats for r in R]
    nan = float("nan")
    submit = [s.submit_time_s for s in specs]
    fs = [nan if r.first_start_s is None else float(r.first_start_s) for r in R]
    fin = [nan if r.finish_s is None else float(r.finish_s) for r in R]
    fp = [_nan(st.get("first_progress_s")) for st in sts]

    def stat(key: str, sts: list = sts) -> array:
        return array("d", [float(st.get(key) or 0.0) for st in sts])

    cols: dict[str, Any] = {
        "job_id": [s.job_id for s in specs],
        "state": [table_state(r) for r in R],
        "submit_s": submit,
        "first_start_s": array("d", fs),
        "finish_s": array("d", fin),
        "wait_s": array("d", [a - b for a, b in zip(fs, submit)]),
        "starting_s": array("d", [a - b for a, b in zip(fp, fs)]),
        "jct_s": array("d", [a - b for a, b in zip(fin, submit)]),
        "run_s": array("d", [a - b for a, b in zip(fin, fs)]),
        "gpus": [s.gpus for s in specs],
        "workers": array("q", [len(s.tasks) for s in specs]),
        "model": [s.model for s in specs],
        "user": [s.user for s in specs],
        "queue": [s.queue or "default" for s in specs],
        "priority": [s.priority for s in specs],
        "preemptions": array("q", [r.preemptions for r in R]),
        "migrations": array("q", [r.migrations for r in R]),
        "deadline_s": array("d", [_nan(s.deadline_s) for s in specs]),
        "deadline_met": [None if s.deadline_s is None else bool(r.finish_s is not None and r.finish_s <= s.deadline_s)
                         for s, r in zip(specs, R)],
        "gpu_s": stat("gpu_s"),
        "nic_bytes": stat("nic_bytes"),
        "cross_rack_bytes": stat("cross_rack_bytes"),
        "first_progress_s": array("d", fp),
        "ttfp_s": array("d", [a - b for a, b in zip(fp, submit)]),
        "suspends": array("q", [int(st.get("suspends", r.preemptions) or 0) for st, r in zip(sts, R)]),
        "resumes": array("q", [int(st.get("resumes") or 0) for st in sts]),
        "switch_lost_s": stat("switch_lost_s"),
        "switch_lost_gpu_s": stat("switch_lost_gpu_s"),
    }
    from dlsched.metrics.recorded import recorded_columns   # only where a trace recorded times
    cols.update(recorded_columns(specs))
    del R, specs, sts, submit, fs, fin, fp
    del recs
    jobs = pd.DataFrame({k: (np.frombuffer(v, dtype=np.float64 if v.typecode == "d" else np.int64)
                             if isinstance(v, array) and n else (list(v) if isinstance(v, array) else v))
                         for k, v in cols.items()})
    del cols
    if getattr(timeline, "compact", False) and len(timeline):
        tl = pd.DataFrame(timeline.columns())
    else:
        tl = pd.DataFrame(timeline, columns=["time_s", "allocated_gpus", "effective_gpus", "partial_gpus",
                                             "running_jobs", "queued_jobs"])
    rounds = rounds_df.wall_s.to_numpy(dtype=float)
    summary = summarize(jobs, tl, rounds, total_gpus=total_gpus, effective_gpu_s=effective_gpu_s, policy=policy,
                        cluster_name=cluster_name, workload_name=workload_name)
    events = engine_log if getattr(engine_log, "compact", False) else list(engine_log)
    return SimResult(policy, cluster_name, workload_name, total_gpus, jobs, summary, tl, rounds_df,
                     events, decisions)


def summarize(jobs, tl, rounds, *, total_gpus: int, effective_gpu_s: float | None = None, policy: str = "",
              cluster_name: str = "", workload_name: str = "") -> dict:
    """summary.json's figures from a run's jobs table, its utilisation samples (a DataFrame:
    time_s, allocated_gpus, effective_gpus, partial_gpus, ...) and its rounds' wall seconds."""
    n = len(jobs)
    done = jobs.loc[(jobs.state == "done").to_numpy(), ["jct_s", "finish_s", "wait_s"]]
    jct = done.jct_s.to_numpy(dtype=float)
    if n:
        t0 = float(jobs.submit_s.min())
        t1 = float(done.finish_s.max()) if len(done) else t0
    else:
        t0 = t1 = 0.0
    makespan = t1 - t0
    total = total_gpus
    t = tl.time_s.to_numpy(dtype=float)
    alloc_s = _integral(t, tl.allocated_gpus.to_numpy(dtype=float), t0, t1)
    eff_s = _integral(t, tl.effective_gpus.to_numpy(dtype=float), t0, t1)
    if effective_gpu_s is not None:
        # Exact: the simulator integrates it itself (the timeline misses the end of restores);
        # nothing makes progress before the first submission or after the run.
        eff_s = effective_gpu_s
    partial_s = _integral(t, tl.partial_gpus.to_numpy(dtype=float), t0, max(t1, float(t[-1]) if len(t) else t1))
    with_deadline = jobs[jobs.deadline_s.notna()]

    def pct(q):
        return float(np.percentile(jct, q)) if len(jct) else None

    ttfp = jobs.ttfp_s.to_numpy(dtype=float)
    ttfp = ttfp[~np.isnan(ttfp)]
    held_gpu_s = float(jobs.gpu_s.sum())
    lost_gpu_s = float(jobs.switch_lost_gpu_s.sum())

    summary = {
        "policy": policy, "cluster": cluster_name, "workload": workload_name,
        "jobs": n, "finished": int(len(done)),
        "rejected": int((jobs.state == "rejected").sum()),
        "unfinished": int(n - len(done) - (jobs.state == "rejected").sum()),
        "mean_jct_s": float(jct.mean()) if len(jct) else None,
        "median_jct_s": pct(50), "p95_jct_s": pct(95), "p99_jct_s": pct(99),
        "makespan_s": makespan,
        "mean_wait_s": float(done.wait_s.mean()) if len(done) else None,
        "gpu_util": alloc_s / (total * makespan) if total and makespan > 0 else 0.0,
        "effective_gpu_util": eff_s / (total * makespan) if total and makespan > 0 else 0.0,
        "nic_bytes": float(jobs.nic_bytes.sum()),
        "cross_rack_bytes": float(jobs.cross_rack_bytes.sum()),
        "sched_time_s": float(rounds.sum()),
        "sched_rounds": int(len(rounds)),
        "sched_round_mean_ms": float(rounds.mean() * 1e3) if len(rounds) else 0.0,
        "sched_round_max_ms": float(rounds.max() * 1e3) if len(rounds) else 0.0,
        "partial_hold_gpu_s": partial_s,
        "gpu_s_held": float(jobs.gpu_s.sum()),
        "preemptions": int(jobs.preemptions.sum()),
        "migrations": int(jobs.migrations.sum()),
        "suspensions": int(jobs.suspends.sum()),
        "resumes": int(jobs.resumes.sum()),
        "switch_lost_s": float(jobs.switch_lost_s.sum()),
        "switch_lost_gpu_s": lost_gpu_s,
        "switch_lost_frac": lost_gpu_s / held_gpu_s if held_gpu_s > 0 else 0.0,
        "mean_ttfp_s": float(ttfp.mean()) if len(ttfp) else None,
        "median_ttfp_s": float(np.median(ttfp)) if len(ttfp) else None,
        "p95_ttfp_s": float(np.percentile(ttfp, 95)) if len(ttfp) else None,
        "deadline_jobs": int(len(with_deadline)),
        "deadline_hit_rate": (float(with_deadline.deadline_met.astype(bool).mean())
                              if len(with_deadline) else None),
        "total_gpus": total,
    }
    summary = {k: _clean(v) for k, v in summary.items()}
    return summary
