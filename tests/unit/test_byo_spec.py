"""A command job's spec (issue 37): validation, the progress regex, dlsched.reporting, the
non-preemptible guard."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dlsched.core.errors import InputError
from dlsched.runtime.byo import ProgressRegex, child_env, regex_problem, resolve_argv
from dlsched.runtime.byo_runs import command_fields
from dlsched.runtime.spec import job_spec_from_dict

EX = Path(__file__).resolve().parents[2] / "examples"


def spec(**over):
    d = {"name": "byo", "command": ["python", "byo_torch_script.py", "--steps", "10"], "workers": 2,
         "gpus_per_worker": 0}
    d.update(over)
    return d


def test_valid_command_spec_defaults():
    s = job_spec_from_dict(spec(), base_dir=EX)
    assert s.command == ("python", "byo_torch_script.py", "--steps", "10")
    assert s.launcher == "env" and s.grace_s == 30.0 and s.preemptible and s.entry == ""
    assert s.workdir == str(EX) and s.batch_size is None
    again = job_spec_from_dict(json.loads(json.dumps(s.to_dict())))        # as the server re-reads it
    assert again.command == s.command and again.workdir == s.workdir
    assert job_spec_from_dict(spec(preemptible=False), base_dir=EX).to_jobspec("j", 0).preemptible is False


@pytest.mark.parametrize("over,field,words", [
    ({"command": []}, "command", "list of 1-64"),
    ({"command": "python train.py"}, "command", "list of 1-64"),
    ({"command": ["python", 3]}, "command", "list of 1-64"),
    ({"command": ["x"] * 65}, "command", "list of 1-64"),
    ({"command": ["python", "a" * 5000]}, "command", "list of 1-64"),
    ({"command": ["no-such-exe-37"]}, "command", "no such executable"),
    ({"command": ["python", "missing_script.py"]}, "command", "no such script"),
    ({"launcher": "mpi"}, "launcher", "must be one of"),
    ({"launcher": "torchrun", "command": ["torchrun", "--nnodes", "2", "byo_torch_script.py"]}, "command",
     "set by dlsched"),
    ({"launcher": "torchrun", "command": ["torchrun", "--rdzv_backend=c10d", "byo_torch_script.py"]}, "command",
     "set by dlsched"),
    ({"launcher": "torchrun", "command": ["torchrun", "--bogus", "byo_torch_script.py"]}, "command",
     "unknown torchrun option"),
    ({"launcher": "torchrun", "command": ["torchrun", "--max-restarts"]}, "command", "needs a value"),
    ({"launcher": "torchrun", "command": ["torchrun", "--max-restarts", "1"]}, "command", "names no script"),
    ({"launcher": "torchrun", "command": ["bash", "x.sh"]}, "command", "starts with torchrun"),
    ({"launcher": "torchrun", "command": ["torchrun", "nope_37.py"]}, "command", "no such script"),
    ({"env": {"RANK": "3"}}, "env", "set by dlsched"),
    ({"env": {"DLSCHED_X": "3"}}, "env", "set by dlsched"),
    ({"env": {"1BAD": "3"}}, "env", "letters, digits"),
    ({"env": {"A": ["x"]}}, "env", "string or a number"),
    ({"env": {"A": "x" * 5000}}, "env", "at most 4096"),
    ({"env": {f"V{i}": "1" for i in range(65)}}, "env", "at most 64"),
    ({"env": ["A=1"]}, "env", "must be a mapping"),
    ({"python": "/no/such/python37"}, "python", "no such interpreter"),
    ({"python": "venv/bin/python"}, "python", "absolute path"),
    ({"python": 3}, "python", "must be a path"),
    ({"progress": {"regex": "step ("}}, "progress", "does not compile"),
    ({"progress": {"regex": "step \\d+"}}, "progress", "needs a group"),
    ({"progress": {"regex": "(?P<n>\\d+)"}}, "progress", "no group named 'step'"),
    ({"progress": {"regexp": "(\\d+)"}}, "progress", "must be {regex"),
    ({"grace_s": -1}, "grace_s", ">= 0"),
    ({"preemptible": "no"}, "preemptible", "true or false"),
    ({"entry": "byo_torch_script.py"}, "entry", "not both"),
    ({"ps": 1}, "ps", "parameter-server"),
])
def test_bad_command_specs_one_line(over, field, words):
    with pytest.raises(InputError) as e:
        job_spec_from_dict(spec(**over), file="byo.yaml", base_dir=EX)
    msg = str(e.value)
    assert e.value.field == field and words in msg and "\n" not in msg
    if field == "env":                                # a value (maybe a secret) is never named
        assert "x" * 50 not in msg and "'3'" not in msg and "A=1" not in msg


def test_torchrun_script_roots():
    """The script of a torchrun job lies in its workdir or a --script-root (the server checks)."""
    ok = spec(launcher="torchrun", command=["torchrun", "--max-restarts", "1", "byo_torch_script.py", "--steps", "3"])
    s = job_spec_from_dict(ok, base_dir=EX, script_roots=())
    assert s.launcher == "torchrun"
    outside = spec(launcher="torchrun", command=["python", str(EX.parent / "src" / "dlsched" / "reporting.py")])
    job_spec_from_dict(outside, base_dir=EX)                       # a client does not know the roots
    with pytest.raises(InputError, match="outside the allowed roots") as e:
        job_spec_from_dict(outside, base_dir=EX, script_roots=())
    assert e.value.field == "command"
    job_spec_from_dict(outside, base_dir=EX, script_roots=(str(EX.parent / "src"),))
    dots = spec(launcher="torchrun", command=["python", "../src/dlsched/reporting.py"])
    with pytest.raises(InputError, match="outside the allowed roots"):
        job_spec_from_dict(dots, base_dir=EX, script_roots=())
    mod = spec(launcher="torchrun", command=["torchrun", "-m", "some.module"])
    assert job_spec_from_dict(mod, base_dir=EX, script_roots=()).command[1] == "-m"


def test_torchrun_fields_and_argv():
    from dlsched.core.types import TaskPlacement
    from dlsched.runtime.byo_launch import torchrun_argv
    s = job_spec_from_dict(spec(workers=3, launcher="torchrun", env={"TOKEN": "s3cret"},
                                command=["torchrun", "--max_restarts=2", "byo_torch_script.py", "--steps", "9"]),
                           base_dir=EX)
    pls = [TaskPlacement(0, 4, (1,)), TaskPlacement(1, 2, (0,)), TaskPlacement(2, 4, (3,))]
    f = command_fields(s, pls, max_grace_s=60.0)
    assert f[0]["torchrun"] == {"nnodes": 2, "node_rank": 0, "nproc": 2} and f[0]["cuda_visible"] == "1,3"
    assert f[1]["torchrun"] == {"nnodes": 2, "node_rank": 1, "nproc": 1} and f[1]["cuda_visible"] == "0"
    assert f[2].get("torchrun_idle") and "torchrun" not in f[2]
    assert f[0]["user_env"] == {"TOKEN": "s3cret"}
    argv = torchrun_argv({**f[1], "master_addr": "10.0.0.1", "master_port": 29400}, "/py")
    assert argv == ["/py", "-m", "torch.distributed.run", "--nnodes=2", "--node-rank=1", "--nproc-per-node=1",
                    "--master-addr=10.0.0.1", "--master-port=29400", "--max_restarts=2", "byo_torch_script.py",
                    "--steps", "9"]


def test_env_and_python_reach_the_process_and_env_is_redacted(tmp_path):
    import sys
    from dlsched.runtime.byo_launch import REDACTED, redact
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    s = job_spec_from_dict(spec(env={"TOKEN": "s3cret", "N": 3}, python=str(venv)), base_dir=EX)
    assert s.env == {"TOKEN": "s3cret", "N": "3"} and s.python == str(venv)
    assert redact(s.to_dict())["env"] == {"TOKEN": REDACTED, "N": REDACTED}
    assert "s3cret" not in json.dumps(redact(s.to_dict()))
    payload = {"rank": 0, "world_size": 1, "local_rank": 0, "local_world_size": 1, "master_addr": "h",
               "master_port": 1, "ckpt_dir": "/c", "job_id": "j", "run_id": "j.1", "user_env": s.env,
               "python": s.python}
    env = child_env({"PATH": "/bin"}, payload)
    assert env["TOKEN"] == "s3cret" and env["VIRTUAL_ENV"] == str(venv)
    assert env["PATH"].split(os.pathsep)[0] == str(venv / "bin")
    assert resolve_argv(["python", "t.py"], s.python)[0] == str(venv / "bin" / "python")
    with pytest.raises(InputError, match="for a job that gives `command`"):
        job_spec_from_dict({"name": "x", "entry": str(EX / "timed_steps.py"), "batch_size": 8,
                            "iterations": 5, "env": {"A": "1"}})


def test_sdk_only_fields_refused_without_command():
    with pytest.raises(InputError, match="for a job that gives `command`"):
        job_spec_from_dict({"name": "x", "entry": str(EX / "timed_steps.py"), "batch_size": 8,
                            "iterations": 5, "grace_s": 5})


def test_progress_regex_positional_and_named():
    p = ProgressRegex(r"step (\d+) loss ([0-9.]+)")
    assert p.parse("epoch 1 step 42 loss 0.125 lr 3") == {"step": 42, "loss": 0.125}
    assert p.parse("no progress here") is None
    n = ProgressRegex(r"it=(?P<step>\d+) acc=(?P<accuracy>[0-9.]+)(?: loss=(?P<loss>[0-9.]+))?")
    assert n.parse("it=7 acc=0.5") == {"step": 7, "accuracy": 0.5}
    assert n.parse("it=8 acc=0.5 loss=1.5") == {"step": 8, "accuracy": 0.5, "loss": 1.5}
    long = ProgressRegex(r"step (\d+)").parse("step " + "9" * 5000)       # the line is cut first
    assert len(str(long["step"])) == 4096 - len("step ")
    assert regex_problem("x" * 513) and not regex_problem(r"(\d+)")


def test_child_env_and_argv():
    payload = {"rank": 1, "world_size": 2, "local_rank": 0, "local_world_size": 1, "master_addr": "10.0.0.1",
               "master_port": 29500, "ckpt_dir": "/s/checkpoints/j1", "job_id": "j1", "run_id": "j1.2",
               "env": {"CUDA_VISIBLE_DEVICES": ""}}
    env = child_env({"PATH": "/bin", "RANK": "7"}, payload)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("1", "2", "0", "1")
    assert env["MASTER_ADDR"] == "10.0.0.1" and env["MASTER_PORT"] == "29500"
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["DLSCHED_CHECKPOINT_DIR"] == "/s/checkpoints/j1"
    import sys
    assert resolve_argv(["python", "t.py"])[0] == sys.executable and resolve_argv(["/bin/true"]) == ["/bin/true"]


def test_command_fields_local_ranks_and_grace_cap():
    from dlsched.core.types import TaskPlacement
    s = job_spec_from_dict(spec(workers=3, grace_s=500), base_dir=EX)
    pls = [TaskPlacement(0, 0, ()), TaskPlacement(1, 1, ()), TaskPlacement(2, 0, ())]
    f = command_fields(s, pls, max_grace_s=60.0)
    assert [(f[r]["local_rank"], f[r]["local_world_size"]) for r in (0, 1, 2)] == [(0, 2), (0, 1), (1, 2)]
    assert f[0]["grace_s"] == 60.0 and f[0]["command"][0] == "python"


def test_reporting_is_a_noop_outside_and_writes_a_line_inside(monkeypatch, tmp_path):
    from dlsched import reporting
    monkeypatch.setattr(reporting, "_FD", [])
    monkeypatch.delenv("DLSCHED_REPORT_PATH", raising=False)
    reporting.report(step=1, loss=0.5)                 # nothing to write to: no error
    plain = tmp_path / "plain"
    plain.write_text("")
    monkeypatch.setattr(reporting, "_FD", [])
    monkeypatch.setenv("DLSCHED_REPORT_PATH", str(plain))
    reporting.report(step=1, loss=0.5)                 # not a FIFO: never written
    assert plain.read_text() == ""
    fifo = tmp_path / "report"
    os.mkfifo(fifo, 0o600)
    monkeypatch.setattr(reporting, "_FD", [])
    monkeypatch.setenv("DLSCHED_REPORT_PATH", str(fifo))
    reporting.report(step=1, loss=0.5)                 # no reader yet: dropped, no error
    r = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    monkeypatch.setattr(reporting, "_FD", [])
    reporting.report(step=3, loss=0.25)
    reporting.report(step=4, loss="not a number")      # dropped, never raises
    reporting.saved(step=3)
    import dlsched
    dlsched.report(step=5, loss=0.125)                 # the spelling the issue names: the same call
    data = os.read(r, 65536)
    os.close(r)
    assert [json.loads(ln) for ln in data.splitlines()] == [{"step": 3, "loss": 0.25}, {"saved": 3},
                                                             {"step": 5, "loss": 0.125}]
    from dlsched.report import summary_table            # still the report package
    assert callable(summary_table)


def test_lost_work_estimate():
    """A stop's lost work (ProcRun.lost_work): after the saved step, or since the last report."""
    from dlsched.runtime.byo import ProcRun
    from dlsched.runtime.byo_runs import lost_text

    class Ctx:
        step = 0
        _step_t0 = 0.0

        def report(self, **rec):
            self.step = rec["step"]
    p = ProcRun({"command": ["python", "x.py"], "python": None}, Ctx(), None, None)
    assert p.lost_work()["lost_basis"] == "no report" and p.lost_work()["lost_steps"] is None
    p._t_spawn = 100.0
    p._last, p._step_s = (40, 110.0), 0.5
    p._t_end = 112.2                          # 2.2 s after the report at step 40: 4 whole steps
    w = p.lost_work()
    assert w["lost_basis"] == "last report" and w["lost_steps"] == 4 and abs(w["lost_s"] - 2.2) < 1e-9
    p.saved = 30
    w = p.lost_work()
    assert (w["lost_basis"], w["lost_steps"], w["lost_s"], w["saved_step"]) == ("saved", 10, 5.0, 30)
    assert "10 steps (5.0 s)" in lost_text(w) and "step 30" in lost_text(w)
    p._report_line(b'{"saved": 40}')
    assert p.lost_work()["lost_steps"] == 0


