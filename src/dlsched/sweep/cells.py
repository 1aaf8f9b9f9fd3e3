"""Running one cell, and the folder a sweep's results stream into.

    OUT/cells/<key>.json     one finished cell: its inputs and metrics (written whole, renamed in)
    OUT/failed/<key>.json    one cell that failed in the last run: its inputs and the error (tried
                             again on a re-run); the folder is there only when a cell failed
    OUT/results.parquet      every finished cell, one row each, rewritten as cells finish
    OUT/report.md            the cells compared (mean +/- std over seeds), written at the end

A cell's key hashes its inputs (Cell.key), so a re-run skips the cells already in cells/ and runs
only what is new or failed.
"""
from __future__ import annotations

import json
import math
import os
import time
import traceback
from pathlib import Path

from dlsched.sweep.grid import Cell

# Metrics a cell keeps: the run summary's figures, and the wait percentiles from its jobs table.
SUMMARY_KEYS = ("jobs", "finished", "rejected", "unfinished", "mean_jct_s", "median_jct_s", "p95_jct_s",
                "p99_jct_s", "makespan_s", "mean_wait_s", "gpu_util", "effective_gpu_util", "nic_bytes",
                "cross_rack_bytes", "preemptions", "migrations", "switch_lost_frac", "deadline_hit_rate",
                "total_gpus", "sched_time_s")


def metrics_of(res) -> dict:
    """The figures of a SimResult that a sweep or a plan compares."""
    out = {k: res.summary.get(k) for k in SUMMARY_KEYS}
    for k in ("jain_index", "max_ftf_rho", "unfair_fraction",      # under a tenancy (dlsched.tenancy)
              "window_mean_jct_s"):                                # under Gavel's rounds with a window
        if k in res.summary:
            out[k] = res.summary[k]
    waits = res.jobs["wait_s"].dropna()
    out["median_wait_s"] = float(waits.quantile(0.5)) if len(waits) else math.nan
    out["p95_wait_s"] = float(waits.quantile(0.95)) if len(waits) else math.nan
    out["p99_wait_s"] = float(waits.quantile(0.99)) if len(waits) else math.nan
    return {k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
            for k, v in out.items()}


def run_cell(cell: Cell, cluster=None, jobs=None) -> dict:
    """Simulate one cell; `cluster` / `jobs`: already loaded (shared through Ray's object store),
    else loaded from the cell's references. Returns {"metrics": ..., "wall_s": ...}."""
    import dlsched
    from dlsched.cluster.topology import load_cluster
    from dlsched.workload.io import load_workload
    t = time.perf_counter()
    cl = cluster if cluster is not None else load_cluster(cell.cluster)
    wl = jobs if jobs is not None else load_workload(cell.workload, seed=cell.seed)
    settings = cell.policy_settings()
    res = dlsched.simulate(cl, wl, cell.policy, seed=cell.seed, record_rates=False,
                           policy_config={"policies": {cell.policy: settings}} if settings else None,
                           **cell.sim_options())
    return {"metrics": metrics_of(res), "wall_s": time.perf_counter() - t}


def cell_record(cell: Cell) -> dict:
    return {"key": cell.key(), "cluster": cell.cluster, "workload": cell.workload, "policy": cell.policy,
            "seed": cell.seed, "params": {k: v for k, v in cell.params}}


def error_line(exc: BaseException) -> str:
    """One line for a failed cell: a user error's message, or the exception and where it came from."""
    from dlsched.core.errors import DlschedError
    cause = getattr(exc, "cause", None) or exc      # a Ray task error wraps the cell's own exception
    if isinstance(cause, DlschedError):
        return str(cause)
    tb = traceback.extract_tb(cause.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
    return f"{type(cause).__name__}: {cause}{where}".splitlines()[0][:500]


class CellStore:
    """The output folder of a sweep (see the module docstring)."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.done_dir = self.out / "cells"
        self.failed_dir = self.out / "failed"

    def prepare(self) -> None:
        """Make OUT and cells/; forget the failures of an earlier run (each failed cell is tried
        again, and fails again into failed/, which the first failure makes: save_failed). An
        earlier failure is no cache: a fixed input file is a new cell, whose key the old record
        does not have, so the record would stay behind forever."""
        for d in (self.out, self.done_dir):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.failed_dir.is_dir():
            for p in self.failed_dir.glob("*.json"):
                p.unlink(missing_ok=True)
            self.tidy()

    def tidy(self) -> None:
        """Remove failed/ where nothing is left in it."""
        try:
            self.failed_dir.rmdir()                 # only an empty folder goes
        except OSError:
            pass

    def done(self, cell: Cell) -> dict | None:
        p = self.done_dir / f"{cell.key()}.json"
        if not p.is_file():
            return None
        try:
            return json.loads(p.read_text())
        except (OSError, ValueError):
            return None     # a damaged record: run the cell again

    def _write(self, path: Path, record: dict) -> None:
        from dlsched.runtime.cluster import write_private   # whole, renamed in, 0600
        write_private(path, json.dumps(record, indent=1, default=str))

    def save_done(self, cell: Cell, result: dict) -> dict:
        record = {**cell_record(cell), **result["metrics"], "wall_s": result["wall_s"]}
        self._write(self.done_dir / f"{cell.key()}.json", record)
        (self.failed_dir / f"{cell.key()}.json").unlink(missing_ok=True)
        return record

    def save_failed(self, cell: Cell, error: str) -> dict:
        record = {**cell_record(cell), "error": error}
        self.failed_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._write(self.failed_dir / f"{cell.key()}.json", record)
        return record

    def write_table(self, records: list[dict]) -> Path:
        """results.parquet: one row per finished cell (parameters as params.<name> columns)."""
        import pandas as pd
        rows = []
        for r in records:
            row = {k: v for k, v in r.items() if k != "params"}
            for k, v in (r.get("params") or {}).items():
                row[f"params.{k}"] = json.dumps(v) if isinstance(v, (list, dict)) else v
            rows.append(row)
        df = pd.DataFrame(rows)
        path = self.out / "results.parquet"
        tmp = path.with_name(f".results.{os.getpid()}.tmp.parquet")
        df.to_parquet(tmp, index=False)
        tmp.replace(path)
        return path
