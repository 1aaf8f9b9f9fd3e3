"""The dlsched command as a user runs it: the installed console script, in a subprocess."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

DLSCHED = str(Path(sys.executable).parent / "dlsched")


def run(*args, cwd=None):
    return subprocess.run([DLSCHED, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_policies_lists_the_registry():
    r = run("policies")
    assert r.returncode == 0
    names = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    assert {"fifo", "fifo-gang", "fifo-backfill"} <= set(names)


def test_simulate_writes_results(tmp_path):
    out = tmp_path / "run"
    r = run("simulate", "--cluster", "seed002", "--workload", "sample", "--policy", "fifo", "--out", out, "--report")
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    for key in ("jobs", "mean_jct_s", "median_jct_s", "p95_jct_s", "p99_jct_s", "makespan_s", "mean_wait_s",
                "gpu_util", "nic_bytes", "cross_rack_bytes", "sched_time_s", "partial_hold_gpu_s"):
        assert key in summary
    jobs = pd.read_parquet(out / "jobs.parquet")
    assert len(jobs) == summary["jobs"] == 60
    assert (out / "report.html").exists() and (out / "timeline.parquet").exists()
    rounds = pd.read_parquet(out / "rounds.parquet")
    assert len(rounds) == summary["sched_rounds"] and rounds.wall_s.sum() == pytest.approx(summary["sched_time_s"])
    assert "fifo" in r.stdout


def test_simulate_every_pollux_workload_and_a_schema_file(tmp_path):
    for i in range(1, 9):
        r = run("simulate", "-c", "pollux", "-w", f"pollux-{i}", "-p", "fifo", "--out", tmp_path / f"p{i}")
        assert r.returncode == 0, r.stderr
        s = json.loads((tmp_path / f"p{i}" / "summary.json").read_text())
        assert s["finished"] == 160
    w = tmp_path / "w.jsonl.gz"
    assert run("workload", "generate", "poisson:jobs=50", "--out", w, "--seed", "2").returncode == 0
    r = run("simulate", "-c", "liquid-5", "-w", w, "--out", tmp_path / "liq")
    assert r.returncode == 0, r.stderr


def test_compare_writes_an_html_report(tmp_path):
    out = tmp_path / "cmp"
    r = run("compare", "-c", "seed002", "-w", "sample", "-p", "fifo,fifo-gang", "--out", out)
    assert r.returncode == 0, r.stderr
    html = (out / "report.html").read_text()
    assert "fifo-gang" in html and ".png" in html
    assert f"report: {out / 'report.html'}" in r.stdout
    assert (out / "fifo" / "summary.json").exists() and (out / "fifo-gang" / "jobs.parquet").exists()


def test_workload_convert_and_describe(tmp_path):
    out = tmp_path / "w6.csv"
    src = Path(__file__).resolve().parents[2] / "src" / "dlsched" / "data" / "pollux" / "workloads" / "workload-6.csv"
    r = run("workload", "convert", src, "--out", out)
    assert r.returncode == 0, r.stderr
    r = run("workload", "describe", out, "--json")
    d = json.loads(r.stdout)
    assert d["jobs"] == 160


def test_malformed_row_names_file_line_field_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_time_s,workers,duration_s\na,0,1,10\nb,5,two,10\n")
    out = tmp_path / "never"
    r = run("simulate", "-c", "seed002", "-w", bad, "--out", out)
    assert r.returncode != 0
    assert "bad.csv" in r.stderr and "line 3" in r.stderr and "workers" in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("args, needle", [
    (["simulate", "-c", "nosuch", "-w", "sample"], "unknown cluster"),
    (["simulate", "-c", "seed002", "-w", "nosuch-generator"], "nosuch-generator"),
    (["simulate", "-c", "seed002", "-w", "sample", "-p", "nosuch"], "unknown profile 'nosuch'"),
    (["compare", "-c", "seed002", "-w", "sample", "-p", "fifo,nosuch"], "unknown profile 'nosuch'"),
])
def test_user_errors_exit_non_zero_with_a_clear_message(tmp_path, args, needle):
    r = run(*args, "--out", tmp_path / "o")
    assert r.returncode != 0 and needle in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_bad_cluster_yaml_and_policy_config(tmp_path):
    c = tmp_path / "c.yaml"
    c.write_text("node_groups:\n  - {count: 2, gpus: -1, cpus: 4, mem_gb: 8}\n")
    r = run("simulate", "-c", c, "-w", "sample", "--out", tmp_path / "o")
    assert r.returncode != 0 and "c.yaml" in r.stderr and "node_groups[0].gpus" in r.stderr
    p = tmp_path / "p.yaml"
    p.write_text("policies:\n  fifo:\n    blockin: false\n")
    r = run("simulate", "-c", "seed002", "-w", "sample", "--policy-config", p, "--out", tmp_path / "o")
    assert r.returncode != 0 and "p.yaml" in r.stderr and "policies.fifo.blockin" in r.stderr
    assert not (tmp_path / "o").exists()


def test_policy_config_changes_the_run(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("policies:\n  fifo-gang:\n    blocking: false\n")
    a = run("simulate", "-c", "seed002", "-w", "sample", "-p", "fifo-gang", "--out", tmp_path / "a")
    b = run("simulate", "-c", "seed002", "-w", "sample", "-p", "fifo-gang", "--policy-config", p, "--out", tmp_path / "b")
    assert a.returncode == b.returncode == 0
    sa = json.loads((tmp_path / "a" / "summary.json").read_text())
    sb = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert sa["mean_jct_s"] != sb["mean_jct_s"]


def test_rejected_jobs_are_reported(tmp_path):
    w = tmp_path / "big.csv"
    w.write_text("job_id,submit_time_s,workers,duration_s\nbig,0,100,10\nok,1,1,10\n")
    r = run("simulate", "-c", "seed002", "-w", w, "--out", tmp_path / "o")
    assert r.returncode == 0 and "1 job(s) rejected" in r.stderr
    assert pd.read_parquet(tmp_path / "o" / "jobs.parquet").set_index("job_id").loc["big", "state"] == "rejected"


@pytest.mark.parametrize("args", [["simulate", "-c", "seed002", "-w", "sample", "--bogus"], ["nosuchcommand"],
                                  ["simulate", "--cluster"]])
def test_usage_errors_exit_2_without_traceback(args):
    r = run(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.strip()


def test_no_arguments_shows_help():
    r = run()
    assert "simulate" in r.stdout + r.stderr and "Traceback" not in r.stderr
