"""Gavel's trace files (dlsched.workload.gavel_trace): the three layouts, the mapping to JobSpecs,
the rows Gavel skips, and one line naming file, line and field for each bad input."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from dlsched.core.errors import DlschedError, InputError
from dlsched.core.types import JobSpec, Role, TaskSpec
from dlsched.workload import load_workload
from dlsched.workload.gavel_trace import read_gavel_trace
from dlsched.workload.io import FORMATS, describe_workload

RN50 = "ResNet-50 (batch size 64)"
LM = "LM (batch size 20)"
CMD = "python3 main.py --data_dir=%s/data"


def _row(*fields) -> str:
    return "\t".join(str(f) for f in fields) + "\n"


def row10(job_type=RN50, steps=2931, sf=1, weight=1, slo="-1.000000", arrival=0, needs="1"):
    return _row(job_type, CMD, "image_classification/imagenet", "--num_minibatches", needs, steps, sf,
                weight, slo, arrival)


def row9(job_type=RN50, steps=2931, sf=1, weight=1, slo="-1.000000", arrival=0):
    return _row(job_type, CMD, "--num_minibatches", 1, steps, sf, weight, slo, arrival)


def row7(job_type=RN50, steps=2931, arrival="0.000000", sf=1):
    return _row(job_type, CMD, "--num_minibatches", 1, steps, arrival, sf)


def _write(tmp_path, text, name="t.trace"):
    f = tmp_path / name
    f.write_text(text)
    return f


def _job(job_id, submit, model, steps, gpus, priority=1, deadline=None) -> JobSpec:
    demand = (1.0, 4.0, 16.0, 0.0, 0.0)
    return JobSpec(job_id=job_id, submit_time_s=submit, kind="dl",
                   tasks=tuple(TaskSpec(i, Role.WORKER, demand, None) for i in range(gpus)),
                   priority=priority, deadline_s=deadline, model=model, comm="allreduce",
                   iterations=float(steps), duration_s=None)


# ----------------------------------------------------------------------------- layouts

def test_current_10_field_layout(tmp_path):
    f = _write(tmp_path, row10(steps=2931, sf=1, weight=1, arrival=0)
               + row10(job_type=LM, steps=5000, sf=4, weight=5, arrival="12.5")
               + "\n" + row10(steps=7, sf=2, weight="1.000000", arrival=12.5))
    pairs = read_gavel_trace(f)
    assert [line for line, _ in pairs] == [1, 2, 4]             # lines from 1, blank line counted
    assert [j for _, j in pairs] == [
        _job("gavel-0", 0.0, RN50, 2931, 1),
        _job("gavel-1", 12.5, LM, 5000, 4, priority=5),
        _job("gavel-2", 12.5, RN50, 7, 2),
    ]
    assert pairs[1][1].is_gang and pairs[1][1].num_workers == 4 and pairs[1][1].gpus == 4.0


def test_9_field_layout(tmp_path):
    f = _write(tmp_path, row9(steps=100, sf=8, weight=5, arrival=3) + row9(job_type=LM, steps=1, arrival=4))
    assert [j for _, j in read_gavel_trace(f)] == [_job("gavel-0", 3.0, RN50, 100, 8, priority=5),
                                                   _job("gavel-1", 4.0, LM, 1, 1)]


def test_2019_7_field_layout_skips_scale_factor_0(tmp_path):
    f = _write(tmp_path, row7(steps=10, arrival="0.000000", sf=1) + row7(steps=20, arrival="5.000000", sf=0)
               + row7(job_type=LM, steps=30, arrival="5.000000", sf=16))
    pairs = read_gavel_trace(f)
    # the sf-0 row (line 2) gets no job and no number, as in Gavel's 2019 parser; priority weight 1
    assert [(line, j) for line, j in pairs] == [(1, _job("gavel-0", 0.0, RN50, 10, 1)),
                                                (3, _job("gavel-1", 5.0, LM, 30, 16))]


def test_ids_keep_gavel_order_among_equal_arrivals(tmp_path):
    f = _write(tmp_path, "".join(row7(steps=i + 1, arrival="7.0") for i in range(11)))
    jobs = load_workload(f)                       # sorted by (submit_time_s, job_id)
    assert [j.job_id for j in jobs] == [f"gavel-{i:02d}" for i in range(11)]
    assert [j.iterations for j in jobs] == [float(i + 1) for i in range(11)]


def test_slo_becomes_a_deadline_with_a_v100_throughput_table(tmp_path):
    f = _write(tmp_path, row10(steps=3000, sf=2, slo="2.000000", arrival=100)
               + row10(steps=50, slo="-1.000000", arrival=200) + row10(steps=40, slo="-3", arrival=300))
    speeds = {(RN50, 2): 10.0, (RN50, 1): 5.0}
    jobs = [j for _, j in read_gavel_trace(f, steps_per_s=lambda t, n: speeds.get((t, n)))]
    # Gavel: SLO x (run time alone on a V100) after the job is added; any SLO < 0 is none
    assert [j.deadline_s for j in jobs] == [100 + 2.0 * 3000 / 10.0, None, None]
    with pytest.raises(InputError) as e:
        read_gavel_trace(f, steps_per_s=lambda t, n: None)
    assert (e.value.line, e.value.field) == (1, "job_type")


def test_loader_picks_gavel_by_extension_or_format(tmp_path):
    assert "gavel" in FORMATS
    text = row10(steps=5, arrival=1) + row10(steps=6, arrival=2)
    a = load_workload(_write(tmp_path, text))
    gz = tmp_path / "t2.trace.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    b = load_workload(gz)
    c = load_workload(_write(tmp_path, text, name="jobs.txt"), format="gavel")
    assert a == b == c and [j.job_id for j in a] == ["gavel-0", "gavel-1"]
    d = describe_workload(a)
    assert (d["jobs"], d["jobs_with_iterations"], d["jobs_with_duration"], d["models"]) == (2, 2, 0, {RN50: 2})


# ----------------------------------------------------------------------------- bad input

BAD = [
    # (file text, line, field, part of the message)
    (row10() + row9(arrival=1), 2, "arrival_time", "mixes layouts"),
    (row7() + row10(arrival=1), 2, "scale_factor", "mixes layouts"),
    (row10() + row10(arrival=1).rstrip("\n") + "\textra\n", 2, "arrival_time", "extra"),
    ("x\ty\n", 1, "num_steps_arg", "not a Gavel trace"),
    ("a,b,c\n", 1, "command", "not a Gavel trace"),
    ("\t".join("12345678") + "\n", 1, None, "no layout"),
    (row10(steps="abc"), 1, "total_steps", "expected a number"),
    (row10(steps="12.5"), 1, "total_steps", "integer"),
    (row10(steps=-3), 1, "total_steps", ">= 0"),
    (row10(arrival=-1), 1, "arrival_time", ">= 0"),
    (row10(arrival="soon"), 1, "arrival_time", "expected a number"),
    (row10(sf=0), 1, "scale_factor", ">= 1"),
    (row7(sf=-2), 1, "scale_factor", ">= 0"),
    (row9(sf="two"), 1, "scale_factor", "expected a number"),
    (row10(weight="1.5"), 1, "priority_weight", "whole weight"),
    (row10(weight=0), 1, "priority_weight", "> 0"),
    (row9(weight=-5), 1, "priority_weight", "> 0"),
    (row10(slo="none"), 1, "SLO", "expected a number"),
    (row10(job_type="Unknown (batch size 1)", slo="1.2"), 1, "job_type", "no V100 throughput"),
    (row10(needs="2"), 1, "needs_data_dir", "0 or 1"),
    (row10(job_type=" "), 1, "job_type", "required"),
    ("\n" + row10(arrival=10) + row10(arrival=9), 3, "arrival_time", "must not decrease"),
    (row7(arrival=10) + row7(arrival=9, sf=0) + row7(arrival=8), 3, "arrival_time", "must not decrease"),
]


@pytest.mark.parametrize("text,line,field,why", BAD)
def test_bad_input_is_one_error_naming_file_line_and_field(tmp_path, text, line, field, why):
    f = _write(tmp_path, text)
    with pytest.raises(InputError) as e:
        load_workload(f)
    msg = str(e.value)
    assert (e.value.file, e.value.line, e.value.field) == (str(f), line, field)
    assert "\n" not in msg and msg.startswith(f"{f}, line {line}")
    assert (f"field '{field}'" in msg) == (field is not None)
    assert why in msg


def test_an_slo_without_a_table_is_an_error_not_a_lost_deadline(tmp_path):
    from dlsched.workload.gavel_trace import read_gavel_trace
    with pytest.raises(InputError, match="no throughput table") as e:
        read_gavel_trace(_write(tmp_path, row10(slo="1.2")))
    assert (e.value.line, e.value.field) == (1, "SLO")


def test_an_slo_is_a_deadline_from_the_bundled_table(tmp_path):
    from dlsched.workload.throughputs import load_throughputs
    (j,) = load_workload(_write(tmp_path, row10(slo="2", arrival=100)))
    v100 = load_throughputs("gavel").steps_per_s(RN50, 1, "V100")
    assert j.deadline_s == pytest.approx(100 + 2 * 2931 / v100)


def test_empty_trace_is_an_error(tmp_path):
    with pytest.raises(DlschedError, match="empty workload file"):
        load_workload(_write(tmp_path, "\n\n"))


def test_skipped_rows_only_give_no_jobs(tmp_path):
    assert load_workload(_write(tmp_path, row7(sf=0) + row7(sf=0, arrival=3))) == []


# ----------------------------------------------------------------------------- CLI

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "dlsched.cli.main", *args], capture_output=True, text=True,
                          check=False, timeout=120)


def test_cli_describe_reads_a_trace_and_reports_a_bad_one_in_one_line(tmp_path):
    good = _write(tmp_path, row7(steps=10, arrival="0.0") + row7(job_type=LM, steps=20, arrival="3.0", sf=8))
    out = _cli("workload", "describe", str(good), "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert (d["jobs"], d["gpus_per_job"], d["span_s"], d["models"]) == (2, {"1": 1, "8": 1}, 3.0, {LM: 1, RN50: 1})

    bad = _write(tmp_path, row7() + row7(steps="many", arrival="1.0"), name="bad.trace")
    out = _cli("workload", "describe", str(bad))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines == [f"error: {bad}, line 2, field 'total_steps': expected a number, got 'many'"]
