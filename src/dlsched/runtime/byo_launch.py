"""How a command job's processes are launched (dlsched.runtime.byo): `launcher: torchrun`, a
spec's own environment variables and interpreter, and a process tree's signals.

`launcher: torchrun` runs the command through `python -m torch.distributed.run`, one torchrun per
node. The command is the one you already run, in one of these forms:

    [torchrun, --max-restarts, "2", train.py, --epochs, "10"]       # torchrun's own options kept
    [python, -m, torch.distributed.run, --max-restarts, "2", train.py, ...]
    [python, train.py, --epochs, "10"]                               # no options of its own

dlsched sets what comes from the placement: --nnodes (the nodes the policy chose),
--node-rank (the node of rank 0 is 0, then the others in the order of their lowest rank),
--nproc-per-node (the node's ranks) and --master-addr/--master-port (rank 0's node and a free
port there: torchrun's static rendezvous). A command that gives one of those, or a --rdzv-* or
--standalone, is refused at submit. The job's own elastic options (TORCHRUN_PASS) go through.
The rank worker of the lowest rank on each node runs that node's torchrun; the node's other rank
workers start nothing (their booking holds the node's share for torchrun's children).

The script (`train.py` above; not for `-m module` or `--no-python`) must lie, symlinks resolved,
inside the spec's workdir or one of the server's `--script-root` directories.
"""
from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

# torchrun options a job may give (they go through unchanged): those with a value, and flags
TORCHRUN_PASS = {"--max-restarts", "--monitor-interval", "--start-method", "--role", "--redirects", "-r",
                 "--tee", "-t", "--local-ranks-filter", "--log-dir", "--rdzv-timeout"}
TORCHRUN_FLAGS = {"--run-path", "-m", "--module", "--no-python"}
# what dlsched sets from the placement: refused in a command
TORCHRUN_SET = {"--nnodes", "--nproc-per-node", "--node-rank", "--master-addr", "--master-port",
                "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--rdzv-conf", "--standalone", "--local-addr"}
_RUN_MODULE = "torch.distributed.run"

# spec.env: names a job may not set (dlsched sets them), and its bounds
RESERVED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "TORCHELASTIC_RUN_ID")
MAX_ENV, MAX_ENV_VALUE = 64, 4096
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
REDACTED = "<redacted>"


def torchrun_parts(command) -> tuple[list[str], list[str]]:
    """(torchrun's own options, the script's argv) of a torchrun job's command; ValueError with
    one line when the command is not one (module docstring)."""
    argv = list(command)
    if Path(argv[0]).name == "torchrun":
        rest = argv[1:]
    elif argv[0] in ("python", "python3") and argv[1:3] == ["-m", _RUN_MODULE]:
        rest = argv[3:]
    elif argv[0] in ("python", "python3"):
        rest = argv[1:]
    else:
        raise ValueError(f"with launcher torchrun, the command starts with torchrun, python -m {_RUN_MODULE} "
                         f"or python, got {argv[0]!r}")
    opts: list[str] = []
    i = 0
    while i < len(rest) and rest[i].startswith("-"):
        name, eq, _ = rest[i].partition("=")
        key = name if not name.startswith("--") else name.replace("_", "-")
        if key in TORCHRUN_SET:
            raise ValueError(f"torchrun option {name} is set by dlsched from the placement; remove it")
        if key in TORCHRUN_FLAGS:
            opts.append(rest[i])
        elif key in TORCHRUN_PASS:
            if eq:
                opts.append(rest[i])
            elif i + 1 < len(rest):
                opts += [rest[i], rest[i + 1]]
                i += 1
            else:
                raise ValueError(f"torchrun option {name} needs a value")
        else:
            raise ValueError(f"unknown torchrun option {name} (allowed: {', '.join(sorted(TORCHRUN_PASS | TORCHRUN_FLAGS))})")
        i += 1
    if i >= len(rest):
        raise ValueError("the command names no script for torchrun to run")
    return opts, rest[i:]


def script_of(opts: list[str], script_argv: list[str]) -> str | None:
    """The script file a torchrun job runs (None: a module, -m, or an executable, --no-python)."""
    if any(o in ("-m", "--module", "--no-python", "--no_python") for o in opts):
        return None
    return script_argv[0]


