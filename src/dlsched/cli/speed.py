"""The CLI's `--throughputs` option (simulate, compare): a throughput table that sets the speed
of each job whose model is one of its job types (dlsched.workload.throughputs)."""
from __future__ import annotations

import typer

THROUGHPUTS_HELP = ("a throughput table: steps/s per job type, GPU count and GPU type (CSV or Gavel's "
                    "JSON, docs/speed.md), or a bundled one: gavel, pollux-t4")
THROUGHPUTS_OPTION = typer.Option(None, "--throughputs", help=THROUGHPUTS_HELP)


def apply_throughputs(ref: str | None, speed, jobs):
    """(speed settings, jobs) with the table, checked before any run; unchanged without one."""
    if ref is None:
        return speed, jobs
    from dlsched.api import with_throughputs
    return with_throughputs(ref, speed, jobs)


def describe_table(src: str) -> dict | None:
    """`dlsched workload describe` of a throughput table file (Gavel's JSON, .json or .json.gz,
    or our CSV, recognised from its header); None when `src` is not one."""
    import statistics
    from pathlib import Path

    from dlsched.workload.throughputs import CSV_COLUMNS, load_throughputs
    p = Path(src)
    if not p.is_file():
        return None
    low = p.name.lower()
    if low.endswith(".csv"):
        with open(p, encoding="utf-8", errors="replace") as fh:
            head = next((ln for ln in fh if ln.strip() and not ln.startswith("#")), "")
        if not head.replace(" ", "").startswith(",".join(CSV_COLUMNS[:3])):
            return None
    elif not low.endswith((".json", ".json.gz")):
        return None
    t = load_throughputs(str(p))
    types = t.gpu_types()
    out: dict = {"kind": "throughput table", "reference": t.reference, "gpu_types": types,
                 "job_types": len(t.job_types())}
    counts: dict[str, int] = {}
    for j in t.job_types():
        for c in t.gpu_counts(j):
            counts[str(c)] = counts.get(str(c), 0) + 1
    out["job_types_per_gpu_count"] = dict(sorted(counts.items(), key=lambda kv: int(kv[0])))
    # each type's speed at one GPU over the reference's (or the first type's), across job types
    # (Gavel's table: V100 / K80 0.66, 4.05, 11.63, the spread one factor per type cannot give)
    ref = t.reference if t.reference in types else (types[0] if types else None)
    for g in types:
        if g == ref:
            continue
        r = sorted(a / b for j in t.job_types()
                   if (a := t.steps_per_s(j, 1, g) or 0.0) > 0 and (b := t.steps_per_s(j, 1, ref) or 0.0) > 0)
        if r:
            out[f"{g} / {ref} speed at 1 GPU (min, median, max)"] = [round(r[0], 2), round(statistics.median(r), 2),
                                                                       round(r[-1], 2)]
    return out
