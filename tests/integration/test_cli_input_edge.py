"""The simulator's input edge, as a user meets it: every bad input file, option value, flag or --out
ends in ONE line on stderr (`error: ...`) naming the file / line / field or the option, exit
status 2, no traceback, and nothing written or destroyed. summary.json records its provenance."""
import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import dlsched
from dlsched.cli.main import app, main
from dlsched.workload.io import load_workload, save_workload

ROOT = Path(__file__).resolve().parents[2]
POLLUX6 = ROOT / "src" / "dlsched" / "data" / "pollux" / "workloads" / "workload-6.csv"
# The first rows of the Philly trace (shared/traces/philly/philly.csv.gz) and one long job.
PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,1,2951.0,6214e9
2017-10-09 06:13:36,2759.0,1,2759.0,6214e9
2017-10-09 06:16:03,2766.0,1,2766.0,6214e9
2017-10-09 07:15:40,25939.0,2,51878.0,11cb48
"""
ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "dlsched.cli.main", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def one_error_line(r) -> str:
    """The single `error:` line of a failed run (exit status 2, nothing else on stderr)."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def cut_mid_value(text: str, column: str, keep: int = 2) -> tuple[str, int]:
    """`text` cut in the middle of `column`'s value on its last row (`keep` characters of it):
    what a copy interrupted mid-row leaves. Returns (text, line number of that row)."""
    header = text.splitlines()[0].split(",")
    rows = text.rstrip("\n").split("\n")
    last = rows[-1]
    start = len(",".join(last.split(",")[:header.index(column)])) + 1
    assert len(last.split(",")[header.index(column)]) > keep
    return "\n".join(rows[:-1] + [last[:start + keep]]), len(rows)


# ----------------------------------------------------------------------------- 1. rows cut short

def _sources(tmp_path):
    philly = tmp_path / "philly.csv"
    philly.write_text(PHILLY)
    schema = tmp_path / "schema-src.csv"               # the Philly rows converted: has duration_s
    save_workload(load_workload(philly), schema)
    return {"schema": (schema, "duration_s", "deadline_s"),     # duration 25939 -> 25: ran 25 s
            "philly": (philly, "gpu_time", "cluster"),           # the cluster (user) was lost
            "pollux": (POLLUX6, "time", "application")}


@pytest.mark.parametrize("gz", [False, True], ids=["csv", "csv.gz"])
@pytest.mark.parametrize("fmt", ["schema", "philly", "pollux"])
def test_a_row_cut_short_names_file_line_and_field(tmp_path, fmt, gz):
    src, column, missing = _sources(tmp_path)[fmt]
    text, line = cut_mid_value(src.read_text(), column)
    bad = tmp_path / f"cut-{fmt}.csv{'.gz' if gz else ''}"
    bad.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    out = tmp_path / "o"
    err = one_error_line(run("simulate", "-c", "pollux", "-w", bad, "--out", out))
    assert f"{bad}, line {line}, field '{missing}'" in err and "fields" in err
    assert not out.exists()
    err = one_error_line(run("workload", "convert", bad, "--out", tmp_path / "w.csv"))
    assert f"line {line}, field '{missing}'" in err and not (tmp_path / "w.csv").exists()


@pytest.mark.parametrize("text, line, field", [
    ("job_id,submit_time_s,duration_s\nj1,0,10,99\nj2,1,5\n", 2, "duration_s"),   # pandas took col 1 as index
    ("job_id,submit_time_s,duration_s\nj1,0,10\nj2,1,5,7\n", 3, "duration_s"),
    (PHILLY.replace("66.0,11cb48", "66.0,11cb48,extra"), 2, "cluster"),
    (POLLUX6.read_text() + "\0" * 64, 162, "name"),                               # a zero-filled tail
])
def test_a_row_with_extra_fields_or_nul_bytes(tmp_path, text, line, field):
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    err = one_error_line(run("workload", "describe", bad))
    assert f"{bad}, line {line}, field '{field}'" in err


