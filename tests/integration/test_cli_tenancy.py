"""The tenancy on the command line: simulate and compare with --queues and --tenancy (per-queue
figures in summary.json), bad queue input on one line naming the file, line and field (exit 2),
and `whatif --queues`: each queue's wait under another queue file, beside the present one."""
import json

import pytest
import yaml
from typer.testing import CliRunner

from dlsched.cli.main import app, main

QUEUES = {"queues": [{"name": "team-a", "quotas": {"gpu": {"nominal": 4, "borrowing_limit": 0}}},
                     {"name": "team-b", "quotas": {"gpu": {"nominal": 8}}}]}
JOBS = ("job_id,submit_time_s,workers,gpus_per_worker,duration_s,queue\n"
        + "".join(f"a{i},{i},1,2,600,team-a\n" for i in range(6)) + "b0,0,1,2,600,team-b\n")


def _cli(*args):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def _main(capsys, *args):
    """The entry point as a user runs it: (exit status, stderr)."""
    rc = main(list(args))
    return rc, capsys.readouterr().err


def test_simulate_with_queues_writes_per_queue_figures(tmp_path):
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(QUEUES))
    (tmp_path / "w.csv").write_text(JOBS)
    r = _cli("simulate", "-c", "seed002", "-w", str(tmp_path / "w.csv"), "--queues", str(tmp_path / "q.yaml"),
             "-o", str(tmp_path / "out"), "--report")
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    import pandas as pd
    series = pd.read_parquet(tmp_path / "out" / "queues.parquet")
    assert set(series["queue"]) >= {"team-a", "team-b"} and (series["entitled_gpus"][series["queue"] == "team-a"] == 4).all()
    page = (tmp_path / "out" / "report.html").read_text()
    assert "queues.png" in page and "Jain" in page and "<td>team-a</td>" in page
    assert s["tenancy"] == "kueue" and set(s["queues"]) >= {"team-a", "team-b"}
    a = s["queues"]["team-a"]
    assert a["jobs"] == 6 and a["quota_wait_s"] > 0 and a["borrowed_gpu_hours"] == 0
    assert 0 < s["jain_index"] <= 1 and s["max_ftf_rho"] >= 1
    assert s["users"]["default"]["jobs"] == 7
    jobs = pd.read_parquet(tmp_path / "out" / "jobs.parquet")
    assert jobs["ftf_rho"].max() == pytest.approx(s["max_ftf_rho"]) and (jobs["ftf_rho"] >= 1 - 1e-9).all()
    assert s["provenance"]["inputs"]["queues"]["file"].endswith("q.yaml")
    r = _cli("compare", "-c", "seed002", "-w", str(tmp_path / "w.csv"), "--queues", str(tmp_path / "q.yaml"),
             "--tenancy", "kueue-fair", "-p", "fifo,tiresias", "-o", str(tmp_path / "cmp"))
    assert r.exit_code == 0, r.output
    both = json.loads((tmp_path / "cmp" / "summary.json").read_text())["policies"]
    assert {p: v["tenancy"] for p, v in both.items()} == {"fifo": "kueue-fair", "tiresias": "kueue-fair"}


def test_bad_queue_input_is_one_line_and_nothing_runs(tmp_path, capsys):
    (tmp_path / "w.csv").write_text(JOBS.replace("team-b\n", "team-x\n"))
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(QUEUES))
    out = tmp_path / "out"
    w, q = str(tmp_path / "w.csv"), str(tmp_path / "q.yaml")
    rc, err = _main(capsys, "simulate", "-c", "seed002", "-w", w, "--queues", q, "-o", str(out))
    assert rc == 2 and "w.csv, line 8" in err and ": queue: job b0" in err and "'team-x' is an unknown queue" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    (tmp_path / "bad.yaml").write_text("queues:\n  - name: a\n    quotas:\n      gpu: {nominal: -1}\n")
    rc, err = _main(capsys, "simulate", "-c", "seed002", "-w", w, "--queues", str(tmp_path / "bad.yaml"), "-o", str(out))
    assert rc == 2 and "bad.yaml" in err and "line 4" in err and "nominal" in err
    rc, err = _main(capsys, "simulate", "-c", "seed002", "-w", w, "--tenancy", "kai", "-o", str(out))
    assert rc == 2 and "--tenancy: needs --queues" in err
    rc, err = _main(capsys, "simulate", "-c", "seed002", "-w", w, "--queues", q, "--tenancy", "kuebe", "-o", str(out))
    assert rc == 2 and "unknown mode 'kuebe'" in err
    assert not out.exists()


