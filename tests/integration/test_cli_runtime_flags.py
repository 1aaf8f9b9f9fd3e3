"""A typo in every flag of the commands outside the simulator's (the runtime's, `sweep`, `plan`,
`estimator`, `view`): one line, exit 2, nothing started and no state dir made. The simulator's
commands have their own sweep with bad values (test_cli_input_edge.py); here the tenancy options
of `up`, `server`, `whatif` and `plan` get theirs, refused before a server is started or asked."""
from __future__ import annotations

import pytest
import typer

from dlsched.cli.main import app, main

SIMULATOR = {"simulate", "compare", "experiment", "workload", "cluster", "policies"}
# the arguments each command needs to get as far as its own checks (no server is ever reached)
ARGS = {
    ("plan",): ["-w", "poisson:jobs=5", "-c", "seed000", "--target", "p95_wait_s<=1h", "--out", "o"],
    ("sweep",): ["s.yaml"],
    ("submit",): ["spec.yaml"],
    ("logs",): ["j1"], ("job", "show"): ["j1"], ("job", "suspend"): ["j1"], ("job", "resume"): ["j1"],
    ("job", "migrate"): ["j1"], ("job", "cancel"): ["j1"], ("user", "add"): ["alice"],
    ("estimator", "train"): ["sample"], ("estimator", "evaluate"): ["sample"],
}
QUEUE_BAD = [("missing.yaml", "missing.yaml"), ("adir", "adir"), ("bin.yaml", "bin.yaml"), ("nosuch", "nosuch")]
TENANCY_BAD = [(["--tenancy", "kai"], "--tenancy: needs --queues"),
               (["--queues", "philly", "--tenancy", "kueu"], "--tenancy: unknown mode 'kueu'")]


def _leaves():
    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, path + (name,))
        elif path[0] not in SIMULATOR:
            yield path, cmd
    yield from walk(typer.main.get_command(app), ())


def _one_line(capsys, argv) -> str:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, (argv, rc, err)
    return lines[0]


@pytest.fixture
def place(tmp_path, monkeypatch):
    (tmp_path / "bin.yaml").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "adir").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DLSCHED_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DLSCHED_TOKEN", raising=False)
    return tmp_path


def test_every_flag_typo_of_the_other_commands_is_one_line_exit_2(place, capsys):
    leaves = dict(_leaves())
    assert {"up", "server", "whatif", "queues", "plan", "sweep"} <= {p[0] for p in leaves}
    for path, cmd in leaves.items():
        base = ARGS.get(path, [])
        assert path[-1] + "x" in _one_line(capsys, [*path[:-1], path[-1] + "x"])     # the command's name
        for p in cmd.params:
            if p.param_type_name != "option":
                continue
            for flag in [*p.opts, *getattr(p, "secondary_opts", [])]:
                if flag.startswith("--"):
                    assert flag[:-1] in _one_line(capsys, [*path, *base, flag[:-1]])   # last letter lost
                if getattr(p, "is_flag", False):
                    if flag.startswith("--"):
                        assert flag in _one_line(capsys, [*path, *base, f"{flag}=maybe"])
                else:
                    assert flag in _one_line(capsys, [*path, *base, flag])             # no value
    assert not (place / "state").exists() and not (place / "o").exists()


@pytest.mark.parametrize("command", ["up", "server", "whatif", "plan"])
def test_a_bad_queue_file_or_mode_is_refused_before_anything_starts(place, capsys, command):
    base = [command, *ARGS.get((command,), [])]
    for value, needle in QUEUE_BAD:
        assert needle in _one_line(capsys, [*base, "--queues", value])
    for extra, needle in TENANCY_BAD:
        assert needle in _one_line(capsys, [*base, *extra])
    assert not (place / "state").exists() and not (place / "o").exists()