# ----------------------------------------------------------------------------- 2. unwritable --out

@pytest.mark.parametrize("args", [
    ["simulate", "-c", "seed002", "-w", "sample"],
    ["compare", "-c", "seed002", "-w", "sample", "-p", "fifo,fifo-gang"],
    ["experiment", "seed000-tetris", "--seeds", "1"],
    ["workload", "generate", "nosuch-generator"],           # the --out error comes before any work
    ["workload", "convert", "nosuch.csv"],
], ids=lambda a: " ".join(a[:2]))
def test_unwritable_out_is_found_before_the_run(tmp_path, args):
    (tmp_path / "f").write_text("a file")
    out = tmp_path / "f" / ("x.csv" if args[0] == "workload" else "x")
    r = run(*args, "--out", out)
    err = one_error_line(r)
    assert f"--out {out}" in err and r.stdout == ""


@pytest.mark.parametrize("out, needle", [("adir", "is a folder"), ("w.txt", "extension"), ("nodir/w.csv", "nodir")])
def test_workload_out_file_checked_before_reading(tmp_path, out, needle):
    (tmp_path / "adir").mkdir()
    err = one_error_line(run("workload", "convert", "nosuch.csv", "--out", out, cwd=tmp_path))
    assert needle in err and "nosuch.csv" not in err


@pytest.mark.skipif(ROOT_USER, reason="root writes into read-only folders")
def test_read_only_out_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        err = one_error_line(run("simulate", "-c", "seed002", "-w", "sample", "--out", ro / "run"))
        assert "not writable" in err
    finally:
        ro.chmod(0o755)


# ----------------------------------------------------------------------------- 3. configs, options

