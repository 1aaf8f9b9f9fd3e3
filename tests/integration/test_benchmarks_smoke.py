"""Every script in benchmarks/ runs at a tiny size, so that none can rot unseen (bench_runtime.py
once died at its first GET because the server had come to need its token on reads, and the
runtime's latencies in RESULTS.md could no longer be measured again).

Each script runs as a user runs it (a subprocess of this Python, from the project root) with the
arguments of its entry in SMOKE; it must exit 0 and print its figures (the entry's pattern). A
script that writes a block of benchmarks/RESULTS.md writes it here too, with the flag that asks
for it where it has one, but into a temporary file (DLSCHED_BENCH_RESULTS, benchmarks/results.py):
the block must be there, and benchmarks/RESULTS.md must be left as it was.

benchmarks/results.py is the scripts' library (update_results, measured), not a script, and
chaos_cluster.py, chaos_kills.py and chaos_report.py are parts of chaos.py: LIBRARIES.
A new script in benchmarks/ without an entry in SMOKE (or LIBRARIES) fails
test_every_benchmark_script_has_a_smoke_entry.

The scripts that start Ray (a cluster of their own, in a subprocess) are test_ray_benchmark's;
tests/conftest.py must list that test in RAY_OWN (a prefix of its node ids), so that they run one
after another in the worker of the tests that start their own Ray, never beside them:
test_the_ray_benchmarks_run_in_the_ray_own_scope checks it. The others (test_benchmark) are
spread over the workers like any test.
"""
from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "RESULTS.md"
LIBRARIES = {"results.py": "update_results, results_path, measured, cpu_reference_s: imported by the scripts",
             # chaos.py's parts (its smoke entry runs them): the server and cluster, the kills, the end
             "chaos_cluster.py": "Server, ChaosCluster, stack_dump: imported by chaos.py",
             "chaos_kills.py": "the kills and their recoveries (_Kills): imported by chaos.py",
             "chaos_report.py": "the end checks, figures and RESULTS.md block (_Report): imported by chaos.py"}


@dataclass(frozen=True)
class Smoke:
    args: tuple[str, ...]               # the tiny run ({tmp}: the test's temp folder)
    figures: str                        # a regex the output (stdout + stderr) must match
    block: str | None = None            # the RESULTS.md block it writes (into the temp file)
    ray: bool = False                   # starts a Ray cluster of its own
    timeout_s: float = 240.0
    then: tuple[tuple[str, ...], ...] = field(default=())   # more runs, each must exit 0


