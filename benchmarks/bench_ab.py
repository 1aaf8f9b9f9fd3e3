"""The same benchmark case on two versions of the code, on the same machine, one run of each in
turn: how much faster a change is where the machine's own speed varies from day to day.

    python benchmarks/bench_ab.py --ref REF [--policy fifo] [--workload philly] [--cluster philly]
                                  [--runs 3] [--results] [--repo DIR]

REF is a git commit (or branch, or tag) of this repository (or of the clone `--repo` names); it is
checked out into a temporary git worktree of that repository and imported from there
(PYTHONPATH), while "this tree" imports ./src. Each run is
a fresh process (bench_sim.py's child: load the workload, then `dlsched.simulate` without rate
records), so imports and start-up count in the process wall time. The two versions' mean JCTs
are printed too: a speed-up that changed the result is not one. `--results` writes the table
into benchmarks/RESULTS.md (block `ab`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_sim import CHILD
from results import measured, update_results

ROOT = Path(__file__).resolve().parent.parent


def run_once(src: Path, workload: str, cluster: str, policy: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, workload, cluster, policy],
                         check=True, capture_output=True, text=True, env=env)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d["wall_s"] = time.perf_counter() - t
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", required=True, help="the git commit, branch or tag to compare with")
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--workload", default="philly")
    ap.add_argument("--cluster", default="philly")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--results", action="store_true", help="write the table into benchmarks/RESULTS.md")
    ap.add_argument("--repo", type=Path, default=ROOT,
                    help="the git repository REF is taken from, and its temporary worktree added to (default: "
                         "this one; a clone keeps this one's .git untouched, as the smoke test does)")
    a = ap.parse_args()
    if a.runs < 1:
        print("error: --runs: give 1 or more", file=sys.stderr)
        sys.exit(2)
    repo = str(a.repo)
    rev = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "--verify", f"{a.ref}^{{commit}}"],
                         capture_output=True, text=True)
    if rev.returncode != 0:
        print(f"error: --ref {a.ref!r}: not a commit of {'this repository' if a.repo == ROOT else repo}",
              file=sys.stderr)
        sys.exit(2)
    short = rev.stdout.strip()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    # --no-optional-locks: a status must not write the index (another git command may hold it)
    dirty = bool(subprocess.run(["git", "--no-optional-locks", "-C", str(ROOT), "status", "--porcelain", "src"],
                                capture_output=True, text=True).stdout.strip())
    here = f"{head}{' + changes' if dirty else ''}"
    with tempfile.TemporaryDirectory(prefix="dlsched-ab-") as tmp:
        wt = Path(tmp) / "ref"
        subprocess.run(["git", "-C", repo, "worktree", "add", "--detach", "-q", str(wt), short], check=True)
        try:
            runs: dict[str, list[dict]] = {"ref": [], "this": []}
            for i in range(a.runs):
                for key, src in (("ref", wt / "src"), ("this", ROOT / "src")):
                    d = run_once(src, a.workload, a.cluster, a.policy)
                    runs[key].append(d)
                    print(f"run {i + 1} {short if key == 'ref' else here}: simulate {d['sim_s']:.2f} s, "
                          f"process wall {d['wall_s']:.2f} s, mean JCT {d['mean_jct_s']:,.1f} s", flush=True)
        finally:
            subprocess.run(["git", "-C", repo, "worktree", "remove", "--force", str(wt)], check=False)
    med = {k: {m: statistics.median(d[m] for d in v) for m in ("sim_s", "wall_s")} for k, v in runs.items()}
    jct = {k: v[0]["mean_jct_s"] for k, v in runs.items()}
    same = jct["ref"] == jct["this"]
    ratio = {m: med["this"][m] / med["ref"][m] for m in ("sim_s", "wall_s")}
    table = ["| code | simulate (s, median) | process wall (s, median) | mean JCT (s) |", "| --- | --- | --- | --- |",
             f"| {short} (`--ref`) | {med['ref']['sim_s']:.2f} | {med['ref']['wall_s']:.2f} | {jct['ref']:,.1f} |",
             f"| {here} (this tree) | {med['this']['sim_s']:.2f} | {med['this']['wall_s']:.2f} | {jct['this']:,.1f} |",
             f"| this / ref | {ratio['sim_s']:.2f}x | {ratio['wall_s']:.2f}x | {'the same' if same else 'DIFFERENT'} |"]
    print("\n".join(table))
    if a.results:
        lines = ["## The same case on two versions of the code (`benchmarks/bench_ab.py`)", "",
                 measured(f"python benchmarks/bench_ab.py --ref {a.ref} --policy {a.policy} --workload {a.workload} "
                          f"--cluster {a.cluster} --runs {a.runs}")
                 + f": {a.policy} on `{a.workload}` over `{a.cluster}`, {a.runs} runs of each version, in turn.", "",
                 *table]
        print(f"updated {update_results('ab', lines)}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