@pytest.fixture
def files(tmp_path):
    (tmp_path / "bin.yaml").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "ctl.yaml").write_text("policies: \x01\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "f").write_text("a file")
    (tmp_path / "unreadable.yaml").write_text("policies: {}\n")
    (tmp_path / "unreadable.yaml").chmod(0)
    return tmp_path


@pytest.mark.parametrize("args, needle", [
    (["simulate", "-c", "seed002", "-w", "sample", "--policy-config", "bin.yaml"], "bin.yaml"),
    (["simulate", "-c", "seed002", "-w", "sample", "--speed-config", "bin.yaml"], "bin.yaml"),
    (["simulate", "-c", "bin.yaml", "-w", "sample"], "bin.yaml"),
    (["compare", "-c", "seed002", "-w", "sample", "--policy-config", "ctl.yaml"], "ctl.yaml"),
    (["cluster", "bin.yaml"], "bin.yaml"),
    (["cluster", "adir"], "adir"),
    (["simulate", "-c", "adir", "-w", "sample"], "adir"),
    (["simulate", "-c", "seed002", "-w", "sample", "--policy-config", "adir"], "adir"),
    (["simulate", "-c", "seed002", "-w", "sample", "--speed-config", "adir"], "adir"),
    (["simulate", "-c", "seed002", "-w", "adir"], "adir"),
    (["simulate", "-c", "seed002", "-w", "sample", "--restart-delay-s", "-5"], "--restart-delay-s"),
    (["compare", "-c", "seed002", "-w", "sample", "--start-delay-s", "-1"], "--start-delay-s"),
    (["simulate", "-c", "seed002", "-w", "sample", "--start-delay-s", "nan"], "--start-delay-s"),
    (["simulate", "-c", "seed002", "-w", "sample", "--restart-delay-s", "inf"], "--restart-delay-s"),
    (["simulate", "-c", "seed002", "-w", "sample", "--bogus"], "--bogus"),
    (["simulate", "-c", "seed002", "-w", "sample", "--sed", "3"], "--sed"),
    (["simulate", "-c", "nosuch", "-w", "sample"], "nosuch"),
    (["simulate", "-c", "seed002", "-w", "nosuch-gen"], "nosuch-gen"),
    (["simulate", "-c", "seed002", "-w", "sample", "-p", "nosuch"], "nosuch"),
    (["compare", "-c", "seed002", "-w", "sample", "-p", "fifo,fifo"], "--policies"),
    (["experiment", "nosuch"], "nosuch"),
    (["workload", "generate", "sample", "--out", "w.csv", "--seed", "-1"], "--seed"),
    (["nosuchcommand"], "nosuchcommand"),
    (["simulate"], "--cluster"),
])
def test_bad_configs_and_options_one_line(files, args, needle):
    r = run(*args, *(["--out", files / "o"] if args[0] in ("simulate", "compare", "experiment") else []),
            cwd=files)
    assert needle in one_error_line(r)
    assert not (files / "o").exists()


@pytest.mark.skipif(ROOT_USER, reason="root reads files whatever their mode")
def test_unreadable_file(files):
    err = one_error_line(run("simulate", "-c", "seed002", "-w", "sample", "--policy-config", "unreadable.yaml",
                             "--out", "o", cwd=files))
    assert "unreadable.yaml" in err


HELIOS_VC = str(Path(dlsched.__file__).parent / "data" / "traces" / "helios-vc" / "Venus_cluster_gpu_number.csv")
COMMANDS = {   # the simulator's commands, with the arguments each needs to get as far as parsing
    ("simulate",): ["-c", "seed002", "-w", "sample", "--out", "o"],
    ("compare",): ["-c", "seed002", "-w", "sample", "--out", "o"],
    ("experiment",): ["seed000-tetris", "--out", "o"],
    ("workload", "generate"): ["sample", "--out", "w.csv"],
    ("workload", "convert"): ["w0.csv", "--out", "w.csv"],
    ("workload", "describe"): ["w0.csv"],
    ("cluster", "describe"): ["seed002"],
    ("cluster", "from-trace"): [HELIOS_VC, "--format", "helios-vc", "--out", "o.yaml"],
    ("policies",): [],
}
BAD_VALUES = {   # option or argument name -> values it must refuse (files relative to the `files` folder)
    "cluster": ["nosuch", "liquid-0", "adir", "bin.yaml", "ctl.yaml", "missing.yaml"],
    "workload": ["nosuch-gen", "poisson:jobs=-1", "adir", "bin.yaml", "./missing.csv"],
    "src": ["adir", "bin.yaml", "./missing.csv", "nosuch-gen"],
    "name": ["nosuch", "poisson:bogus=1"],
    "policy": ["nosuch", ""],
    "policies": ["nosuch", "", "fifo,fifo", "fifo,nosuch"],
    "out": ["f/x"],
    "fmt": ["bogus"],
    "policy_config": ["adir", "bin.yaml", "ctl.yaml", "missing.yaml"],
    "speed_config": ["adir", "bin.yaml", "ctl.yaml", "missing.yaml"],
    "queues": ["adir", "bin.yaml", "ctl.yaml", "missing.yaml", "nosuch"],
    "tenancy": ["nosuch", "kuebe"],
    "throughputs": ["adir", "bin.yaml", "ctl.yaml", "missing.yaml", "nosuch"],
    "semantics": ["nosuch", "Gavel", ""],
    "mapping": ["nosuch", "submit=", "bogus=col", "missing.yaml"],
    "file": ["adir", "bin.yaml", "./missing.csv"],
    "queues_out": ["adir", "f/x"],
    "cluster_name": ["", "a/b", "x" * 100],
    "date": ["abc", "2020-13-45", "1999-01-01"],
    "seed": ["-1", "abc", "1.5"],
    "seeds": ["0", "-2", "abc"],
    "restart_delay_s": ["-1", "nan", "inf", "-inf", "abc"],
    "start_delay_s": ["-1", "nan", "inf", "abc"],
}


def _leaves():
    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, path + (name,))
        elif path[:2] in COMMANDS or path[:1] in COMMANDS:
            yield path, cmd
    yield from walk(typer.main.get_command(app), ())