SMOKE: dict[str, Smoke] = {
    # simulator speed: Pollux workload-6 only (the whole Philly trace is the benchmark's other case)
    "bench_sim.py": Smoke(("--cases", "pollux"), r"Pollux workload-6: 160 jobs, simulate [\d.]+ s", block="fifo"),
    # two policies on the 60-job demo workload instead of every policy on the whole Philly trace
    "bench_policies.py": Smoke(("--policies", "fifo,tiresias", "--workload", "sample", "--cluster", "seed002",
                                "--limit-s", "120"),
                               r"\| tiresias \| [\d.]+ \| [\d.]+ \| [\d,]+ \| [\d,]+ \|", block="policies"),
    # fifo on the first 800 jobs of the per-VC Philly replay against the bare loop
    "bench_tenancy.py": Smoke(("--limit", "800", "--policies", "fifo", "--limit-s", "120"),
                              r"\| fifo \| [\d.]+ \| \d+x \| [\d,]+ \|", block="tenancy"),
    # two max-min solves (agnostic and _perf) on 20 jobs
    "bench_hetero.py": Smoke(("--jobs", "20", "--policies", "max_min_fairness", "max_min_fairness_perf"),
                             r"\| max_min_fairness_perf \| [\d.]+ \|", block="hetero"),
    # two cells of Gavel's continuous experiment on a window of 40 jobs
    "bench_gavel.py": Smoke(("--cells", "gavel-fifo@2", "gavel-max-min-fairness-perf@2", "--window", "40", "80"),
                            r"\| gavel-max-min-fairness-perf \| 2 \| [\d.]+ \| [\d.]+ \|", block="gavel"),
    # 2,000 generated rows of two formats, each read in a fresh process
    "bench_trace_read.py": Smoke(("--rows", "2000", "--formats", "helios", "tiresias"),
                                 r"tiresias\s+2,000 rows .* jobs\s+[\d.]+ s\s+peak RSS", block="trace-read"),
    # Pollux's throughput model fitted on each application's placements.csv (a few seconds)
    "goodput_fit.py": Smoke((), r"bert\s+\d+\s+[\d.]+%", block="goodput-fit"),
    "bench_round.py": Smoke(("--tasks", "300", "--nodes", "50"),
                            r"tetris: [\d,]+ of 300 tasks placed on 50 nodes in [\d.]+ s", block="round"),
    # Pollux's policy on the first 20 jobs of workload 6 (the whole workload: about 20 s)
    "bench_pollux.py": Smoke(("--workloads", "6", "--jobs", "20"),
                             r"pollux-6: 20 jobs, \d+ rounds, wall [\d.]+ s", block="pollux"),
    # one Optimus round of 20 jobs, then Pollux workload-6 end to end (tiresias, optimus: seconds)
    "bench_optimus.py": Smoke(("--jobs", "20", "--nodes", "20"),
                              r"optimus round: 20 jobs, [\d,]+ tasks placed on 20 nodes[\s\S]*"
                              r"pollux-6 optimus: import \+ load [\d.]+ s", block="optimus"),
    "bench_scale.py": Smoke(("--jobs", "200"),
                            r"poisson:jobs=200,rate=0.05 on v100-1500: [\d.]+ s[\s\S]*"
                            r"poisson:jobs=200,rate=0.05 on v100-1500, uplinks 8:1: [\d.]+ s[\s\S]*"
                            r"non-blocking, 200 jobs: low / high[\s\S]*uplinks 8:1, 200 jobs: low / high",
                            block="scale"),
    # fifo on the demo workload, this tree against HEAD checked out in a clone's worktree
    # (--repo: this repository's .git is left untouched); see test_benchmark for its exit status
    "bench_ab.py": Smoke(("--ref", "HEAD", "--repo", "{tmp}/clone", "--policy", "fifo", "--workload", "sample",
                          "--cluster", "seed002", "--runs", "1", "--results"),
                         r"\| this / ref \| [\d.]+x \| [\d.]+x \|", block="ab"),
    "net_replay.py": Smoke(("record", "--jobs", "300", "--updates", "40", "--out", "{tmp}"),
                           r"v100-1500-os8-300\.pkl",
                           then=(("replay", "{tmp}/v100-1500-os8-300.pkl", "--skip", "10"),)),
    # one random case, exact and a 300 s window
    "reshare_error.py": Smoke(("--cases", "random", "--seeds", "1", "--windows", "300"),
                              r"\| random 1: v100-\d+ \d:1, rate [\d.]+ \| 300 \| [\d.]+% \|"),
    "eventlog_hash.py": Smoke(("fifo@sample@seed002", "--out", "{tmp}/hashes.json"),
                              r'fifo@sample@seed002 \{"events": "[0-9a-f]{16}"',
                              then=(("--compare", "{tmp}/hashes.json", "{tmp}/hashes.json"),)),
    # --- Ray (test_ray_benchmark)
    # 2 cells of 50 jobs, in one process and on the 2-node cluster
    "bench_sweep.py": Smoke(("--jobs", "50", "--seeds", "1"), r"2-node Ray cluster: 2 cells in [\d.]+ s",
                            block="sweep", ray=True),
    # each operation once (one cold migration), 5 jobs queued and 3 timed submissions, on 2 nodes
    # (half the warm pool to start); the decision run for fifo-backfill only (fifo's is the same
    # code on a server of its own: about 20 s more)
    "bench_runtime.py": Smoke(("--repeats", "1", "--nodes", "2", "--queued", "5", "--events", "3",
                               "--decision-policies", "fifo-backfill"),
                              r"\| launch: submit -> first step \| [\d.]+[^|]* \| [\d.]+ \|[\s\S]*\| fifo-backfill \| \d+ \|",
                              block="runtime", ray=True, timeout_s=600.0),
    # two short jobs on one node, no kill comes (tests/runtime/test_chaos.py is the run with kills)
    "chaos.py": Smoke(("--jobs", "2", "--nodes", "1", "--steps", "3,5", "--step-s", "0.1", "--kill-every-s",
                       "1000", "--seed", "1", "--quiet", "--results"), r'"done": 2,', block="chaos", ray=True),
    # fifo only (every profile is the benchmark): the two shipped examples to done, on 2 nodes (they
    # ask for 4 GPUs between them: both run at once, as on the benchmark's 4)
    "runtime_matrix.py": Smoke(("--policies", "fifo", "--timeout-s", "150", "--nodes", "2", "--results"),
                               r"\| fifo \| done, \d+ steps, 1 run\(s\) \| done, \d+ steps, 1 run\(s\) \|",
                               block="runtime-matrix", ray=True, timeout_s=360.0),
    # the Optimus run only, one parameter-server job of 20 iterations
    "bench_mechanisms.py": Smoke(("--runs", "optimus", "--optimus-jobs", "1", "--iterations", "20", "--results"),
                                 r"\| Optimus refit \| \d+ \|", block="mechanisms", ray=True, timeout_s=360.0),
}

