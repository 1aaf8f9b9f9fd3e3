"""What really happened beside what was simulated: the jobs table's recorded columns and
`--against-trace` on the bundled helios, philly-raw and slurm slices."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from dlsched.api import simulate
from dlsched.cli.main import main
from dlsched.metrics.recorded import against_trace
from dlsched.workload import load_workload

DATA = Path(__file__).resolve().parents[2] / "src" / "dlsched" / "data" / "traces"
HELIOS = DATA / "helios" / "cluster_log.csv"
PHILLY_RAW = DATA / "philly-raw" / "cluster_job_log"
SLURM = DATA / "slurm" / "sacct-parsable2.txt"
TIRESIAS = DATA / "tiresias" / "60_job.csv"


def test_jobs_table_keeps_recorded_wait_and_jct():
    jobs = load_workload(HELIOS)
    res = simulate("philly", jobs, "fifo")
    t = res.jobs.set_index("job_id")
    for j in jobs:
        assert t.loc[j.job_id, "recorded_wait_s"] == pytest.approx(j.recorded_start_s - j.submit_time_s)
        assert t.loc[j.job_id, "recorded_jct_s"] == pytest.approx(j.recorded_end_s - j.submit_time_s)
    assert (t["recorded_jct_s"] >= t["recorded_wait_s"]).all()


def test_no_recorded_times_no_new_columns():
    res = simulate("tiresias-n4g4", load_workload(TIRESIAS), "fifo")
    assert not {"recorded_wait_s", "recorded_jct_s"} & set(res.jobs.columns)
    assert res.jobs.columns[-1] == "switch_lost_gpu_s"


def test_a_job_without_recorded_times_is_nan_beside_one_with():
    from dataclasses import replace
    jobs = load_workload(HELIOS)
    jobs[0] = replace(jobs[0], recorded_start_s=None, recorded_end_s=None)
    t = simulate("philly", jobs, "fifo").jobs.set_index("job_id")
    assert math.isnan(t.loc[jobs[0].job_id, "recorded_wait_s"]) and math.isnan(t.loc[jobs[0].job_id, "recorded_jct_s"])
    assert np.isfinite(t.loc[jobs[1].job_id, ["recorded_wait_s", "recorded_jct_s"]]).all()


def _table(sim_w, rec_w, queues):
    sim_w, rec_w = np.asarray(sim_w, float), np.asarray(rec_w, float)
    return pd.DataFrame({"queue": queues, "wait_s": sim_w, "jct_s": sim_w + 100, "recorded_wait_s": rec_w,
                         "recorded_jct_s": rec_w + 100})


def test_against_trace_figures():
    rng = np.random.default_rng(3)
    sim, rec = rng.exponential(100, 40), rng.exponential(300, 40)
    rec[5] = np.nan                                    # a job the trace did not time
    queues = ["a"] * 25 + ["b"] * 15
    rep = against_trace(_table(sim, rec, queues))
    a = next(r for r in rep["queues"] if r["queue"] == "a")
    assert (a["jobs"], a["recorded_jobs"]) == (25, 24)
    assert a["sim_median_wait_s"] == pytest.approx(np.median(sim[:25]))
    assert a["rec_p95_wait_s"] == pytest.approx(np.nanquantile(rec[:25], 0.95))
    assert rep["all"]["sim_p95_wait_s"] == pytest.approx(np.quantile(sim, 0.95))
    ok = np.isfinite(rec)
    assert rep["jobs_compared_wait"] == 39
    assert rep["spearman_wait"] == pytest.approx(spearmanr(sim[ok], rec[ok]).statistic)
    # the same order is +1, the reverse order -1, whatever the scale
    assert against_trace(_table(sim, sim * 7 + 3, queues))["spearman_jct"] == pytest.approx(1.0)
    assert against_trace(_table(sim, -sim, queues))["spearman_wait"] == pytest.approx(-1.0)


def test_against_trace_constant_side_is_nan_with_a_reason():
    rep = against_trace(_table(np.zeros(5), np.arange(5.0), ["q"] * 5))
    assert math.isnan(rep["spearman_wait"]) and "simulated" in rep["spearman_wait_note"]
    assert rep["spearman_jct_note"] and math.isnan(rep["spearman_jct"])


def test_compare_against_trace_on_helios(tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["compare", "-c", "philly", "-w", str(HELIOS), "-p", "fifo,tiresias", "--against-trace",
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "simulated against recorded wait" in text and "Spearman" in text
    queues = {j.queue for j in load_workload(HELIOS)}
    for p in ("fifo", "tiresias"):
        d = json.loads((out / p / "against_trace.json").read_text())
        jobs = pd.read_parquet(out / p / "jobs.parquet")
        assert {r["queue"] for r in d["queues"]} == queues
        assert d["all"]["jobs"] == len(jobs)
        assert d["all"]["rec_median_wait_s"] == pytest.approx(jobs["recorded_wait_s"].median())
        assert d["jobs_compared_jct"] == int((jobs["jct_s"].notna() & jobs["recorded_jct_s"].notna()).sum())
        assert -1 <= d["spearman_jct"] <= 1


@pytest.mark.parametrize("path,cluster", [(PHILLY_RAW, "philly"), (SLURM, None)])
def test_simulate_against_trace(path, cluster, tmp_path):
    if cluster is None:                 # the Slurm slice asks for A100s
        cluster = tmp_path / "a100.yaml"
        cluster.write_text("node_groups:\n  - {count: 8, gpus: 8, gpu_type: a100, gpu_mem_gb: 80, cpus: 128, "
                           "mem_gb: 1024}\n")
    out = tmp_path / "s"
    assert main(["simulate", "-c", str(cluster), "-w", str(path), "--against-trace", "-o", str(out)]) == 0
    d = json.loads((out / "against_trace.json").read_text())
    jobs = pd.read_parquet(out / "jobs.parquet")
    assert d["all"]["recorded_jobs"] == int(jobs["recorded_wait_s"].notna().sum()) > 0
    assert d["jobs_compared_jct"] == int((jobs["jct_s"].notna() & jobs["recorded_jct_s"].notna()).sum()) > 0
    assert (out / "summary.json").exists()


def test_no_recorded_times_is_one_line_exit_2(tmp_path, capsys):
    out = tmp_path / "none"
    assert main(["simulate", "-c", "tiresias-n4g4", "-w", str(TIRESIAS), "--against-trace", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "records no start times" in err
    assert not out.exists()
    # without the flag the same run is fine
    assert main(["simulate", "-c", "tiresias-n4g4", "-w", str(TIRESIAS), "-o", str(out)]) == 0
    assert not (out / "against_trace.json").exists()
