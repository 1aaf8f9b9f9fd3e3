"""Gavel's continuous experiment (dlsched experiment gavel-continuous): one cell's wall time.

    python benchmarks/bench_gavel.py [--cells POLICY@RATE ...] [--window LO HI] [--no-write]
    python benchmarks/bench_gavel.py --figure8 [--no-write]

A cell is one gavel-* policy at one rate (jobs/h) on 36 V100 + 36 P100 + 36 K80 under Gavel's
round mechanism, jobs from Gavel's generator (seed 0), run until jobs LO..HI-1 have finished
(the experiment's 4000-5000). Prints, per cell, the wall seconds, the window's mean JCT (h),
rounds, allocation resets and the seconds spent in the policy. The issue's goal: one cell in
<= 30 s on the 2-core development machine.

`--figure8` times the whole of Figure 8 instead: `dlsched sweep examples/gavel-figure8.yaml` in a
fresh process on a private local Ray (every core), wall clock from start to exit, and each cell's
own wall (results.parquet); goal: <= 20 minutes. Writes the "gavel-figure8" block.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFAULT = ["gavel-fifo@0.4", "gavel-max-min-fairness-perf@0.4", "gavel-finish-time-fairness-perf@0.4",
           "gavel-fifo@4.0", "gavel-max-min-fairness@4.0", "gavel-max-min-fairness-perf@4.0",
           "gavel-finish-time-fairness-perf@4.0", "gavel-gandiva@4.0", "gavel-allox@4.0"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", nargs="+", default=DEFAULT, help="POLICY@RATE, e.g. gavel-fifo@4.0")
    ap.add_argument("--window", type=int, nargs=2, default=[4000, 5000])
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    ap.add_argument("--figure8", action="store_true", help="time `dlsched sweep examples/gavel-figure8.yaml`")
    args = ap.parse_args()
    if args.figure8:
        return figure8(args.no_write)
    from dlsched.experiments.gavel_continuous import cell
    rows = []
    for spec in args.cells:
        policy, _, rate = spec.partition("@")
        jct, res, wall = cell(policy, float(rate), window=tuple(args.window))
        s = res.summary
        rows.append((policy, float(rate), wall, jct, s["rounds"], s["allocation_resets"], s["sched_time_s"]))
        print(f"{policy} @ {rate} jobs/h: {wall:.1f} s, mean JCT {jct:.2f} h, {s['rounds']:,} rounds, "
              f"{s['allocation_resets']:,} resets, policy {s['sched_time_s']:.1f} s", flush=True)
    if args.no_write:
        return
    from results import measured, update_results
    cmd = "python benchmarks/bench_gavel.py" + ("" if args.cells == DEFAULT else " --cells " + " ".join(args.cells)) + \
        ("" if args.window == [4000, 5000] else f" --window {args.window[0]} {args.window[1]}")
    lines = ["## Gavel's continuous experiment: one cell (`benchmarks/bench_gavel.py`)", "",
             measured(cmd) + f", 36:36:36, Gavel's generator seed 0, jobs {args.window[0]}-{args.window[1] - 1} "
             "measured; goal: <= 30 s a cell.", "",
             "| policy | jobs/h | wall s | mean JCT h | rounds | resets | in the policy s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for p, r, w, j, n, k, sp in rows:
        lines.append(f"| {p} | {r:g} | {w:.1f} | {j:.2f} | {n:,} | {k:,} | {sp:.1f} |")
    print("\n".join(lines[4:]))
    print(f"updated {update_results('gavel', lines)}")


def figure8(no_write: bool) -> None:
    import subprocess
    import tempfile
    import time

    import pandas as pd
    from results import measured, update_results
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        rc = subprocess.run([str(Path(sys.executable).parent / "dlsched"), "sweep", str(root / "examples" / "gavel-figure8.yaml"),
                             "--out", str(Path(tmp) / "fig8")], cwd=root, stdout=subprocess.DEVNULL).returncode
        wall = time.perf_counter() - t0
        df = pd.read_parquet(Path(tmp) / "fig8" / "results.parquet")
    cells = df.wall_s.astype(float)
    top = df.assign(rate=df.workload.str.extract(r"rate=([0-9.]+)")[0]).sort_values("wall_s", ascending=False).head(5)
    print(f"figure 8: {len(df)} cells in {wall:.0f} s (rc {rc}); cells' own walls: sum {cells.sum():.0f} s, "
          f"largest {cells.max():.0f} s")
    if no_write or rc != 0:
        return
    lines = ["## Gavel's Figure 8 as a sweep (`benchmarks/bench_gavel.py --figure8`)", "",
             measured("python benchmarks/bench_gavel.py --figure8") + f": `dlsched sweep examples/gavel-figure8.yaml` "
             f"(the {len(df)} points of the figure), a private local Ray on every core. Goal: <= 20 minutes.", "",
             "| cells | wall (min) | cells' own walls, summed (s) | largest cells (s) |", "| --- | --- | --- | --- |",
             f"| {len(df)} | {wall / 60:.1f} | {cells.sum():,.0f} | " +
             ", ".join(f"{p.removeprefix('gavel-')} {r}: {w:.0f}" for p, r, w in zip(top.policy, top.rate, top.wall_s)) + " |"]
    print(f"updated {update_results('gavel-figure8', lines)}")


if __name__ == "__main__":
    main()
