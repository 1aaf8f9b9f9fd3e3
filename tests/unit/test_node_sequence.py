"""dlsched.workload.node_sequence: the recorded per-minute node series (read from small CSVs in
the Helios file's format), busy nodes per minute of tiny simulations, and the comparison.
Nothing here reads the team's shared trace folder."""
from __future__ import annotations

import gzip
import math

import numpy as np
import pandas as pd
import pytest

import dlsched
from dlsched.cluster.topology import cluster_from_dict
from dlsched.core.errors import ConfigError
from dlsched.core.types import JobSpec, Role, TaskSpec
from dlsched.workload.node_sequence import (
    busy_nodes_per_minute,
    compare,
    load_node_sequence,
    trace_origin,
)

GOOD = """\
time,active,total
2017-10-03 00:00:00,312,420
2017-10-03 00:01:00,309,420
2017-10-03 00:02:00,314,420
2017-10-03 00:05:00,0,420
"""


def _write(tmp_path, text: str, name: str = "seq.csv", gz: bool = False):
    p = tmp_path / name
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return p


# ----------------------------------------------------------------------------- load_node_sequence

@pytest.mark.parametrize("gz", [False, True])
def test_loads_plain_or_gzipped(tmp_path, gz):
    df = load_node_sequence(_write(tmp_path, GOOD, "seq.csv.gz" if gz else "seq.csv", gz=gz))
    assert list(df.columns) == ["active", "total"] and df.index.name == "time"
    assert df["active"].tolist() == [312, 309, 314, 0] and df["total"].dtype == np.int64
    assert df.index[0] == pd.Timestamp("2017-10-03 00:00:00") and df.index.tz is None
    assert df.index[-1] == pd.Timestamp("2017-10-03 00:05:00")         # a gap is kept as a gap


def test_total_is_optional_and_columns_may_be_reordered(tmp_path):
    df = load_node_sequence(_write(tmp_path, "active,time\n3,2017-12-01 10:00:00\n\n4,2017-12-01 10:01:00\n"))
    assert list(df.columns) == ["active"] and df["active"].tolist() == [3, 4]


@pytest.mark.parametrize("text, line, field, words", [
    ("when,active\n2017-10-03 00:00:00,1\n", 1, "time", "missing column"),
    ("time,total\n2017-10-03 00:00:00,1\n", 1, "active", "missing column"),
    ("", 1, "time", "empty file"),
    ("time,active\n", 1, "time", "no rows"),
    ("time,active\n2017-10-03 00:00:00,1\n2017-10-03T00:01,2\n", 3, "time", "expected a time"),
    ("time,active\n2017-10-03 00:00:00,1\n2017-10-03 00:01:30,2\n", 3, "time", "whole minute"),
    ("time,active\n2017-10-03 00:01:00,1\n2017-10-03 00:01:00,2\n", 3, "time", "strictly increasing"),
    ("time,active\n2017-10-03 00:01:00,1\n2017-10-03 00:00:00,2\n", 3, "time", "strictly increasing"),
    ("time,active\n2017-10-03 00:00:00,1\n2017-10-03 00:01:00,-2\n", 3, "active", "integer >= 0"),
    ("time,active\n2017-10-03 00:00:00,1.5\n", 2, "active", "integer >= 0"),
    ("time,active\n2017-10-03 00:00:00,\n", 2, "active", "integer >= 0"),
    ("time,active,total\n2017-10-03 00:00:00,1,x\n", 2, "total", "integer >= 0"),
    ("time,active,total\n2017-10-03 00:00:00,1,4\n2017-10-03 00:01:00,5,4\n", 3, "active", "more than"),
])
def test_bad_input_names_file_line_and_field(tmp_path, text, line, field, words):
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_node_sequence(p)
    assert (e.value.file, e.value.line, e.value.path) == (str(p), line, field)
    assert words in str(e.value) and str(p) in str(e.value) and f"line {line}" in str(e.value)


def test_missing_broken_or_binary_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_node_sequence(tmp_path / "nope.csv")
    with pytest.raises(ConfigError, match="folder"):
        load_node_sequence(tmp_path)
    bad_gz = tmp_path / "bad.csv.gz"
    bad_gz.write_bytes(b"\x1f\x8b" + b"\x00" * 20)
    with pytest.raises(ConfigError, match="gzip"):
        load_node_sequence(bad_gz)
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"time,active\n\xff\xfe\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_node_sequence(binary)


# ----------------------------------------------------------------------------- trace_origin

def test_trace_origin_is_the_earliest_submission(tmp_path):
    p = _write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n"
                         "2017-10-01 08:00:00,60,1,60,a\n2017-10-01 07:59:30,60,1,60,b\n", "t.csv")
    assert trace_origin(p) == pd.Timestamp("2017-10-01 07:59:30")            # rows are not sorted
    assert trace_origin() == pd.Timestamp("2017-09-04 10:30:41")             # the bundled trace
    bad = _write(tmp_path, "timestamp,duration,num_gpus\n2017-10-01 08:00:00,60,1\nyesterday,1,1\n", "b.csv")
    with pytest.raises(ConfigError) as e:
        trace_origin(bad)
    assert (e.value.line, e.value.path) == (3, "timestamp")


# ----------------------------------------------------------------------------- busy_nodes_per_minute

def _cluster(nodes: int, gpus: int):
    return cluster_from_dict({"name": "tiny", "node_groups": [
        {"count": nodes, "gpus": gpus, "gpu_mem_gb": 16, "cpus": 8, "mem_gb": 64}]})


