"""Tests for dlsched.report: HTML comparison report, charts, summary tables, formatting.

Results are faked with a small dataclass carrying exactly the SimResult attributes, since
the report layer is duck-typed and must not depend on the simulator.
"""
from __future__ import annotations

import math
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlsched.report import (
    format_seconds,
    rich_table,
    summary_table,
    write_compare_report,
    write_run_report,
)
from dlsched.report import plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass
class FakeResult:
    policy: str
    jobs: pd.DataFrame
    summary: dict
    timeline: pd.DataFrame
    total_gpus: int = 16


def make_result(policy: str, seed: int, n: int = 20, *, cluster: str = "rack2x8",
                workload: str = "philly-mini") -> FakeResult:
    """~20 jobs: the last one never finishes, job 3 has no model name."""
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.uniform(0, 7200, n))
    wait = rng.exponential(600, n)
    wait[0] = 0.0  # zero waits happen; the wait CDF must cope with them on a log axis
    run = rng.uniform(60, 40000, n)
    start = submit + wait
    finish = start + run
    finish[-1] = np.nan
    jct = finish - submit
    models = [["resnet50", "bert", "gpt2"][i % 3] for i in range(n)]
    models[3] = None
    jobs = pd.DataFrame({
        "job_id": [f"j{i}" for i in range(n)],
        "submit_s": submit,
        "first_start_s": start,
        "finish_s": finish,
        "wait_s": wait,
        "jct_s": jct,
        "run_s": run,
        "gpus": rng.choice([1.0, 2.0, 4.0, 8.0], n),
        "model": models,
        "user": [f"u{i % 4}" for i in range(n)],
        "preemptions": rng.integers(0, 3, n),
        "migrations": rng.integers(0, 2, n),
        "deadline_s": np.nan,
        "deadline_met": None,
        "nic_bytes": rng.uniform(0, 1e11, n),
        "cross_rack_bytes": rng.uniform(0, 1e10, n),
    })
    done = jobs[jobs["finish_s"].notna()]
    summary = {
        "jobs": n,
        "finished": len(done),
        "mean_jct_s": float(done["jct_s"].mean()),
        "median_jct_s": float(done["jct_s"].median()),
        "p95_jct_s": float(done["jct_s"].quantile(0.95)),
        "p99_jct_s": float(done["jct_s"].quantile(0.99)),
        "makespan_s": float(done["finish_s"].max()),
        "mean_wait_s": float(jobs["wait_s"].mean()),
        "gpu_util": 0.61 + 0.01 * seed,
        "effective_gpu_util": 0.52 + 0.01 * seed,
        "nic_bytes": float(jobs["nic_bytes"].sum()),
        "cross_rack_bytes": float(jobs["cross_rack_bytes"].sum()),
        "sched_time_s": 0.0123 * (seed + 1),
        "partial_hold_gpu_s": 5400.0 * (seed + 1),
        "deadline_hit_rate": None,
        "policy": policy,
        "cluster": cluster,
        "workload": workload,
    }
    t = np.arange(0, 50000, 1800.0)
    alloc = np.clip(np.round(16 * np.sin(t / 30000 * np.pi)), 0, 16)
    timeline = pd.DataFrame({
        "time_s": t,
        "allocated_gpus": alloc,
        "effective_gpus": alloc * 0.8,
        "running_jobs": alloc // 2,
        "queued_jobs": np.maximum(0, 5 - alloc // 3),
    })
    return FakeResult(policy, jobs, summary, timeline)


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    assert len(data) > 2000, f"{path} suspiciously small ({len(data)} bytes)"


def img_sources(page: str) -> list[str]:
    return re.findall(r'<img[^>]*\ssrc="([^"]+)"', page)


# --------------------------------------------------------------------------- HTML

def test_compare_report_writes_html_and_pngs(tmp_path):
    results = [make_result("fifo", 0), make_result("tiresias", 1)]
    out = write_compare_report(results, tmp_path / "rep")
    assert out == tmp_path / "rep" / "report.html"
    page = out.read_text(encoding="utf-8")

    assert "fifo" in page and "tiresias" in page
    assert "rack2x8" in page and "philly-mini" in page
    srcs = img_sources(page)
    assert len(srcs) == 4
    for src in srcs:
        assert src.endswith(".png") and "/" not in src  # relative, next to report.html
        assert_png(out.parent / src)
    for r in results:
        assert format_seconds(r.summary["mean_jct_s"]) in page
    # Per-model section: model names appear, and the NaN model is grouped not dropped.
    assert "resnet50" in page and "gpt2" in page and "(none)" in page
    # No temp files left behind by the atomic writes.
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".tmp")]


