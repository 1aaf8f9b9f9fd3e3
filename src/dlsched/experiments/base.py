"""What every experiment shares: runs over seeds, aggregation, checks and output files."""
from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dlsched.core.errors import DlschedError


@dataclass
class Check:
    """An expected direction and whether our figures show it."""
    text: str
    ok: bool
    detail: str = ""


@dataclass
class ExperimentResult:
    name: str
    title: str
    rows: list[dict]                       # one row per (group, policy): figures, mean and std
    published: list[dict]                  # the published figures beside ours
    checks: list[Check]
    results: dict = field(default_factory=dict)   # group -> policy -> [SimResult per seed]
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


@dataclass
class Experiment:
    name: str
    title: str
    source: str
    run: Callable[..., ExperimentResult]
    default_seeds: int = 5


EXPERIMENTS: dict[str, Experiment] = {}


def register_experiment(exp: Experiment) -> Experiment:
    if exp.name in EXPERIMENTS:
        raise DlschedError(f"duplicate experiment {exp.name!r}")
    EXPERIMENTS[exp.name] = exp
    return exp


def run_seeds(cluster, workload_ref: str, policies: list[str], seeds: int, **kw) -> dict[str, list]:
    """policy -> [SimResult for seed 0..seeds-1]; the workload is generated from each seed."""
    from dlsched.api import simulate
    from dlsched.workload.io import load_workload
    out: dict[str, list] = {p: [] for p in policies}
    for seed in range(seeds):
        jobs = load_workload(workload_ref, seed=seed)
        for p in policies:
            res = simulate(cluster, jobs, p, seed=seed, **kw)
            res.workload = res.summary["workload"] = f"{workload_ref} (seed {seed})"
            out[p].append(res)
    return out


def mean_std(values) -> tuple[float, float]:
    a = np.asarray([np.nan if v is None else v for v in values], dtype=float)
    if np.isnan(a).all():
        return float("nan"), float("nan")
    return float(np.nanmean(a)), float(np.nanstd(a))


def summarise(runs: dict[str, list], keys: tuple[str, ...], group: str = "") -> list[dict]:
    rows = []
    for policy, results in runs.items():
        row: dict[str, Any] = {"group": group, "policy": policy, "seeds": len(results)}
        for k in keys:
            m, s = mean_std([r.summary.get(k) for r in results])
            row[k] = m
            row[f"{k}_std"] = s
        rows.append(row)
    return rows


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        if np.isnan(x):
            return "-"
        return f"{x:,.3f}" if abs(x) < 10 else f"{x:,.0f}"
    return str(x)


def write_outputs(res: ExperimentResult, out: Path, provenance: dict | None = None) -> Path:
    """results.csv, summary.json (with `provenance` when given), per-seed run folders of seed 0,
    plots and report.html."""
    import pandas as pd
    from dlsched.report import write_compare_report
    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(res.rows)
    tmp = out / ".results.csv.tmp"
    df.to_csv(tmp, index=False)
    os.replace(tmp, out / "results.csv")
    per_seed = []
    for group, runs in res.results.items():
        for policy, results in runs.items():
            for seed, r in enumerate(results):
                per_seed.append({"group": group, "policy": policy, "seed": seed, **r.summary})
    pd.DataFrame(per_seed).to_csv(out / ".runs.csv.tmp", index=False)
    os.replace(out / ".runs.csv.tmp", out / "runs.csv")
    plots = res.extra.get("plots", {})
    for fname, draw in plots.items():
        draw(res.rows, out / fname)
    for fname, write in res.extra.get("files", {}).items():     # other files: name -> write(path)
        write(out / fname)
    summary = {"experiment": res.name, "title": res.title, "ok": res.ok,
               "checks": [{"expected": c.text, "ok": c.ok, "detail": c.detail} for c in res.checks],
               "published": res.published, "rows": res.rows,
               **{k: v for k, v in res.extra.items() if k not in ("plots", "files")},
               **({"provenance": provenance} if provenance else {})}
    (out / ".summary.json.tmp").write_text(json.dumps(summary, indent=2, default=float) + "\n")
    os.replace(out / ".summary.json.tmp", out / "summary.json")
    pub = "".join(f"<tr>{''.join(f'<td>{html.escape(_fmt(v))}</td>' for v in row.values())}</tr>"
                  for row in res.published)
    head = "".join(f"<th>{html.escape(k)}</th>" for k in (res.published[0] if res.published else {}))
    checks = "".join(f"<li>{'PASS' if c.ok else 'FAIL'}: {html.escape(c.text)} "
                     f"<small>{html.escape(c.detail)}</small></li>" for c in res.checks)
    imgs = "".join(f'<p><img src="{html.escape(f)}" alt="{html.escape(f)}"></p>' for f in plots)
    extra_html = (f"<h2>Published figures beside ours</h2><table><tr>{head}</tr>{pub}</table>"
                  f"<h2>Expected direction</h2><ul>{checks}</ul>{imgs}"
                  f"<p>Means over seeds; per-seed figures in runs.csv. The plots show seed 0.</p>")
    for group, runs in res.results.items():
        first = [results[0] for results in runs.values() if results]
        sub = out / group if len(res.results) > 1 else out
        write_compare_report(first, sub, title=f"{res.title} {group}".strip(),
                             extra_html=extra_html if sub == out else "")
    if len(res.results) > 1:
        # One page for the experiment that links the groups' pages.
        links = "".join(f'<li><a href="{html.escape(g)}/report.html">{html.escape(g)}</a></li>'
                        for g in res.results)
        page = (f"<!doctype html><meta charset='utf-8'><title>{html.escape(res.title)}</title>"
                f"<h1>{html.escape(res.title)}</h1>{extra_html}<h2>Per group</h2><ul>{links}</ul>")
        (out / ".report.html.tmp").write_text(page)
        os.replace(out / ".report.html.tmp", out / "report.html")
    return out / "report.html"


def get_experiment(name: str, seeds: int | None = None) -> tuple[Experiment, int]:
    """The experiment `name` and its number of seeds (`seeds`, or its default), validated."""
    if name not in EXPERIMENTS:
        raise DlschedError(f"unknown experiment {name!r} (experiments: {', '.join(sorted(EXPERIMENTS))})")
    exp = EXPERIMENTS[name]
    n = exp.default_seeds if seeds is None else seeds
    if n < 1:
        raise DlschedError("--seeds must be >= 1")
    return exp, n


def run_experiment(name: str, out: Path, seeds: int | None = None) -> tuple[ExperimentResult, Path]:
    exp, n = get_experiment(name, seeds)
    res = exp.run(seeds=n)
    return res, write_outputs(res, out)