RAY = sorted(k for k, s in SMOKE.items() if s.ray)
PLAIN = sorted(k for k, s in SMOKE.items() if not s.ray)
RAY_NODE_ID = "tests/integration/test_benchmarks_smoke.py::test_ray_benchmark"


def test_every_benchmark_script_has_a_smoke_entry():
    scripts = {p.name for p in BENCH.glob("*.py")}
    missing = sorted(scripts - set(SMOKE) - set(LIBRARIES))
    assert not missing, f"benchmarks/{missing[0]} has no entry in SMOKE (or LIBRARIES, if it is no script) in {__file__}"
    gone = sorted((set(SMOKE) | set(LIBRARIES)) - scripts)
    assert not gone, f"SMOKE / LIBRARIES name benchmarks/{gone[0]}, which is not there"
    assert not set(SMOKE) & set(LIBRARIES)


def test_the_ray_benchmarks_run_in_the_ray_own_scope():
    """The Ray-starting runs must be in tests/conftest.py's "ray-own" scope: spread like other
    tests, one would start a third Ray cluster beside the two the Ray workers run."""
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text())
    own = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "RAY_OWN" for t in n.targets)), ())
    assert RAY and all(f"{RAY_NODE_ID}[{s}]".startswith(own) for s in RAY), \
        f"add {RAY_NODE_ID!r} to RAY_OWN in tests/conftest.py"
    assert not any(f"tests/integration/test_benchmarks_smoke.py::test_benchmark[{s}]".startswith(own) for s in PLAIN)


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _run(script: str, tmp_path: Path) -> None:
    smoke = SMOKE[script]
    out_file = tmp_path / "RESULTS.md"
    # the blocks into a temp file; the CPU reference of each block's stamp once, not the best of 3
    env = {**os.environ, "DLSCHED_BENCH_RESULTS": str(out_file), "DLSCHED_BENCH_REFERENCE_RUNS": "1",
           "PYTHONUNBUFFERED": "1"}
    if script == "bench_ab.py":
        if shutil.which("git") is None or not (ROOT / ".git").exists():
            pytest.skip("bench_ab.py compares git commits: no git repository here")
        # a clone that borrows this repository's objects (read only): its worktree is added there
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(ROOT), str(tmp_path / "clone")],
                       check=True, capture_output=True)
    before = _digest(RESULTS)
    for i, args in enumerate((smoke.args, *smoke.then)):
        cmd = [sys.executable, str(BENCH / script), *(a.replace("{tmp}", str(tmp_path)) for a in args)]
        t = time.monotonic()
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=smoke.timeout_s)
        took = time.monotonic() - t
        text = r.stdout + r.stderr
        why = f"{' '.join(cmd[1:])}: exit {r.returncode} after {took:.0f} s\n{text[-4000:]}"
        # bench_ab exits 1 when this tree's uncommitted changes to src/ changed the result: its verdict
        verdict = script == "bench_ab.py" and r.returncode == 1 and "| DIFFERENT |" in text and "+ changes" in text
        assert r.returncode == 0 or verdict, why
        if i == 0:
            assert re.search(smoke.figures, text), f"its figures are not in the output: {why}"
    assert _digest(RESULTS) == before, f"{script} changed benchmarks/RESULTS.md"
    if smoke.block is not None:
        assert out_file.exists(), f"{script} wrote no block"
        written = out_file.read_text()
        assert f"<!-- BENCH:{smoke.block} -->" in written and f"<!-- /BENCH:{smoke.block} -->" in written, written


@pytest.mark.parametrize("script", PLAIN)
def test_benchmark(script, tmp_path):
    _run(script, tmp_path)


@pytest.mark.parametrize("script", RAY)
def test_ray_benchmark(script, tmp_path):
    _run(script, tmp_path)