def outside_roots(script: str, workdir: str, roots) -> str:
    """Why `script` (relative to `workdir`) is not inside the allowed roots ('' when it is)."""
    p = Path(script) if Path(script).is_absolute() else Path(workdir) / script
    real = p.resolve()
    allowed = [Path(workdir).resolve()] + [Path(r).resolve() for r in roots]
    if any(real == a or a in real.parents for a in allowed):
        return ""
    return (f"script {real} is outside the allowed roots ({', '.join(map(str, allowed))}: the spec's workdir and "
            f"the server's --script-root directories)")


def torchrun_argv(payload: dict, python: str) -> list[str]:
    """A node's torchrun command line (the payload's `torchrun` has nnodes, node_rank, nproc)."""
    t = payload["torchrun"]
    opts, script_argv = torchrun_parts(payload["command"])
    if script_argv[0] in ("python", "python3"):            # (python -m torch.distributed.run python x.py)
        script_argv = [python] + script_argv[1:]
    return [python, "-m", _RUN_MODULE, f"--nnodes={t['nnodes']}", f"--node-rank={t['node_rank']}",
            f"--nproc-per-node={t['nproc']}", f"--master-addr={payload['master_addr']}",
            f"--master-port={payload['master_port']}", *opts, *script_argv]


def interpreter(python: str | None) -> str:
    """The interpreter of a spec's `python:` (a file, or a virtualenv's directory); the worker's
    own when the spec gives none."""
    if not python:
        return sys.executable
    p = Path(python)
    return str(p / "bin" / "python") if p.is_dir() else str(p)


def python_problem(python) -> str:
    """Why a spec's `python:` cannot be an interpreter on this node ('' when it can)."""
    if not isinstance(python, str) or not python or len(python) > MAX_ENV_VALUE or "\0" in python:
        return "must be the path of a Python interpreter or a virtualenv directory"
    if not Path(python).is_absolute():
        return f"must be an absolute path, got {python!r}"
    exe = Path(interpreter(python))
    if not exe.is_file() or not os.access(exe, os.X_OK):
        return f"no such interpreter on this node: {exe}"
    return ""


def env_problem(env) -> str:
    """Why a spec's `env:` cannot be the processes' own variables ('' when it can). The values
    are never named (they may be secrets)."""
    if not isinstance(env, dict) or len(env) > MAX_ENV:
        return f"must be a mapping of at most {MAX_ENV} NAME: value pairs"
    for k, v in env.items():
        if not isinstance(k, str) or not _ENV_NAME.match(k):
            return f"variable name {str(k)[:64]!r} must be letters, digits and '_' (1-128, not starting with a digit)"
        if k in RESERVED_ENV or k.startswith("DLSCHED_"):
            return f"variable {k} is set by dlsched (reserved: {', '.join(RESERVED_ENV)}, DLSCHED_*)"
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            return f"variable {k} must be a string or a number"
        if len(str(v)) > MAX_ENV_VALUE or "\0" in str(v):
            return f"variable {k}'s value must be at most {MAX_ENV_VALUE} characters, without NUL"
    return ""


def redact(spec: dict) -> dict:
    """A spec dict as the API shows it: its env values replaced (they may be secrets)."""
    if not spec.get("env"):
        return spec
    return {**spec, "env": {k: REDACTED for k in spec["env"]}}


def descendants(root: int) -> list[int]:
    """The live processes below `root` (from /proc), children first found first."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def signal_tree(pid: int, sig) -> None:
    """`sig` to the process group of `pid` and of every process below it (torchrun starts its
    workers in sessions of their own, so one killpg does not reach them)."""
    procs, groups = [pid] + descendants(pid), []
    for p in procs:
        try:
            g = os.getpgid(p)
        except OSError:
            continue
        if g not in groups:
            groups.append(g)
    for g in groups or [pid]:
        try:
            os.killpg(g, sig)
        except (ProcessLookupError, PermissionError):
            pass
    if sig == signal.SIGKILL:                # a process that left its group
        for p in procs[1:]:
            try:
                os.kill(p, sig)
            except (ProcessLookupError, PermissionError):
                pass