def test_transaction_refuses_to_preempt_a_fixed_job():
    from dlsched.scheduler.transaction import Transaction
    txn = Transaction.__new__(Transaction)
    txn.fixed = frozenset({"j1"})
    with pytest.raises(ValueError, match="not preemptible"):
        txn.release("j1", [], [])
    with pytest.raises(ValueError, match="not preemptible"):
        txn.migrate("j1", [], [], ())


def test_server_refuses_a_missing_script_root(tmp_path, capsys):
    """`dlsched server --script-root` must name a directory: one line, exit 2, nothing started."""
    from dlsched.cli.main import main
    rc = main(["server", "--script-root", str(tmp_path / "nope"), "--state-dir", str(tmp_path / "st")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--script-root" in err[0] and "nope" in err[0], err
    assert not (tmp_path / "st").exists()


def test_byo_examples_validate_and_bad_env_names_its_line(tmp_path):
    from dlsched.runtime.spec import load_job_spec
    t = load_job_spec(EX / "byo_torchrun.yaml")
    assert t.launcher == "torchrun" and t.env == {"OMP_NUM_THREADS": "1"} and t.workdir == str(EX)
    assert load_job_spec(EX / "byo.yaml").launcher == "env"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncommand: [python, -c, 'pass']\nenv:\n  MASTER_PORT: '1'\n")
    with pytest.raises(InputError) as e:
        load_job_spec(bad)
    assert e.value.field == "env" and e.value.line == 3 and "bad.yaml" in str(e.value) and "set by dlsched" in str(e.value)


def test_a_policy_that_needs_progress_says_so_for_a_job_that_cannot_give_it():
    """Issue 37: a command job with no progress regex, under a policy that schedules on measured
    progress, is told at submit (the API's `note`, the `no_progress` event, `dlsched submit`'s
    stderr); with a regex, an SDK program or another policy, nothing is said."""
    import dlsched.policies  # noqa: F401  (registers the profiles)
    from dlsched.runtime.byo_runs import MEASURED_BY, no_progress_note
    from dlsched.scheduler.framework import REGISTRY
    silent = job_spec_from_dict(spec(), base_dir=EX)
    assert silent.command and not (silent.progress or {}).get("regex")
    for policy in MEASURED_BY:
        note = no_progress_note(policy, silent)
        assert note.startswith(f"policy {policy} ") and "dlsched.report(step=...)" in note
    assert no_progress_note("fifo", silent) is None
    told = job_spec_from_dict(spec(progress={"regex": r"step (\d+) loss ([0-9.]+)"}), base_dir=EX)
    assert no_progress_note("optimus", told) is None
    assert set(MEASURED_BY) <= set(REGISTRY.names("profile"))
