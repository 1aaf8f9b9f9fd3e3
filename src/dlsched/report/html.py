"""Static HTML report comparing simulation results (or describing a single run).

``write_compare_report`` writes ``out_dir/report.html`` and its PNG charts next to it:

* ``jct_cdf.png``      - CDF of job completion time (finished jobs)
* ``wait_cdf.png``     - CDF of waiting time (finished jobs)
* ``utilisation.png``  - allocated / effective GPU utilisation over time
* ``summary_bars.png`` - bars of headline summary metrics

The page is self-contained apart from those images (inline CSS, relative ``img src``), so
the directory can be zipped or served as-is. Every string that comes from the results
(policy, cluster, workload, model names...) is HTML-escaped; only ``extra_html`` is
inserted verbatim, because it is the caller's own markup.

Results are duck-typed: any object with ``policy``, ``jobs``, ``summary``, ``timeline`` and
``total_gpus`` attributes (as ``dlsched.metrics.SimResult``) works.
"""
from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from dlsched.report import plots
from dlsched.report.tables import COLUMNS, MISSING, format_cell, format_seconds, summary_table

__all__ = ["write_compare_report", "write_run_report", "REPORT_NAME", "BAR_KEYS"]

REPORT_NAME = "report.html"

#: Summary keys shown in the bar chart.
BAR_KEYS: tuple[str, ...] = (
    "mean_jct_s", "p95_jct_s", "makespan_s", "mean_wait_s", "gpu_util", "effective_gpu_util",
)

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; }
.meta { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; }
figure { margin: 1em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
section.policy { border-top: 1px solid #ddd; margin-top: 1.5em; }
""".strip()


def _e(value: Any) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return html.escape(str(value), quote=True)


def _atomic_write_text(path: Path, text: str) -> Path:
    """Write ``text`` via a temp file and ``os.replace``, so a reader never sees a
    truncated report."""
    with plots.atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def _distinct(values: Iterable[Any]) -> list[str]:
    """Distinct non-empty values as strings, in first-seen order."""
    out: list[str] = []
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        s = str(v)
        if s and s not in out:
            out.append(s)
    return out


def _summary(result: Any) -> dict:
    return getattr(result, "summary", None) or {}


def _html_table(headers: Sequence[str], rows: Iterable[Sequence[tuple[str, bool]]]) -> str:
    """Table markup. ``rows`` holds (already-formatted text, is_numeric) cells; the text
    is escaped here so callers cannot forget to."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(f'<td class="num">{_e(t)}</td>' if num else f"<td>{_e(t)}</td>"
                        for t, num in row)
        body.append(f"<tr>{cells}</tr>")
    return (f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _summary_html(results: Sequence[Any]) -> str:
    rows = summary_table(results)
    headers = [label for _key, label, _kind in COLUMNS]
    cells = ([(format_cell(key, row.get(key)), kind != "text") for key, _l, kind in COLUMNS]
             for row in rows)
    return _html_table(headers, cells)


def _model_table(jobs: Any) -> str:
    """Per-model job counts and JCTs, or "" when the jobs carry no model names."""
    if jobs is None or len(jobs) == 0 or "model" not in jobs or not jobs["model"].notna().any():
        return ""
    import pandas as pd

    df = pd.DataFrame({
        # Jobs without a model are grouped together instead of being dropped, so the
        # per-model counts add up to the policy's job count.
        "model": jobs["model"].where(jobs["model"].notna(), "(none)").astype(str),
        "jct": pd.to_numeric(jobs["jct_s"], errors="coerce") if "jct_s" in jobs else math.nan,
        "wait": pd.to_numeric(jobs["wait_s"], errors="coerce") if "wait_s" in jobs else math.nan,
        "done": jobs["finish_s"].notna() if "finish_s" in jobs else True,
    })
    if "finish_s" in jobs:
        # JCT statistics over finished jobs only, matching the summary's JCT figures.
        df.loc[~df["done"], "jct"] = math.nan
    grouped = df.groupby("model", sort=False).agg(
        jobs=("model", "size"), finished=("done", "sum"),
        mean_jct=("jct", "mean"), median_jct=("jct", "median"), mean_wait=("wait", "mean"),
    ).reset_index().sort_values(["jobs", "model"], ascending=[False, True])
    rows = ([(r.model, False), (f"{int(r.jobs):,}", True), (f"{int(r.finished):,}", True),
             (format_seconds(r.mean_jct), True), (format_seconds(r.median_jct), True),
             (format_seconds(r.mean_wait), True)]
            for r in grouped.itertuples(index=False))
    return _html_table(["Model", "Jobs", "Finished", "Mean JCT", "Median JCT", "Mean wait"],
                       rows)


def _policy_section(i: int, result: Any) -> str:
    s = _summary(result)
    jobs = getattr(result, "jobs", None)
    facts: list[tuple[str, str]] = [
        ("Cluster", str(s.get("cluster") or MISSING)),
        ("Workload", str(s.get("workload") or MISSING)),
        ("GPUs", f"{getattr(result, 'total_gpus', MISSING)}"),
    ]
    if jobs is not None and len(jobs):
        n = len(jobs)
        finished = int(jobs["finish_s"].notna().sum()) if "finish_s" in jobs else n
        facts.append(("Jobs finished", f"{finished:,} / {n:,}"))
        for col, name in (("preemptions", "Preemptions"), ("migrations", "Migrations")):
            if col in jobs:
                facts.append((name, f"{int(jobs[col].fillna(0).sum()):,}"))
    facts_html = " · ".join(f"<b>{_e(k)}:</b> {_e(v)}" for k, v in facts)
    model_html = _model_table(jobs)
    parts = [f'<section class="policy" id="policy-{i}">',
             f"<h3>{_e(getattr(result, 'policy', f'run {i}'))}</h3>",
             f'<p class="meta">{facts_html}</p>']
    if model_html:
        parts += ["<h4>Per-model job completion time</h4>", model_html]
    from dlsched.report.queues import queues_html
    parts.append(queues_html(result))
    parts.append("</section>")
    return "\n".join(parts)


def write_compare_report(results: list, out_dir: Path, title: str = "dlsched comparison",
                         extra_html: str = "") -> Path:
    """Write ``out_dir/report.html`` (plus its PNG charts) comparing ``results``.

    ``extra_html`` is appended verbatim before the end of the page (it is trusted markup
    from the caller, e.g. a config dump already escaped by them). Returns the HTML path.
    """
    results = list(results)
    if not results:
        raise ValueError("write_compare_report needs at least one result")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    figures = [
        (plots.plot_cdf(results, "jct_s", out_dir / "jct_cdf.png",
                        "Job completion time", "JCT (s)"),
         "Job completion time CDF (finished jobs only)."),
        (plots.plot_cdf(results, "wait_s", out_dir / "wait_cdf.png",
                        "Waiting time", "wait before first start (s)"),
         "Waiting time CDF (finished jobs only)."),
        (plots.plot_timeline(results, out_dir / "utilisation.png"),
         "Allocated (solid) and effective (dashed) GPU utilisation over time."),
        (plots.plot_bars(results, BAR_KEYS, out_dir / "summary_bars.png"),
         "Headline summary metrics per policy."),
    ]
    from dlsched.report.queues import plot_queues
    for i, r in enumerate(results):          # with a tenancy: allocation against entitlement per queue
        p = plot_queues(r, out_dir / (f"queues_{i}.png" if len(results) > 1 else "queues.png"))
        if p is not None:
            figures.append((p, f"{getattr(r, 'policy', '')}: GPUs used (solid) against entitled (dashed), "
                               f"the busiest queues."))
    # img src is the bare file name: the PNGs sit next to report.html, so the directory
    # stays relocatable.
    figures_html = "\n".join(
        f'<figure><img src="{_e(p.name)}" alt="{_e(cap)}"><figcaption>{_e(cap)}</figcaption>'
        f"</figure>" for p, cap in figures)

    summaries = [_summary(r) for r in results]
    clusters = _distinct(s.get("cluster") for s in summaries)
    workloads = _distinct(s.get("workload") for s in summaries)
    policies = _distinct(getattr(r, "policy", None) for r in results)
    meta = (f"<b>Cluster:</b> {_e(', '.join(clusters) or MISSING)} · "
            f"<b>Workload:</b> {_e(', '.join(workloads) or MISSING)} · "
            f"<b>Policies:</b> {_e(', '.join(policies) or MISSING)}")

    page = "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>\n{_CSS}\n</style>",
        "</head>",
        "<body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">{meta}</p>',
        "<h2>Summary</h2>",
        _summary_html(results),
        "<h2>Charts</h2>",
        figures_html,
        "<h2>Per-policy details</h2>",
        *(_policy_section(i, r) for i, r in enumerate(results)),
        extra_html,
        "</body>",
        "</html>",
        "",
    ])
    return _atomic_write_text(out_dir / REPORT_NAME, page)


def write_run_report(result: Any, out_dir: Path) -> Path:
    """Report for a single run: the comparison page with one policy."""
    policy = getattr(result, "policy", None) or _summary(result).get("policy") or "run"
    return write_compare_report([result], out_dir, title=f"dlsched run: {policy}")
