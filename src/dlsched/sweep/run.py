"""`dlsched sweep`: run a sweep file's cells on Ray, stream them into OUT, compare them.

A re-run with the same OUT skips the cells already done (by their input hash) and tries the
failed ones again; results.parquet and report.md always hold exactly the sweep file's cells.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dlsched.sweep.cells import CellStore
from dlsched.sweep.engine import Throttle, ray_session, run_cells
from dlsched.sweep.grid import Sweep, load_sweep, seeded

REPORT_METRICS = (("mean_jct_s", "mean JCT (s)"), ("p95_jct_s", "p95 JCT (s)"), ("mean_wait_s", "mean wait (s)"),
                  ("p95_wait_s", "p95 wait (s)"), ("makespan_s", "makespan (s)"), ("gpu_util", "GPU util"))


@dataclass
class SweepOutcome:
    sweep: Sweep
    records: list[dict]
    failed: list[dict]
    skipped: int
    ran: int
    out: Path
    groups: list[dict] = field(default_factory=list)


def run_sweep(path: str | Path, out: Path, *, address: str | None = None, workers: int | None = None,
              progress: Callable[[int, int], None] | None = None, sweep: Sweep | None = None) -> SweepOutcome:
    sw = sweep or load_sweep(path)
    store = CellStore(out)
    store.prepare()
    records, todo = [], []
    for cell in sw.cells:
        rec = store.done(cell)
        if rec is None:
            todo.append(cell)
        else:
            records.append(rec)
    skipped = len(records)
    failed: list[dict] = []
    if progress:
        progress(skipped, len(sw.cells))
    if todo:
        table = Throttle(lambda: store.write_table(records))

        def on_done(cell, result, error):
            if error is not None:
                failed.append(store.save_failed(cell, error))
            else:
                records.append(store.save_done(cell, result))
                table()
            if progress:
                progress(len(records) + len(failed), len(sw.cells))
        with ray_session(address, workers) as ray:
            run_cells(ray, todo, on_done)
        table.flush()
    if records:
        store.write_table(records)
    store.tidy()                                    # no empty failed/ left behind
    outcome = SweepOutcome(sw, records, failed, skipped, len(todo), Path(out))
    outcome.groups = compare(records)
    write_report(outcome)
    return outcome


def compare(records: list[dict]) -> list[dict]:
    """The cells grouped over seeds: mean and std of each report metric, per (cluster, workload,
    parameters, policy), best mean JCT first within each (cluster, workload, parameters)."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        key = (Path(r["cluster"]).name, Path(r["workload"]).name, json.dumps(r.get("params") or {}, sort_keys=True),
               r["policy"])
        groups.setdefault(key, []).append(r)
    rows = []
    for (cl, wl, params, pol), rs in groups.items():
        row = {"cluster": cl, "workload": wl, "params": params, "policy": pol, "seeds": len(rs)}
        for k, _ in REPORT_METRICS:
            vals = [float(r[k]) for r in rs if r.get(k) is not None and not math.isnan(float(r[k]))]
            m = sum(vals) / len(vals) if vals else math.nan
            sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
            row[k], row[f"{k}_std"] = m, sd
        rows.append(row)
    rows.sort(key=lambda r: (r["cluster"], r["workload"], r["params"],
                             r["mean_jct_s"] if not math.isnan(r["mean_jct_s"]) else math.inf, r["policy"]))
    return rows


def _fmt(m: float, sd: float, k: str) -> str:
    if math.isnan(m):
        return "-"
    if k == "gpu_util":
        return f"{m:.3f} ± {sd:.3f}"
    return f"{m:,.0f} ± {sd:,.0f}"


def report_rows(groups: list[dict]) -> tuple[list[str], list[list[str]]]:
    header = ["cluster", "workload", "parameters", "policy", "seeds"] + [label for _, label in REPORT_METRICS]
    rows = []
    for g in groups:
        params = ", ".join(f"{k}={json.dumps(v)}" for k, v in json.loads(g["params"]).items()) or "-"
        rows.append([g["cluster"], g["workload"], params, g["policy"], str(g["seeds"])] +
                    [_fmt(g[k], g[f"{k}_std"], k) for k, _ in REPORT_METRICS])
    return header, rows


def write_report(o: SweepOutcome) -> Path:
    header, rows = report_rows(o.groups)
    lines = [f"# Sweep: {o.sweep.name}", "",
             f"{len(o.sweep.cells)} cells: {len(o.records)} done ({o.skipped} from an earlier run), "
             f"{len(o.failed)} failed. Mean ± std over seeds; best mean JCT first within each "
             "cluster / workload / parameters.", "",
             "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    fixed = sorted({Path(c.workload).name for c in o.sweep.cells if not seeded(c.workload)})
    if fixed and len({c.seed for c in o.sweep.cells}) > 1:
        lines += ["", f"Fixed workloads: {', '.join(fixed)}. Their jobs are the same whatever the seed (a trace, not "
                  "a generator), so their ± is only what the policies draw at random themselves: 0 for a "
                  "deterministic policy. For a spread over workloads, use a seeded generator (such as "
                  "`poisson:jobs=160,rate=0.005`) or list several traces."]
    if o.failed:
        lines += ["", "## Failed cells", ""]
        for f in o.failed:
            params = ", ".join(f"{k}={json.dumps(v)}" for k, v in (f.get("params") or {}).items())
            lines.append(f"- {f['policy']} on {Path(f['cluster']).name} / {Path(f['workload']).name}, seed "
                         f"{f['seed']}{f' ({params})' if params else ''}: {f['error']}")
    path = o.out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