def _main(capsys, argv) -> str:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, (argv, rc, err)
    return lines[0]


def test_every_flag_typo_and_bad_value_is_one_line_exit_2(files, monkeypatch, capsys):
    """Sweeps every option of the simulator's commands (taken from the CLI itself, so a new
    option must get its bad values here): a typo in its flag, no value, and each bad value."""
    monkeypatch.chdir(files)
    save_workload(load_workload("sample"), files / "w0.csv")
    leaves = dict(_leaves())
    assert set(leaves) == set(COMMANDS)
    for path, cmd in leaves.items():
        base = COMMANDS[path]
        assert path[-1] + "x" in _main(capsys, [*path[:-1], path[-1] + "x"])     # a typo in the command
        for p in cmd.params:
            for flag in [*p.opts, *getattr(p, "secondary_opts", [])] if p.param_type_name == "option" else []:
                if flag.startswith("--"):
                    assert flag[:-1] in _main(capsys, [*path, *base, flag[:-1]])     # typo: last letter lost
                if getattr(p, "is_flag", False):
                    assert flag in _main(capsys, [*path, *base, f"{flag}=maybe"])
                else:
                    assert flag in _main(capsys, [*path, *base, flag])               # no value
            if getattr(p, "is_flag", False):
                continue
            assert p.name in BAD_VALUES, f"{' '.join(path)} {p.name}: add its bad values to BAD_VALUES"
            for value in BAD_VALUES[p.name]:
                if p.param_type_name == "option":
                    argv = [*path, *base, p.opts[0], value]
                else:   # an argument: replace the first of the base arguments
                    argv = [*path, value, *base[1:]]
                line = _main(capsys, argv)
                assert any(s and s in line for s in (*p.opts, value, value.partition(":")[0])), (argv, line)
    assert not (files / "o").exists() and not (files / "w.csv").exists()


# ----------------------------------------------------------------------------- 4. --out reuse

def test_non_empty_out_is_refused_and_force_replaces_it_only_after_validation(tmp_path):
    out = tmp_path / "run"
    assert run("simulate", "-c", "seed002", "-w", "sample", "--out", out, "--report").returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert "report.html" in before
    err = one_error_line(run("simulate", "-c", "seed002", "-w", "sample", "-p", "fifo-gang", "--out", out))
    assert f"--out {out}" in err and "--force" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_time_s,duration_s\nj1,0,10\nj2,1\n")
    one_error_line(run("simulate", "-c", "seed002", "-w", bad, "--out", out, "--force"))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before      # a bad input destroyed nothing
    r = run("simulate", "-c", "seed002", "-w", "sample", "-p", "fifo-gang", "--out", out, "--force")
    assert r.returncode == 0, r.stderr
    assert not (out / "report.html").exists()                            # no mix of two runs
    assert json.loads((out / "summary.json").read_text())["policy"] == "fifo-gang"


@pytest.mark.parametrize("args", [["simulate", "-c", "seed002", "-w", "sample"],
                                  ["compare", "-c", "seed002", "-w", "sample"],
                                  ["experiment", "seed000-tetris", "--seeds", "1"]], ids=lambda a: a[0])
def test_every_command_refuses_a_non_empty_out(tmp_path, args):
    out = tmp_path / "o"
    out.mkdir()
    (out / "old.txt").write_text("earlier results")
    r = run(*args, "--out", out)
    assert "--force" in one_error_line(r) and r.stdout == ""
    assert (out / "old.txt").read_text() == "earlier results"


