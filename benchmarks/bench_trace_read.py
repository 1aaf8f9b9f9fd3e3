"""Reading a large trace: N generated rows of a trace format through `load_workload`.

    python benchmarks/bench_trace_read.py [--rows 1000000] [--formats helios slurm tiresias mapped] [--no-write]

Writes, per format, a file of N rows in that format (random values, seed 0: Helios-like
submissions over 180 days, 0-8 GPUs, states, users and VCs) to a temporary folder, then times
`load_workload` on it (wall seconds, and the peak RSS of this process). The issue's goal: 1 M rows
of any CSV format in <= 10 s, peak memory under 1 GB. The table goes into benchmarks/RESULTS.md,
block `trace-read` (not with --no-write).
"""
from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def frame(n: int):
    import numpy as np
    import pandas as pd
    rng = np.random.default_rng(0)
    sub = pd.Timestamp("2020-04-01") + pd.to_timedelta(np.sort(rng.integers(0, 180 * 86400, n)), unit="s")
    wait, dur = rng.integers(0, 3600, n), rng.integers(1, 86400, n)
    start = sub + pd.to_timedelta(wait, unit="s")
    end = start + pd.to_timedelta(dur, unit="s")
    return pd.DataFrame({
        "job_id": np.arange(n), "user": np.char.add("u", rng.integers(0, 500, n).astype(str)),
        "vc": np.char.add("vc", rng.integers(0, 20, n).astype(str)), "gpu_num": rng.choice([0, 1, 2, 4, 8], n),
        "cpu_num": rng.integers(1, 64, n), "node_num": 1,
        "state": rng.choice(["COMPLETED", "FAILED", "CANCELLED"], n), "submit": sub, "start": start, "end": end,
        "duration": dur, "wait": wait})


def write(fmt: str, f, folder: Path) -> tuple[Path, dict]:
    fmt_time = "%Y-%m-%d %H:%M:%S"
    if fmt == "helios":
        out = f.rename(columns={"submit": "submit_time", "start": "start_time", "end": "end_time", "wait": "queue"})
        for c in ("submit_time", "start_time", "end_time"):
            out[c] = out[c].dt.strftime(fmt_time)
        path = folder / "cluster_log.csv"
        out.to_csv(path, index=False)
        return path, {}
    if fmt == "slurm":
        iso = "%Y-%m-%dT%H:%M:%S"
        out = {"JobID": f["job_id"], "User": f["user"], "Account": f["vc"], "Partition": "gpu",
               "Submit": f["submit"].dt.strftime(iso), "Start": f["start"].dt.strftime(iso),
               "End": f["end"].dt.strftime(iso), "State": f["state"],
               "AllocTRES": "cpu=8,gres/gpu=" + f["gpu_num"].astype(str) + ",mem=64G,node=1"}
        import pandas as pd
        path = folder / "sacct.txt"
        pd.DataFrame(out).to_csv(path, index=False, sep="|")
        return path, {}
    if fmt == "tiresias":
        import pandas as pd
        t = (f["submit"] - f["submit"].min()).dt.total_seconds().astype(int)
        out = pd.DataFrame({"job_id": f["job_id"], "num_gpu": f["gpu_num"].clip(lower=1), "submit_time": t,
                            "iterations": 1000, "model_name": "resnet50", "duration": f["duration"], "interval": 0})
        path = folder / "jobs.csv"
        out.to_csv(path, index=False)
        return path, {}
    if fmt == "mapped":
        out = f.rename(columns={"submit": "ts"})
        out["ts"] = out["ts"].dt.strftime(fmt_time)
        path = folder / "any.csv"
        out.drop(columns=["start", "end"]).to_csv(path, index=False)
        return path, {"mapping": "submit=ts,gpus=gpu_num,queue=vc,user=user,duration=duration,job_id=job_id"}
    raise SystemExit(f"unknown format {fmt}")


def load(path: str, mapping: str | None) -> None:
    """In a fresh process: read the file, print wall seconds and peak RSS (the reading alone)."""
    from dlsched.workload.io import load_workload
    t0 = time.perf_counter()
    jobs = load_workload(path, mapping=mapping)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{len(jobs):>9,} jobs  {wall:6.2f} s  peak RSS {rss:,.0f} MB", flush=True)
    print(f"RESULT {len(jobs)} {wall} {rss}", flush=True)


def _read_apart(label: str, ref: str, mapping: str) -> tuple[str, int, float, float]:
    """`load` in a fresh process: (its line, jobs, wall seconds, peak RSS MiB); exits on failure."""
    import subprocess
    r = subprocess.run([sys.executable, __file__, "--load", ref, mapping], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{label}: {(r.stderr.strip().splitlines() or ['failed'])[-1]}")
    shown, result = r.stdout.strip().splitlines()
    _, jobs, wall, rss = result.split()
    return shown, int(jobs), float(wall), float(rss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--formats", nargs="+", default=["helios", "slurm", "tiresias", "mapped"])
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md as it is")
    ap.add_argument("--no-philly", action="store_true", help="leave out the whole bundled Philly trace (goal <= 2 s)")
    ap.add_argument("--load", nargs=2, metavar=("FILE", "MAP"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.load:
        return load(args.load[0], args.load[1] or None)
    f = frame(args.rows)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.formats:
            path, kw = write(fmt, f, Path(tmp))
            shown, jobs, wall, rss = _read_apart(fmt, str(path), kw.get("mapping", ""))
            print(f"{fmt:<9} {args.rows:>9,} rows ({path.stat().st_size / 1e6:,.0f} MB file)  {shown}", flush=True)
            rows.append(f"| {fmt} | {args.rows:,} | {path.stat().st_size / 1e6:,.0f} | {jobs:,} | {wall:.2f} "
                        f"| {rss:,.0f} |")
        if not args.no_philly:      # the other goal: the whole Philly per-job trace in <= 2 s
            shown, jobs, wall, rss = _read_apart("philly", "philly", "")
            print(f"philly    (bundled, whole trace)  {shown}", flush=True)
            rows.append(f"| philly (bundled, the whole per-job trace) | {jobs:,} | 3 | {jobs:,} | {wall:.2f} "
                        f"| {rss:,.0f} |")
    if args.no_write:
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from results import measured, update_results
    out = update_results("trace-read", [
        "## Reading a large trace (`benchmarks/bench_trace_read.py`)", "",
        "Goal (issue \"Every public trace format\"): 1 M rows of any CSV format in <= 10 s, peak memory "
        "under 1 GB; the whole Philly per-job trace in <= 2 s. Each read in a fresh process (`load_workload`): "
        "generated rows, seed 0, and the bundled `philly` trace.", "",
        measured(f"python benchmarks/bench_trace_read.py --rows {args.rows} --formats {' '.join(args.formats)}") + ".",
        "", "| format | rows | file (MB) | jobs kept | read (s) | peak RSS (MiB) |",
        "| --- | --- | --- | --- | --- | --- |", *rows])
    print(f"updated {out}")

if __name__ == "__main__":
    main()
