"""Fit Pollux's throughput model on each bundled application's placements.csv and print how well
the fitted step time matches the measured one (dlsched.workload.goodput).

    python benchmarks/goodput_fit.py [--no-write]
    python benchmarks/goodput_fit.py --pollux-goodput PATH/simulator/goodput.py

Columns: rows fitted, median and p90 of |predicted / measured - 1| of the synchronising step time
(placements.csv `step_time`), fit wall time, L-BFGS-B iterations.

With --pollux-goodput (adaptdl branch osdi21-artifact, `simulator/goodput.py`; needs the
`autograd` package) it also runs Pollux's own `fit_perf_params` on the same rows and prints the
median and largest |ours / Pollux's - 1| of the predicted step times and Pollux's fit time.
That module is loaded from the path given and never copied into dlsched. The table goes into
benchmarks/RESULTS.md, block `goodput-fit` (not with --no-write).
"""
from __future__ import annotations

import argparse
import importlib.util
import time

import numpy as np
from results import measured, update_results

from dlsched.workload.goodput import PerfParams, fit_perf_params, placement_samples, sync_step_time
from dlsched.workload.pollux_data import POLLUX_MAX_EPOCHS


def _load(path: str):
    spec = importlib.util.spec_from_file_location("pollux_goodput_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pollux-goodput", help="path to adaptdl's simulator/goodput.py (reference)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md as it is")
    args = ap.parse_args(argv)
    ref = _load(args.pollux_goodput) if args.pollux_goodput else None
    head = f"{'app':<12} {'rows':>5} {'median':>7} {'p90':>7} {'fit s':>6} {'iters':>5}"
    if ref:
        head += f" {'vs Pollux med':>13} {'max':>9} {'Pollux s':>8}"
    print(head)
    rows = []
    for app in sorted(POLLUX_MAX_EPOCHS):
        s = placement_samples(app)
        res = fit_perf_params(s)
        pred = sync_step_time(res.params, s.nodes, s.replicas, s.atomic_bsz)
        rel = np.abs(pred / s.step_s - 1)
        line = (f"{app:<12} {len(s):>5} {np.median(rel):>7.2%} {np.percentile(rel, 90):>7.2%} "
                f"{res.seconds:>6.2f} {res.iterations:>5}")
        if ref:
            t0 = time.perf_counter()
            theirs = PerfParams(*map(float, ref.fit_perf_params(
                s.nodes, s.replicas, s.atomic_bsz, s.compute_s, s.step_s)))
            secs = time.perf_counter() - t0
            d = np.abs(pred / sync_step_time(theirs, s.nodes, s.replicas, s.atomic_bsz) - 1)
            line += f" {np.median(d):>13.1e} {d.max():>9.1e} {secs:>8.2f}"
        print(line)
        rows.append(f"| {app} | {len(s)} | {np.median(rel):.2%} | {np.percentile(rel, 90):.2%} | {res.seconds:.2f} "
                    f"| {res.iterations} |")
    if args.no_write or ref:
        return
    path = update_results("goodput-fit", [
        "## Pollux's throughput model fitted per application (`benchmarks/goodput_fit.py`)", "",
        "Issue \"Pollux\": the fit must reproduce Pollux's own (checked in tests/unit/test_goodput.py against "
        "Pollux's `fit_perf_params` on the same rows). Error: |predicted / measured - 1| of the synchronising "
        "step time over every row of the application's placements.csv.", "",
        measured("python benchmarks/goodput_fit.py") + ".", "",
        "| app | rows | median error | p90 error | fit (s) | L-BFGS-B iterations |",
        "| --- | --- | --- | --- | --- | --- |", *rows])
    print(f"updated {path}")


if __name__ == "__main__":
    main()