def test_force_never_clears_the_current_folder(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    one_error_line(run("simulate", "-c", "seed002", "-w", "sample", "--out", ".", "--force", cwd=tmp_path))
    assert (tmp_path / "keep.txt").exists()


# ----------------------------------------------------------------------------- 5. provenance

def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_summary_records_its_provenance(tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text("node_groups:\n  - {count: 2, gpus: 4, gpu_mem_gb: 16, cpus: 32, mem_gb: 128}\n")
    policy = tmp_path / "p.yaml"
    policy.write_text("policies:\n  fifo:\n    blocking: false\n")
    speed = tmp_path / "s.yaml"
    speed.write_text("overlap: 0.5\n")
    workload = tmp_path / "w.csv.gz"
    save_workload(load_workload("sample", seed=3), workload)
    args = ["simulate", "-c", cluster, "-w", workload, "--policy-config", policy, "--speed-config", speed,
            "--seed", "3", "--out", tmp_path / "a"]
    assert run(*args).returncode == 0
    prov = json.loads((tmp_path / "a" / "summary.json").read_text())["provenance"]
    assert prov["dlsched_version"] == dlsched.__version__
    assert prov["argv"] == [str(a) for a in args] and prov["seed"] == 3
    assert prov["inputs"] == {k: {"file": str(p), "sha256": sha256(p)} for k, p in
                              [("cluster", cluster), ("workload", workload), ("policy_config", policy),
                               ("speed_config", speed)]}

    r = run("compare", "-c", "seed002", "-w", "pollux-6", "-p", "fifo,fifo-gang", "--out", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    top = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert top["provenance"]["inputs"] == {"cluster": {"name": "seed002"}, "workload": {"name": "pollux-6"}}
    assert top["provenance"]["seed"] == 0 and set(top["policies"]) == {"fifo", "fifo-gang"}
    per_policy = json.loads((tmp_path / "b" / "fifo-gang" / "summary.json").read_text())
    assert per_policy["provenance"] == top["provenance"] and per_policy["policy"] == "fifo-gang"

    r = run("experiment", "seed000-tetris", "--seeds", "1", "--out", tmp_path / "e")
    assert r.returncode == 0, r.stderr
    prov = json.loads((tmp_path / "e" / "summary.json").read_text())["provenance"]
    assert prov["inputs"] == {"experiment": {"name": "seed000-tetris"}} and prov["seed"] == [0]
    assert prov["argv"][:2] == ["experiment", "seed000-tetris"] and prov["dlsched_version"] == dlsched.__version__


@pytest.mark.parametrize("cmd", ["up", "server"])
@pytest.mark.parametrize("text, where", [
    ("policies: {optimus: {params: {optimus: {speed: guess}}}}\n", "policies.optimus.params.optimus"),
    ("policies: {optimus: {round_s: -1}}\n", "policies.optimus.round_s"),
    ("policys: {}\n", "policys"),
    ("policies: [\n", "cfg.yaml"),
])
def test_a_bad_policy_config_for_the_runtime_is_refused_before_anything_starts(tmp_path, cmd, text, where):
    """`up` and `server` take the simulator's --policy-config; a bad one is refused on one line
    that names the file and the field, exit 2, and nothing is started (no state dir written)."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(text)
    r = subprocess.run([sys.executable, "-m", "dlsched.cli.main", cmd, "--policy", "optimus",
                        "--policy-config", str(cfg), "--state-dir", str(tmp_path / "st")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in r.stderr and "cfg.yaml" in err[0] and where in err[0], err
    assert not (tmp_path / "st").exists()


def test_the_runtime_uses_the_policy_s_own_round_and_the_config_s_settings():
    from dlsched.runtime.server import DEFAULT_ROUND_S, Server
    s = Server.__new__(Server)
    s.round_s, s.policy_settings, s.policy = None, {}, "gandiva"
    assert s.profile_settings() == {}                        # its own 60 s quantum
    s.policy = "fifo"
    assert s.profile_settings() == {"round_s": DEFAULT_ROUND_S}
    s.round_s, s.policy_settings = 5.0, {"params": {"optimus": {"speed": "oracle"}}}
    s.policy = "optimus"
    assert s.profile_settings() == {"params": {"optimus": {"speed": "oracle"}}, "round_s": 5.0}
