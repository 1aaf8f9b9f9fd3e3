"""`dlsched sweep` and `dlsched plan` as a user runs them: the console script, each run on its own
private local Ray (2 CPUs)."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

DLSCHED = str(Path(sys.executable).parent / "dlsched")

SWEEP = """\
name: t
clusters: [seed000]
workloads: ["poisson:jobs=40,rate=0.01", jobs.csv]
policies: [fifo, tiresias]
seeds: 2
parameters:
  restart_delay_s: [0, 60]
"""


def run(*args, cwd=None, timeout=300):
    return subprocess.run([DLSCHED, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def test_sweep_streams_cells_reports_a_failed_one_and_skips_done_cells_on_a_re_run(tmp_path):
    # jobs.csv has a bad row: its cells fail, the generator's cells run and are kept
    (tmp_path / "jobs.csv").write_text("job_id,submit_time_s,workers,duration_s\nj1,0,2,600\nj2,10,1,oops\n")
    (tmp_path / "s.yaml").write_text(SWEEP)
    out = tmp_path / "out"
    r = run("sweep", tmp_path / "s.yaml", "--out", out, "--workers", 2)
    assert r.returncode == 1, r.stderr
    assert "8 of 16 cells failed" in r.stderr and "jobs.csv, line 3" in r.stderr
    assert "Traceback" not in r.stderr
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 8 and set(df["policy"]) == {"fifo", "tiresias"}
    assert set(df["params.restart_delay_s"]) == {0, 60} and set(df["seed"]) == {0, 1}
    assert (df["finished"] == 40).all() and df["mean_jct_s"].gt(0).all()
    report = (out / "report.md").read_text()
    assert "## Failed cells" in report and report.count("jobs.csv, line 3") == 8
    assert len(list((out / "cells").glob("*.json"))) == 8
    assert len(list((out / "failed").glob("*.json"))) == 8
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}

    # fixed input: the re-run skips the 8 done cells and runs the 8 that failed
    (tmp_path / "jobs.csv").write_text("job_id,submit_time_s,workers,duration_s\nj1,0,2,600\nj2,10,1,900\n")
    r = run("sweep", tmp_path / "s.yaml", "--out", out, "--workers", 2)
    assert r.returncode == 0, r.stderr
    assert "16 cells: 8 run, 8 already done, 0 failed" in r.stdout
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json") if p.name in stamps} == stamps
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 16 and df["key"].is_unique
    assert "## Failed cells" not in (out / "report.md").read_text()
    assert not (out / "failed").exists()             # no failure in this run: no (empty) failed/ left
    # (a changed input file is a new cell: tests/unit/test_sweep_grid.py)


def test_sweep_input_errors_are_one_line_before_any_work(tmp_path):
    out = tmp_path / "out"
    cases = {
        "clusters: [seed000]\nworkloads: [pollux-6]\npolicies: [fifo]\ncolour: red\n": "colour: unknown field",
        "clusters: [seed000]\nworkloads: [pollux-6]\npolicies: [fiffo]\n": "policies[0]: unknown policy 'fiffo'",
        "clusters: [nowhere.yaml]\nworkloads: [pollux-6]\npolicies: [fifo]\n": "clusters[0]",
        "clusters: [seed000]\nworkloads: [pollux-6]\npolicies: [fifo]\nseeds: -1\n": "seeds",
        "clusters: [seed000]\nworkloads: [pollux-6]\npolicies: [fifo]\nparameters: {restart_delay_s: [-5]}\n":
            "parameters.restart_delay_s[0]",
        "clusters: [seed000]\nworkloads: [pollux-6]\npolicies: [fifo]\nparameters: {round_s: [0]}\n":
            "round_s",
        "clusters: [seed000]\nworkloads: [pollux-6]\npolicies: [fifo]\nparameters: {speed: [1]}\n":
            "parameters.speed: unknown parameter",
    }
    for text, want in cases.items():
        f = tmp_path / "bad.yaml"
        f.write_text(text)
        r = run("sweep", f, "--out", out)
        assert r.returncode == 2, (text, r.stderr)
        assert want in r.stderr and str(f) in r.stderr, (want, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert not out.exists()
    f = tmp_path / "ok.yaml"
    f.write_text("clusters: [seed000]\nworkloads: [pollux-6]\npolicies: [fifo]\n")
    r = run("sweep", f, "--out", out, "--ray-address", "127.0.0.1:1")
    assert r.returncode == 2 and "no Ray head answers there" in r.stderr
    r = run("sweep", f, "--workers", 0)
    assert r.returncode == 2 and "--workers" in r.stderr


def test_plan_finds_the_smallest_cluster_and_the_best_policy(tmp_path):
    out = tmp_path / "plan"
    r = run("plan", "-w", "poisson:jobs=120,rate=0.01", "-c", "seed000", "--policies", "fifo,tiresias",
            "--target", "p95_wait_s<=1h", "--out", out, "--workers", 2, "--max-nodes", 80)
    assert r.returncode == 0, r.stderr
    plan = json.loads((out / "plan.json").read_text())
    ans = plan["answers"][""]
    assert ans is not None and "answer: %d nodes" % ans["nodes"] in r.stdout
    curve = pd.read_csv(out / "curve.csv")
    assert (out / "curve.png").stat().st_size > 0
    for policy, rows in curve.groupby("policy"):
        met = rows[rows["met"]]["nodes"]
        if met.empty:
            continue
        best = met.min()
        # the size below the answer was tried and missed (or is below --min-nodes)
        assert best == 1 or not rows[rows["nodes"] == best - 1]["met"].any()
        assert (rows[rows["nodes"] == best - 1]["met"] == False).all()  # noqa: E712
        assert rows[rows["nodes"] == best]["p95_wait_s"].iloc[0] <= 3600
    # the answer is the smallest size any policy meets the target at
    smallest = curve[curve["met"]].groupby("policy")["nodes"].min()
    assert ans["nodes"] == smallest.min() and ans["policy"] in smallest[smallest == smallest.min()].index


def test_plan_under_queues_keeps_the_quotas_while_the_nodes_grow(tmp_path):
    """Under kueue a queue runs within its quota (and what others lend): 4 GPUs never meet the
    target however many nodes there are. Under kai the whole cluster is divided, so nodes help."""
    q = tmp_path / "q.yaml"
    q.write_text("queues:\n  - name: default\n    quotas:\n      gpu: {nominal: 4}\n")
    base = ["plan", "-w", "poisson:jobs=60,rate=0.01", "-c", "seed000", "--target", "p95_wait_s<=1h",
            "--workers", 2, "--max-nodes", 80, "--queues", q]
    r = run(*base, "--out", tmp_path / "kueue")
    assert r.returncode == 0, r.stderr
    assert "no size up to the limit meets" in r.stdout
    curve = pd.read_csv(tmp_path / "kueue" / "curve.csv")
    assert (curve["nodes"] >= 80).any() and not curve["met"].any()
    r = run(*base, "--tenancy", "kai", "--out", tmp_path / "kai")
    assert r.returncode == 0, r.stderr
    ans = json.loads((tmp_path / "kai" / "plan.json").read_text())["answers"][""]
    assert ans is not None and ans["nodes"] <= 80


def test_plan_input_errors(tmp_path):
    base = ["plan", "-w", "poisson:jobs=20", "-c", "seed000", "--out", tmp_path / "p"]
    for extra, want in [(["--target", "p95_wait<=1h"], "unknown metric"),
                        (["--target", "p95_wait_s=1h"], "METRIC<=VALUE"),
                        (["--target", "gpu_util>=2h"], "takes no time unit"),
                        (["--target", "p95_wait_s<=1h", "--policies", "fifo,nope"], "unknown profile 'nope'"),
                        (["--target", "p95_wait_s<=1h", "--min-nodes", 5, "--max-nodes", 2], "--max-nodes 2"),
                        (["--target", "p95_wait_s<=1h", "--tenant", "nobody"], "--tenant nobody"),
                        (["--target", "p95_wait_s<=1h", "--group", 3], "--group 3"),
                        (["--target", "p95_wait_s<=1h", "--queues", tmp_path / "nope.yaml"], "nope.yaml"),
                        (["--target", "p95_wait_s<=1h", "--tenancy", "kai"], "--tenancy: needs --queues"),
                        (["--target", "p95_wait_s<=1h", "--queues", "philly", "--tenancy", "kueu"], "--tenancy: unknown mode")]:
        r = run(*base, *extra)
        assert r.returncode == 2, (extra, r.stderr)
        assert want in r.stderr and len(r.stderr.strip().splitlines()) == 1, (want, r.stderr)


def test_failed_folder_only_while_a_cell_has_failed(tmp_path):
    """OUT/failed/ is made by the first failure of a run and holds that run's failures only: a
    sweep whose cells all succeed leaves none (no Ray: the store alone)."""
    from dlsched.sweep.cells import CellStore
    from dlsched.sweep.grid import Cell
    store = CellStore(tmp_path / "out")
    store.prepare()
    assert (tmp_path / "out" / "cells").is_dir() and not store.failed_dir.exists()
    a, b = Cell("seed000", "poisson:jobs=5", "fifo", 0), Cell("seed000", "poisson:jobs=5", "fifo", 1)
    store.save_done(a, {"metrics": {"mean_jct_s": 1.0}, "wall_s": 0.1})
    store.tidy()
    assert not store.failed_dir.exists()
    store.save_failed(b, "boom")
    assert (store.failed_dir / f"{b.key()}.json").is_file() and store.failed_dir.stat().st_mode & 0o777 == 0o700
    store.tidy()
    assert store.failed_dir.exists()                  # still holds a failure
    store.save_done(b, {"metrics": {"mean_jct_s": 2.0}, "wall_s": 0.1})
    store.tidy()
    assert not store.failed_dir.exists()
    # a failure of an earlier run, of a cell that is no more (its input changed): forgotten
    store.save_failed(Cell("seed000", "poisson:jobs=6", "fifo", 0), "boom")
    store.prepare()
    assert not store.failed_dir.exists() and (tmp_path / "out" / "cells").is_dir()


def test_the_example_sweep_varies_its_jobs_per_seed_and_notes_a_fixed_trace(tmp_path):
    """examples/sweep.yaml's seeds draw different workloads (its report's ± is a spread over
    workloads); a trace's cells are the same jobs whatever the seed, and the report says so."""
    from dlsched.sweep.grid import load_sweep, seeded
    from dlsched.sweep.run import SweepOutcome, write_report
    from dlsched.workload.io import load_workload
    sw = load_sweep(Path(__file__).resolve().parents[2] / "examples" / "sweep.yaml")
    seeds = sorted({c.seed for c in sw.cells})
    assert len(seeds) == 2
    for wl in {c.workload for c in sw.cells}:
        assert seeded(wl)
        jobs = [[(j.submit_time_s, len(j.tasks), j.duration_s) for j in load_workload(wl, seed=s)] for s in seeds]
        assert jobs[0] != jobs[1]
    assert not seeded("pollux-6") and not seeded(str(tmp_path / "jobs.csv")) and seeded("poisson:jobs=5")

    f = tmp_path / "s.yaml"
    f.write_text("clusters: [pollux]\nworkloads: [pollux-6, 'poisson:jobs=5']\npolicies: [fifo]\nseeds: 2\n")
    write_report(SweepOutcome(load_sweep(f), [], [], 0, 0, tmp_path))
    report = (tmp_path / "report.md").read_text()
    assert "Fixed workloads: pollux-6. Their jobs are the same whatever the seed" in report   # not poisson
    f.write_text("clusters: [pollux]\nworkloads: [pollux-6]\npolicies: [fifo]\nseeds: 1\n")
    write_report(SweepOutcome(load_sweep(f), [], [], 0, 0, tmp_path))
    assert "Fixed workloads" not in (tmp_path / "report.md").read_text()