def test_policy_and_metadata_are_escaped(tmp_path):
    evil = "<script>alert(1)</script>"
    res = make_result(evil, 0, cluster="<b>c&d</b>", workload='w"x')
    res.jobs.loc[0, "model"] = "<img src=x>"
    page = write_compare_report([res, make_result("ok$cost", 2)], tmp_path,
                                title="<i>t</i>").read_text()
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;c&amp;d&lt;/b&gt;" in page
    assert "<i>t</i>" not in page and "&lt;i&gt;t&lt;/i&gt;" in page
    assert "<img src=x>" not in page
    for src in img_sources(page):
        assert_png(tmp_path / src)


def test_extra_html_is_inserted_verbatim(tmp_path):
    page = write_compare_report([make_result("fifo", 0)], tmp_path,
                                extra_html='<div id="cfg">cfg</div>').read_text()
    assert '<div id="cfg">cfg</div>' in page


def test_run_report_single_policy(tmp_path):
    out = write_run_report(make_result("gandiva", 3), tmp_path)
    page = out.read_text()
    assert "gandiva" in page
    for src in img_sources(page):
        assert_png(tmp_path / src)


def test_report_survives_empty_and_nan_data(tmp_path):
    nothing_done = make_result("stuck", 0)
    nothing_done.jobs["finish_s"] = np.nan
    nothing_done.jobs["jct_s"] = np.nan
    nothing_done.jobs["model"] = None
    nothing_done.summary.update(finished=0, mean_jct_s=math.nan, median_jct_s=None)
    nothing_done.timeline = nothing_done.timeline.iloc[0:0]
    empty = make_result("empty", 1)
    empty.jobs = empty.jobs.iloc[0:0]
    empty.total_gpus = 0
    out = write_compare_report([nothing_done, empty], tmp_path)
    page = out.read_text()
    assert "stuck" in page and "empty" in page
    for src in img_sources(page):
        assert_png(tmp_path / src)
    assert_png(plots.plot_cdf([nothing_done], "jct_s", tmp_path / "none.png", "t", "x"))


def test_compare_report_requires_results(tmp_path):
    with pytest.raises(ValueError):
        write_compare_report([], tmp_path)


def test_cdf_log_axis_with_wide_range(tmp_path):
    res = make_result("wide", 0)
    res.jobs["jct_s"] = np.logspace(0, 6, len(res.jobs))  # six decades
    assert_png(plots.plot_cdf([res], "jct_s", tmp_path / "wide.png", "JCT", "s"))


# --------------------------------------------------------------------------- tables

@pytest.mark.parametrize("value, expected", [
    (0, "0.0 s"),
    (45.3, "45.3 s"),
    (59.99, "1m 00s"),
    (125, "2m 05s"),
    (3720, "1h 02m"),
    (3599.7, "1h 00m"),
    (90000, "1d 01h"),
    (-45.3, "-45.3 s"),
    (None, "–"),
    (math.nan, "–"),
    (math.inf, "∞"),
])
def test_format_seconds(value, expected):
    assert format_seconds(value) == expected


def test_summary_table_matches_summaries():
    results = [make_result("fifo", 0), make_result("srtf", 1)]
    rows = summary_table(results)
    assert [r["policy"] for r in rows] == ["fifo", "srtf"]
    for row, res in zip(rows, results):
        s = res.summary
        assert row["jobs"] == s["jobs"] == 20
        assert row["finished"] == s["finished"] == 19
        for key in ("mean_jct_s", "median_jct_s", "p95_jct_s", "p99_jct_s", "makespan_s",
                    "mean_wait_s", "sched_time_s"):
            assert row[key] == s[key]
        assert row["gpu_util_pct"] == pytest.approx(100 * s["gpu_util"])
        assert row["effective_util_pct"] == pytest.approx(100 * s["effective_gpu_util"])
        assert row["nic_gb"] == pytest.approx(s["nic_bytes"] / 1e9)
        assert row["cross_rack_gb"] == pytest.approx(s["cross_rack_bytes"] / 1e9)
        assert row["partial_hold_gpu_h"] == pytest.approx(s["partial_hold_gpu_s"] / 3600)
        assert row["deadline_hit_pct"] is None


def test_rich_table_renders():
    from rich.console import Console

    rows = summary_table([make_result("[bold]fifo", 0)])
    table = rich_table(rows, "cmp")
    console = Console(record=True, width=300)
    console.print(table)
    text = console.export_text()
    assert "[bold]fifo" in text  # markup-looking names are shown literally
    assert format_seconds(rows[0]["mean_jct_s"]) in text


# --------------------------------------------------------------------------- imports

def test_import_does_not_load_matplotlib():
    proc = subprocess.run(
        [sys.executable, "-c", "import dlsched.report, sys; print('matplotlib' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )
    assert proc.stdout.strip() == "False"
