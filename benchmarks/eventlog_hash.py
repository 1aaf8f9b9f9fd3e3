"""Hashes of what a simulation decided, to check that a speed-up changed nothing.

    python benchmarks/eventlog_hash.py CASE [CASE ...] [--out FILE]
    python benchmarks/eventlog_hash.py --standard [--out FILE]       # the standard set below
    python benchmarks/eventlog_hash.py --compare A.json B.json        # exit 1 where they differ

A CASE is `POLICY@WORKLOAD@CLUSTER` (a workload file, a bundled trace or a generator string, and a
preset or cluster file), e.g. `fifo@philly@philly` or `tiresias@poisson:jobs=3000,rate=0.05@v100-1500`.
Each case's hashes cover the engine's event log, the scheduler's decisions (the typed log less its
round records, with the stats records), the jobs table, the timeline and the summary less the
scheduling wall times (`sched_*`), each separately, so that a difference says where it is. The
CPU seconds of `simulate` are printed beside them (not hashed).

Run it on the code before a change and after it, and compare the two files.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

STANDARD = [f"{p}@sample@seed002" for p in (
    "fifo", "fifo-gang", "fifo-backfill", "sjf", "srtf", "edf", "gang", "tetris", "drf", "k8s-spread",
    "k8s-binpack", "volcano-gang", "co-location", "tiresias", "optimus", "gandiva", "gandiva-reactive",
    "liquid", "liquid-immediate")] + [
    f"{p}@poisson:jobs=3000,rate=0.05@v100-1500" for p in (
        "fifo", "tiresias", "tetris", "gandiva", "srtf", "drf", "liquid", "co-location", "optimus")] + [
    "fifo@philly@philly"]


def _h(obj) -> str:
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


def hash_case(case: str) -> dict:
    import dlsched
    from dlsched.workload.io import load_workload
    policy, workload, cluster = case.split("@")
    jobs = load_workload(workload, seed=0)
    t0 = time.process_time()
    res = dlsched.simulate(cluster, jobs, policy, record_rates=False)
    cpu = time.process_time() - t0
    summary = {k: v for k, v in res.summary.items() if not k.startswith("sched_")}
    jobs_tab = res.jobs.drop(columns=[c for c in res.jobs.columns if c.startswith("sched_")])
    return {"events": _h(list(res.events)), "decisions": _h(list(res.decisions)),
            "jobs": _h(jobs_tab.to_csv(index=False)), "timeline": _h(res.timeline.to_csv(index=False)),
            "summary": _h(sorted(summary.items())), "cpu_s": round(cpu, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--standard", action="store_true", help="the standard set of cases")
    ap.add_argument("--out", help="write the hashes here (JSON)")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    a = ap.parse_args(argv)
    if a.compare:
        try:
            x, y = (json.loads(Path(f).read_text()) for f in a.compare)
        except (OSError, ValueError) as e:       # (one line for a file that is not an --out file)
            ap.exit(2, f"eventlog_hash.py: --compare: {e}\n")
        bad = 0
        for case in sorted(set(x) & set(y)):
            diff = [k for k in x[case] if k != "cpu_s" and x[case][k] != y[case].get(k)]
            cpu = f"cpu {x[case]['cpu_s']} -> {y[case]['cpu_s']} s"
            print(f"{'DIFF ' + ','.join(diff) if diff else 'same':<24} {case}  ({cpu})")
            bad += bool(diff)
        for case in sorted(set(x) ^ set(y)):
            print(f"{'only in one':<24} {case}")
        return 1 if bad else 0
    cases = (STANDARD if a.standard else []) + a.cases
    if not cases:
        ap.error("name a CASE, or --standard")
    out = {}
    for case in cases:
        out[case] = hash_case(case)
        print(case, json.dumps(out[case]), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