def test_whatif_with_other_quotas_from_a_state_file(tmp_path):
    doc = {"schema": "dlsched-state", "version": 1, "cluster": "seed002", "policy": "fifo",
           "queues": QUEUES, "tenancy": "kueue", "jobs": [
               {"job_id": "r", "submit_time_s": -10, "workers": 1, "gpus_per_worker": 4, "duration_s": 100,
                "queue": "team-a", "state": "running", "started_s": -5,
                "placement": [{"task": 0, "node": 0, "gpus": [0, 1, 2, 3]}]},
               {"job_id": "w", "submit_time_s": -1, "workers": 1, "gpus_per_worker": 4, "duration_s": 10,
                "queue": "team-a"}]}
    (tmp_path / "state.json").write_text(json.dumps(doc))
    more = {"queues": [{"name": "team-a", "quotas": {"gpu": {"nominal": 8, "borrowing_limit": 0}}},
                       {"name": "team-b", "quotas": {"gpu": {"nominal": 4}}}]}
    (tmp_path / "more.yaml").write_text(yaml.safe_dump(more))
    r = _cli("whatif", "--state", str(tmp_path / "state.json"), "--queues", str(tmp_path / "more.yaml"), "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["rows"]
    assert rows == [{"policy": "fifo", "queue": "team-a", "wait_now_s": 101.0, "wait_with_new_queues_s": 1.0}]


def test_a_queue_file_names_its_mode_and_settings(tmp_path, capsys):
    spec = {"tenancy": {"mode": "kueue-fair", "strategy": "best-effort", "reclaim_min_runtime_s": 30}, **QUEUES}
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (tmp_path / "w.csv").write_text(JOBS)
    r = _cli("simulate", "-c", "seed002", "-w", str(tmp_path / "w.csv"), "--queues", str(tmp_path / "q.yaml"),
             "-o", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["tenancy"] == "kueue-fair"
    from dlsched.tenancy import load_queues
    from dlsched.tenancy.engine import Tenancy
    t = Tenancy(load_queues(tmp_path / "q.yaml"))
    assert (t.mode.name, t.mode.spec.strategy, t.mode.spec.reclaim_min_runtime_s) == ("kueue-fair", "best-effort", 30)
    assert Tenancy(load_queues(tmp_path / "q.yaml"), "kai").mode.spec.strategy == "profile"   # another mode: its own
    spec["tenancy"]["strategy"] = "sometimes"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    rc, err = _main(capsys, "simulate", "-c", "seed002", "-w", str(tmp_path / "w.csv"), "--queues",
                    str(tmp_path / "bad.yaml"), "-o", str(tmp_path / "o2"))
    assert rc == 2 and "bad.yaml, line 3: tenancy.strategy: must be profile, strict or best-effort" in err


def test_policies_lists_the_tenancy_parts_and_modes():
    r = _cli("policies", "--all")
    assert r.exit_code == 0, r.output
    modes = r.output.split("\ntenancy:\n", 1)[1]
    assert all(f"  {m} " in modes for m in ("kueue", "kueue-fair", "kai", "volcano-proportion", "volcano-capacity",
                                            "slurm-fairtree"))
    assert "\nvictims:\n  kai " in r.output and "\nledger:\n  decayed " in r.output
