"""dlsched.workload.throughputs: the bundled Gavel table gives the numbers of Gavel's file (as the
heterogeneity study quotes them), the CSV form round-trips, pollux-t4 is 1 / the measured step
time, and every bad input is one line naming the file and the field."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dlsched.core.errors import ConfigError
from dlsched.workload import measured
from dlsched.workload.models import ZOO
from dlsched.workload.throughputs import ThroughputTable, load_throughputs

R50 = "ResNet-50 (batch size 64)"


@pytest.fixture(scope="module")
def gavel() -> ThroughputTable:
    return load_throughputs("gavel")


# ----------------------------------------------------------------------------- bundled gavel
def test_gavel_values_of_the_study(gavel):
    assert gavel.name == "gavel" and gavel.reference == "V100"
    assert gavel.gpu_types() == ["K80", "P100", "V100"]          # *_unconsolidated left out
    assert [round(gavel.steps_per_s(R50, g, "V100"), 2) for g in (1, 2, 4, 8)] == [4.39, 7.92, 9.45, 17.30]
    table = {  # 1 GPU, steps/s: V100, P100, K80
        "ResNet-18 (batch size 128)": (17.99, 11.68, 1.81),
        R50: (4.39, 2.62, 0.62),
        "Transformer (batch size 64)": (8.62, 5.09, 1.75),
        "LM (batch size 20)": (64.74, 58.17, 17.14),
        "Recommendation (batch size 2048)": (7.47, 16.60, 10.44),
        "A3C": (7.18, 5.68, 3.44),
        "CycleGAN": (4.43, 2.40, 0.50),
    }
    for job, want in table.items():
        got = tuple(round(gavel.steps_per_s(job, 1, t), 2) for t in ("V100", "P100", "K80"))
        assert got == want, job
    rec = "Recommendation (batch size 2048)"
    assert gavel.steps_per_s(rec, 1, "P100") > gavel.steps_per_s(rec, 1, "V100")
    lm = "LM (batch size 20)"
    assert round(gavel.steps_per_s(lm, 2, "V100"), 1) == 132.2 and round(gavel.steps_per_s(lm, 4, "V100"), 1) == 111.0


def test_gavel_shape(gavel):
    jobs = gavel.job_types()
    assert len(jobs) == 26
    assert [sum(g in gavel.gpu_counts(j) for j in jobs) for g in (1, 2, 4, 8)] == [26, 19, 19, 19]
    assert all(gavel.has(j) for j in jobs) and not gavel.has("ResNet-50")
    assert gavel.gpu_counts("A3C") == [1] and gavel.gpu_counts(R50) == [1, 2, 4, 8]
    assert gavel.gpu_counts("no such job") == []


def test_gavel_pairs_and_misses(gavel):
    s, o = gavel.pair(R50, 1, "LM (batch size 20)", "V100")
    assert (round(s, 2), round(o, 2)) == (3.02, 24.80)
    assert gavel.pair("LM (batch size 20)", 1, R50, "V100")[1] == pytest.approx(s)
    assert gavel.pair(R50, 1, "A3C", "T4") is None and gavel.pair(R50, 2, "A3C", "V100") is None
    assert gavel.steps_per_s(R50, 3, "V100") is None                 # no entry: cannot run there
    assert gavel.steps_per_s(R50, 1, "A100") is None
    assert gavel.steps_per_s("A3C", 2, "V100") is None
    assert gavel.steps_per_s(R50, 1, "v100") == gavel.steps_per_s(R50, 1, "V100")   # case on a miss


def test_load_throughputs_caches(gavel, tmp_path):
    assert load_throughputs("gavel") is gavel
    p = tmp_path / "t.csv"
    p.write_text("job_type,gpus,gpu_type,steps_per_s\na,1,V100,2.0\n")
    t = load_throughputs(p)
    assert load_throughputs(str(p)) is t and t.name == str(p) and t.reference is None
    p.write_text("job_type,gpus,gpu_type,steps_per_s\na,1,V100,3.0\nb,1,V100,1\n")  # changed: read again
    assert load_throughputs(p).steps_per_s("a", 1, "V100") == 3.0


# ----------------------------------------------------------------------------- the CSV form
def test_csv_round_trip(gavel, tmp_path):
    p = tmp_path / "gavel.csv"
    gavel.to_csv(p)
    assert p.read_text().startswith("# reference: V100\njob_type,gpus,gpu_type,steps_per_s,partner,")
    back = ThroughputTable.load(p)
    assert back.reference == "V100" and back.job_types() == gavel.job_types()
    assert back.gpu_types() == gavel.gpu_types()
    jobs = gavel.job_types()
    for j in jobs:
        assert back.gpu_counts(j) == gavel.gpu_counts(j)
        for g in gavel.gpu_counts(j):
            for t in gavel.gpu_types():
                assert back.steps_per_s(j, g, t) == gavel.steps_per_s(j, g, t)      # exact
                for o in jobs:
                    assert back.pair(j, g, o, t) == gavel.pair(j, g, o, t)


def test_csv_hand_written(tmp_path):
    p = tmp_path / "mine.csv"
    p.write_text("# measured on our lab\n# reference: v100\n"
                 "job_type,gpus,gpu_type,steps_per_s,partner,partner_steps_per_s\n"
                 "resnet50,1,v100,4.5,,\n"
                 "resnet50,2,V100,8,,\n"
                 '"lm, small",1,V100,60,,\n'
                 'resnet50,1,V100,3,"lm, small",25\n')
    t = ThroughputTable.load(p)
    assert t.reference == "V100" and t.gpu_types() == ["V100"]
    assert t.steps_per_s("resnet50", 2, "V100") == 8.0 and t.steps_per_s("lm, small", 1, "V100") == 60.0
    assert t.pair("resnet50", 1, "lm, small", "V100") == (3.0, 25.0)
    assert t.pair("lm, small", 1, "resnet50", "V100") is None       # pairs are as given, not mirrored
    alone_only = tmp_path / "alone.csv"
    alone_only.write_text("gpu_type,job_type,steps_per_s,gpus\nT4,bert,1.5,1\n")   # any column order
    assert ThroughputTable.load(alone_only).steps_per_s("bert", 1, "T4") == 1.5


# ----------------------------------------------------------------------------- pollux-t4
def test_pollux_t4_is_one_over_the_measured_step_time():
    t = load_throughputs("pollux-t4")
    assert t.reference == "T4" and t.gpu_types() == ["T4"]
    assert t.job_types() == sorted(measured.POLLUX_APPS)
    for app in measured.POLLUX_APPS:
        assert t.gpu_counts(app) == [1, 2, 3, 4]                    # single-node placements of 4 T4s
        for g in (1, 2, 3, 4):
            step = measured.measured_iter_time(app, (g,), ZOO[app].default_batch * g)
            assert t.steps_per_s(app, g, "T4") == 1.0 / step
        assert t.steps_per_s(app, 8, "T4") is None and t.steps_per_s(app, 1, "V100") is None


# ----------------------------------------------------------------------------- bad input
HEADER = "job_type,gpus,gpu_type,steps_per_s\n"
PAIRS = "job_type,gpus,gpu_type,steps_per_s,partner,partner_steps_per_s\n"
ROW = "('A3C', 1)"
BAD_CSV = [  # (text, field, line)
    (HEADER + "a,1,V100,-1\n", "steps_per_s", 2),
    (HEADER + "a,1,V100,fast\n", "steps_per_s", 2),
    (HEADER + "a,1,V100,nan\n", "steps_per_s", 2),
    (HEADER + "a,0,V100,1\n", "gpus", 2),
    (HEADER + "a,1.5,V100,1\n", "gpus", 2),
    (HEADER + ",1,V100,1\n", "job_type", 2),
    (HEADER + "a,1,V100\n", "file", 2),
    ("job_type,gpus,gpu_type,steps_per_s,speed\n", "speed", 1),                 # unknown column
    ("job_type,gpus,steps_per_s\na,1,2\n", "gpu_type", 1),                      # missing column
    ("job_type,gpus,gpu_type,steps_per_s,partner\n", "partner_steps_per_s", 1),
    ("job_type,gpus,gpus,gpu_type,steps_per_s\n", "gpus", 1),                  # column twice
    ("# reference: V100\n" + HEADER + "a,1,V100,1\nb,1,V100,2\na,1,v100,3\n", "job_type", 5),
    (PAIRS + "a,1,V100,1,b,2\na,1,V100,1,b,3\n", "job_type", 3),               # duplicate pair
    (PAIRS + "a,1,V100,1,b,\n", "partner_steps_per_s", 2),
    (PAIRS + "a,1,V100,1,,2\n", "partner", 2),
    (PAIRS + "a,1,V100,1,b,-2\n", "partner_steps_per_s", 2),
    ("# reference:\n" + HEADER + "a,1,V100,1\n", "reference", 1),
    ("# just a comment\n", "file", 1),                                          # no header, no rows
    (HEADER, "file", 1),
]
BAD_JSON = [  # (document, the key or field the message names)
    ({"v100": {"('A3C', 1)": {"null": -1.0}}}, f"v100.{ROW}.null"),
    ({"v100": {"('A3C', 1)": {"null": "7.2"}}}, f"v100.{ROW}.null"),
    ({"v100": {"('A3C', 1)": {"null": True}}}, f"v100.{ROW}.null"),
    ({"v100": {"(A3C, 1)": {"null": 1.0}}}, "v100.(A3C, 1)"),                  # bad key: no quotes
    ({"v100": {"('A3C', 0)": {"null": 1.0}}}, "v100.('A3C', 0)"),
    ({"v100": {"__import__('os')": {"null": 1.0}}}, "__import__('os')"),        # never eval'd
    ({"v100": {ROW: {"null": 1.0, "('LM', 2)": [1.0, 2.0]}}}, "('LM', 2)"),     # partner on other GPUs
    ({"v100": {ROW: {"null": 1.0, "('LM', 1)": [1.0]}}}, "('LM', 1)"),
    ({"v100": {ROW: {"null": 1.0, "('LM', 1)": [1.0, -2.0]}}}, "('LM', 1)"),
    ({"v100": {ROW: {"null": 1.0, "nul": 1.0}}}, "nul"),
    ({"v100": {ROW: 4.0}}, ROW),
    ({"v100": {ROW: {"null": 1.0}}, "V100": {ROW: {"null": 2.0}}}, "V100"),     # duplicate entry
    ({"v100": [1, 2]}, "v100"),
    ({"reference": 3}, "reference"),
    ([1, 2], "file"),
]


def _one_line(err: ConfigError, path, field: str):
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and field in msg, msg


@pytest.mark.parametrize("text,field,line", BAD_CSV)
def test_bad_csv_is_one_line_naming_file_line_and_field(tmp_path, text, field, line):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        ThroughputTable.load(p)
    _one_line(err, p, field)
    assert err.value.line == line and err.value.path == field, str(err.value)


@pytest.mark.parametrize("doc,field", BAD_JSON)
@pytest.mark.parametrize("gz", [False, True])
def test_bad_json_is_one_line_naming_file_and_key(tmp_path, doc, field, gz):
    p = tmp_path / ("bad.json.gz" if gz else "bad.json")
    raw = json.dumps(doc).encode()
    p.write_bytes(gzip.compress(raw) if gz else raw)
    with pytest.raises(ConfigError) as err:
        ThroughputTable.load(p)
    _one_line(err, p, field)


@pytest.mark.parametrize("name,content,field", [
    ("t.json", b'{"v100": {"(\'A3C\', 1)": {"null": 1.0,}}}', "not JSON"),
    ("t.json", b"\xff\xfe junk", "not JSON"),
    ("t.json.gz", b"not gzip at all", "cannot read"),
    ("t.json", b'{"v100": {"(\'A3C\', 1)": {"null": 1.0, "null": 2.0}}}', "null"),   # duplicate key
    ("t.json", b'{"v100": {"(\'A3C\', 1)": {"null": 1e999}}}', "null"),              # infinite
    ("t.csv", b"job_type,gpus,gpu_type,steps_per_s\n\xff,1,V100,1\n", "not CSV"),
    ("t.csv", b'job_type,gpus,gpu_type,steps_per_s\n"a,1,V100,1\n', "not CSV"),
    ("t.yaml", b"a: 1\n", "unknown table format"),
])
def test_bad_files(tmp_path, name, content, field):
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        ThroughputTable.load(p)
    _one_line(err, p, field)


def test_missing_file_and_unknown_name(tmp_path):
    for ref in (tmp_path / "nope.csv", "gavel2", tmp_path):
        with pytest.raises(ConfigError) as err:
            load_throughputs(ref)
        _one_line(err, ref, "no such file")
        assert "gavel, pollux-t4" in str(err.value)


def test_workload_describe_reads_a_table(tmp_path):
    """`dlsched workload describe` on Gavel's table: its types and counts, and the spread of
    speeds across job types (research/hetero-adaptive.md: V100/K80 0.66 / 4.05 / 11.63,
    P100/K80 1.49 / 3.32 / 8.72 over the 26 single-GPU types), computed from the file."""
    import json
    import subprocess
    import sys
    src = Path(__file__).resolve().parents[2] / "src" / "dlsched" / "data" / "gavel" / "simulation_throughputs.json.gz"
    r = subprocess.run([sys.executable, "-m", "dlsched.cli.main", "workload", "describe", str(src), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["kind"] == "throughput table" and d["gpu_types"] == ["K80", "P100", "V100"]
    assert d["job_types"] == 26 and d["job_types_per_gpu_count"] == {"1": 26, "2": 19, "4": 19, "8": 19}
    assert d["V100 / K80 speed at 1 GPU (min, median, max)"] == [0.66, 4.05, 11.63]
    assert d["P100 / K80 speed at 1 GPU (min, median, max)"] == [1.49, 3.32, 8.72]
    bad = tmp_path / "t.csv"
    bad.write_text("job_type,gpus,gpu_type,steps_per_s\nx,one,V100,1\n")
    r = subprocess.run([sys.executable, "-m", "dlsched.cli.main", "workload", "describe", str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "t.csv, line 2" in r.stderr, r.stderr


def test_a_runtime_calibration_file_is_a_throughput_table(tmp_path):
    """The runtime measures each model's step time per GPU type and worker count
    (dlsched.runtime.calibration); that file serves as the table of Gavel's policies."""
    import json

    from dlsched.core.errors import ConfigError
    from dlsched.workload.throughputs import ThroughputTable
    cal = {"schema": "dlsched-calibration", "version": 1,
           "models": {"sensitive": {"fast": {"1": {"iter_s": 0.1, "step_s": 0.1, "steps": 40}},
                                    "slow": {"1": {"iter_s": 0.5, "step_s": 0.5, "steps": 40}}}}}
    f = tmp_path / "calibration.json"
    f.write_text(json.dumps(cal))
    t = ThroughputTable.load(str(f))
    assert t.steps_per_s("sensitive", 1, "fast") == pytest.approx(10.0)
    assert t.steps_per_s("sensitive", 1, "slow") == pytest.approx(2.0)
    assert t.reference is None and t.gpu_types() == ["FAST", "SLOW"]
    cal["models"]["sensitive"]["slow"]["1"]["iter_s"] = 0
    f.write_text(json.dumps(cal))
    with pytest.raises(ConfigError, match="iter_s"):
        ThroughputTable.load(str(f))
