"""The report's tenancy parts: each queue's allocation against its entitlement over time (a
plot), and a table of each queue's waits, GPU-hours and preemptions, with Jain's index and the
worst finish-time fairness (summary.json's `queues`, dlsched.tenancy.accounts)."""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np

from dlsched.report import plots

TOP = 8      # queues plotted: the ones that used the most GPU-hours


def plot_queues(result: Any, path: Path) -> Path | None:
    """Used (solid) against entitled (dashed) GPUs per queue, for the busiest queues."""
    s = getattr(result, "queue_series", None)
    q = (getattr(result, "summary", {}) or {}).get("queues") or {}
    if s is None or not len(s) or not q:
        return None
    busiest = sorted((k for k in q if q[k]["jobs"]), key=lambda k: -q[k]["gpu_hours"])[:TOP]
    fig = plots._new_figure(8.0, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    for i, name in enumerate(busiest):
        d = s[s["queue"] == name].sort_values("time_s")
        if not len(d):
            continue
        h = d["time_s"].to_numpy(dtype=float) / 3600.0
        ax.step(h, d["used_gpus"].to_numpy(dtype=float), where="post", color=plots._color(i), label=name, linewidth=1.2)
        ax.step(h, d["entitled_gpus"].to_numpy(dtype=float), where="post", color=plots._color(i), linestyle="--",
                linewidth=0.9, alpha=0.8)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("GPUs")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=7, ncol=2)
    fig.tight_layout()
    return plots._save(fig, path)


def _f(x: float, unit: str = "") -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:,.1f}{unit}"


def queues_html(result: Any) -> str:
    """The per-queue table of one run, or "" without a tenancy."""
    s = getattr(result, "summary", {}) or {}
    q = s.get("queues")
    if not q:
        return ""
    head = ("queue", "jobs", "median wait (s)", "p95 wait (s)", "quota wait (job-h)", "placement wait (job-h)",
            "GPU-h used", "GPU-h entitled", "GPU-h borrowed", "GPU-h lent", "preemptions")
    rows = []
    for name, d in sorted(q.items(), key=lambda kv: -kv[1]["jobs"]):
        pre = ", ".join(f"{k} {v}" for k, v in d.get("preemptions", {}).items()) or "-"
        cells = (name, f"{d['jobs']:,}", _f(d["median_wait_s"]), _f(d["p95_wait_s"]), _f(d["quota_wait_s"] / 3600),
                 _f(d["placement_wait_s"] / 3600), _f(d["gpu_hours"]), _f(d["entitled_gpu_hours"]),
                 _f(d["borrowed_gpu_hours"]), _f(d["lent_gpu_hours"]), pre)
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    facts = (f"<b>Tenancy:</b> {html.escape(str(s.get('tenancy')))} · <b>Jain's index</b> (used / entitled "
             f"GPU-hours over queues): {s.get('jain_index', float('nan')):.3f} · <b>worst finish-time fairness "
             f"&rho;:</b> {s.get('max_ftf_rho', float('nan')):.2f} · <b>jobs with &rho; &gt; 1.05:</b> "
             f"{100 * s.get('unfair_fraction', 0.0):.1f} %")
    return (f"<h4>Queues</h4><p class=\"meta\">{facts}</p><table><tr>"
            + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>")