def _job(name: str, submit: float, duration: float) -> JobSpec:
    task = TaskSpec(0, Role.WORKER, (1.0, 1.0, 1.0, 0.0, 0.0), None)
    return JobSpec(job_id=name, submit_time_s=submit, tasks=(task,), duration_s=duration)


JOBS = [_job("a", 0, 300), _job("b", 0, 600), _job("c", 90, 30)]


def test_busy_nodes_on_one_gpu_nodes_count_the_running_jobs():
    # 1-GPU nodes: each job holds a node of its own wherever it is placed
    res = dlsched.simulate(_cluster(3, 1), JOBS, "fifo")
    busy = busy_nodes_per_minute(res, origin="2017-10-03 00:00:00")
    assert busy.name == "busy" and busy.index.name == "time" and busy.dtype == np.int64
    assert busy.index[0] == pd.Timestamp("2017-10-03 00:00:00")
    assert (busy.index[1] - busy.index[0]) == pd.Timedelta(minutes=1)
    # at each minute's instant: a and b during [0, 300) and [0, 600); c (90..120) falls between
    assert busy.tolist() == [2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 0]
    # within each minute: c counts in minute 1; a still counts in minute 4 (it ends at 300 s)
    anyt = busy_nodes_per_minute(res, origin="2017-10-03 00:00:00", mode="any")
    assert anyt.tolist()[:6] == [2, 3, 2, 2, 2, 1] and anyt.tolist()[9:] == [1, 0]


def test_origin_between_minutes_shifts_the_calendar():
    res = dlsched.simulate(_cluster(3, 1), JOBS, "fifo")
    # t = 0 is 00:00:30: a holds calendar 00:00:30 .. 00:05:30, b 00:00:30 .. 00:10:30, and c
    # 00:02:00 .. 00:02:30 now covers the instant 00:02
    busy = busy_nodes_per_minute(res, origin=pd.Timestamp("2017-10-03 00:00:30"))
    assert busy.index[0] == pd.Timestamp("2017-10-03 00:00:00")
    assert busy.tolist() == [0, 2, 3, 2, 2, 2, 1, 1, 1, 1, 1, 0]


def test_a_node_shared_by_two_jobs_counts_once_and_saved_output_reads_the_same(tmp_path):
    res = dlsched.simulate(_cluster(1, 2), [_job("a", 0, 120), _job("b", 60, 180)], "fifo")
    busy = busy_nodes_per_minute(res, origin="2017-10-03 00:00:00")
    assert busy.tolist() == [1, 1, 1, 1, 0]
    res.save(tmp_path / "run")
    assert busy_nodes_per_minute(tmp_path / "run", origin="2017-10-03 00:00:00").equals(busy)


def test_busy_nodes_bad_arguments(tmp_path):
    res = dlsched.simulate(_cluster(1, 1), [_job("a", 0, 60)], "fifo")
    with pytest.raises(ConfigError, match="mode"):
        busy_nodes_per_minute(res, origin="2017-10-03 00:00:00", mode="sometimes")
    with pytest.raises(ConfigError, match="origin"):
        busy_nodes_per_minute(res, origin="not a time")
    with pytest.raises(ConfigError, match="log.parquet"):
        busy_nodes_per_minute(tmp_path, origin="2017-10-03 00:00:00")


# ----------------------------------------------------------------------------- compare

def _series(start: str, values, name: str) -> pd.Series:
    return pd.Series(values, index=pd.date_range(start, periods=len(values), freq="min", name="time"), name=name)


def test_compare_over_the_overlapping_minutes():
    sim = _series("2017-10-02 23:58:00", [99, 99, 10, 20, 30, 5], "busy")     # 23:58 .. 00:03
    rec = pd.DataFrame({"active": [10, 10, 40, 0, 7, 7], "total": 50},
                       index=pd.date_range("2017-10-03 00:00:00", periods=6, freq="min", name="time"))
    out = compare(sim, rec)
    s, r = np.array([10, 20, 30, 5.0]), np.array([10, 10, 40, 0.0])         # 00:00 .. 00:03
    assert out["minutes"] == 4 and out["start"] == "2017-10-03 00:00:00" and out["end"] == "2017-10-03 00:03:00"
    assert out["mae"] == pytest.approx(np.abs(s - r).mean())
    assert out["bias"] == pytest.approx((s - r).mean())
    assert out["mean_rel_error"] == pytest.approx((0 + 1 + 0.25) / 3) and out["rel_minutes"] == 3
    assert out["corr"] == pytest.approx(np.corrcoef(s, r)[0, 1])
    assert (out["sim_mean"], out["recorded_mean"]) == (pytest.approx(16.25), pytest.approx(15.0))
    part = compare(sim, rec["active"], start="2017-10-03 00:01:00", end="2017-10-03 00:02:00")
    assert part["minutes"] == 2 and part["mae"] == pytest.approx(10.0)


def test_compare_degenerate_cases():
    flat = compare(_series("2017-10-03", [3, 3, 3], "busy"), _series("2017-10-03", [1, 2, 3], "active"))
    assert flat["minutes"] == 3 and math.isnan(flat["corr"])
    none = compare(_series("2017-10-03", [3], "busy"), _series("2017-11-03", [3], "active"))
    assert none["minutes"] == 0 and math.isnan(none["mae"])
    with pytest.raises(ConfigError, match="active"):
        compare(_series("2017-10-03", [3], "busy"), pd.DataFrame({"x": [1]}))
    with pytest.raises(ConfigError, match="indexed by time"):
        compare([1, 2], _series("2017-10-03", [3], "active"))
