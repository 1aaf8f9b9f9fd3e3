"""The YAML job spec of the real runtime, validated with errors that name the file, line and field.

    name: digits-allreduce         # required: letters, digits, '-', '_', '.'
    entry: allreduce_digits.py      # a .py file (relative to this spec) or 'package.module:function'
    args: {hidden: 64, lr: 0.1}     # free mapping, handed to the program as ctx.args
    workers: 2                      # data-parallel worker ranks (>= 1)
    ps: 0                           # parameter-server ranks (>= 0); ps > 0 makes it a PS job
    gpus_per_worker: 1              # 0, a fraction (packing) or a whole number
    cpus_per_worker: 0.5
    ps_cpus: 0.5
    batch_size: 64                  # global mini-batch (split over the workers)
    max_batch_size: 512             # optional: an adaptive policy (pollux) may pick the batch,
                                    # up to this, and the workers (dlsched.runtime.goodput)
    iterations: 200                 # or epochs: (one of the two)
    deadline_s: 3600                # optional, seconds after submission
    priority: 0
    model: mlp                      # a name for reports (and the simulator's model zoo)
    user: alice                     # whose job (DRF's fairness is between users; default "default";
                                    # on a server with users: the submitter, dlsched.runtime.users)
    queue: team-a                   # the leaf of the queue tree it runs in (default: the user's
                                    # first queue, else `default`; dlsched.tenancy)
    checkpoint_every: 20            # steps between checkpoints (also at every suspend)
    workdir: runs/digits            # optional: the ranks' working directory (relative to this
                                    # spec; must exist). Default: the job's own private directory,
                                    # <state dir>/work/<job id>, so relative paths never collide;
                                    # for a `command` job, the spec's own directory

Or, instead of `entry`, a script of your own (dlsched.runtime.byo, docs/runtime-byo-scripts.md):

    command: [python, train.py, --epochs, "10"]   # argv, one process per rank (1-64 strings)
    launcher: env                   # the default; or torchrun: one torchrun per node (byo_launch.py)
    grace_s: 30                     # SIGTERM, then SIGKILL this long after (<= the server's
                                    # --max-grace-s)
    preemptible: true               # false: no policy suspends, migrates or resizes it
    progress: {regex: 'step (\\d+) loss ([0-9.]+)'}   # optional, over each rank 0 stdout line
    env: {WANDB_API_KEY: ...}       # optional: the processes' own variables (never shown back)
    python: /opt/venvs/train        # optional: an interpreter, or a virtualenv, on the nodes

The entry's function `main(ctx)` gets a dlsched.runtime.sdk.JobContext. At submit the program
file must exist, parse, and define `main` (a 'module:function' entry: the module must be
importable and define the function); what fails here would fail every attempt the same way.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dlsched.core.errors import InputError
from dlsched.core.types import NRES, JobSpec, Role, TaskSpec

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ENTRY_FN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

# field -> (kind, default, required)
FIELDS: dict[str, tuple[str, Any, bool]] = {
    "name": ("name", None, True),
    "entry": ("entry", None, True),
    "args": ("map", None, False),
    "workers": ("int1", 1, False),
    "ps": ("int0", 0, False),
    "gpus_per_worker": ("gpus", 1.0, False),
    "cpus_per_worker": ("num0", 0.5, False),
    "ps_cpus": ("num0", 0.5, False),
    "batch_size": ("int1", None, True),
    "max_batch_size": ("int1", None, False),
    "iterations": ("int1", None, False),
    "epochs": ("int1", None, False),
    "deadline_s": ("num0", None, False),
    "priority": ("int", 0, False),
    "model": ("str", None, False),
    "user": ("name", "default", False),
    "queue": ("name", None, False),
    "checkpoint_every": ("int1", 20, False),
    "workdir": ("str", None, False),
    "command": ("command", None, False),
    "launcher": ("str", None, False),
    "grace_s": ("num0", None, False),
    "preemptible": ("bool", True, False),
    "progress": ("map", None, False),
    "env": ("secrets", None, False),
    "python": ("path", None, False),
}
LAUNCHERS = ("env", "torchrun")
BYO_ONLY = ("launcher", "grace_s", "progress", "env", "python")   # fields of a `command` job only
DEFAULT_GRACE_S = 30.0
MAX_ARGV, MAX_ARG_CHARS = 64, 4096


@dataclass(frozen=True)
class RuntimeJobSpec:
    """A validated job spec; `entry` is absolute (a file path) or 'module:function'."""
    name: str
    entry: str = ""                              # "" for a `command` job
    args: dict = field(default_factory=dict)
    workers: int = 1
    ps: int = 0
    gpus_per_worker: float = 1.0
    cpus_per_worker: float = 0.5
    ps_cpus: float = 0.5
    batch_size: int = 32
    max_batch_size: int | None = None            # adaptive (pollux): the largest batch it may get
    iterations: int | None = None
    epochs: int | None = None
    deadline_s: float | None = None
    priority: int = 0
    model: str | None = None
    user: str = "default"
    queue: str | None = None
    checkpoint_every: int = 20
    workdir: str | None = None
    command: tuple[str, ...] | None = None      # a script of your own (dlsched.runtime.byo)
    launcher: str | None = None
    grace_s: float | None = None
    preemptible: bool = True
    progress: dict | None = None
    env: dict | None = None                     # the processes' own variables (values: secrets)
    python: str | None = None                   # an interpreter or a virtualenv on the nodes

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def world_size(self) -> int:
        return self.workers + self.ps

    def tasks(self, workers: int | None = None) -> tuple[TaskSpec, ...]:
        """Ranks as scheduler tasks: workers first (ranks 0..W-1), then parameter servers."""
        w = self.workers if workers is None else workers
        out = []
        for i in range(w):
            d = [0.0] * NRES
            d[0], d[1] = float(self.gpus_per_worker), float(self.cpus_per_worker)
            out.append(TaskSpec(i, Role.WORKER, tuple(d)))
        for j in range(self.ps):
            d = [0.0] * NRES
            d[1] = float(self.ps_cpus)
            out.append(TaskSpec(w + j, Role.PS, tuple(d)))
        return tuple(out)

    def to_jobspec(self, job_id: str, submit_time_s: float) -> JobSpec:
        return JobSpec(job_id=job_id, submit_time_s=submit_time_s, kind="dl", tasks=self.tasks(),
                       priority=self.priority,
                       deadline_s=None if self.deadline_s is None else submit_time_s + self.deadline_s,
                       model=self.model, comm="ps" if self.ps else "allreduce",
                       batch_size=self.batch_size,
                       iterations=float(self.iterations) if self.iterations else None, user=self.user,
                       queue=self.queue, preemptible=self.preemptible,
                       extra=(json.dumps({"max_batch_size": self.max_batch_size})
                              if self.max_batch_size else None))


def _lines(text: str) -> dict[str, int]:
    """1-based line of each top-level key (best effort; {} when YAML cannot be composed)."""
    import yaml
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    out: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            if isinstance(k, yaml.ScalarNode):
                out[str(k.value)] = k.start_mark.line + 1
    return out


def _check(kind: str, key: str, v: Any, err) -> Any:
    if kind == "name":
        if not isinstance(v, str) or not _NAME.match(v):
            err(key, f"must be 1-64 letters, digits, '-', '_' or '.', got {v!r}")
        return v
    if kind == "str":
        if not isinstance(v, (str, int)) or isinstance(v, bool):
            err(key, f"must be a string, got {v!r}")
        if len(str(v)) > 128:
            err(key, f"must be at most 128 characters, got {len(str(v))}")
        return str(v)
    if kind == "secrets":              # the values are never echoed (they may be secrets)
        if not isinstance(v, dict):
            err(key, "must be a mapping of NAME: value pairs")
        return dict(v)
    if kind == "path":
        if not isinstance(v, str) or not v or len(v) > 4096 or "\0" in v:
            err(key, "must be a path of 1-4096 characters")
        return v
    if kind == "bool":
        if not isinstance(v, bool):
            err(key, f"must be true or false, got {v!r}")
        return v
    if kind == "command":
        if (not isinstance(v, list) or not v or len(v) > MAX_ARGV
                or not all(isinstance(a, str) and a and len(a) <= MAX_ARG_CHARS and "\0" not in a for a in v)):
            err(key, f"must be a list of 1-{MAX_ARGV} non-empty strings (each at most {MAX_ARG_CHARS} "
                     f"characters), e.g. [python, train.py, --epochs, '10']")
        return tuple(v)
    if kind == "map":
        if not isinstance(v, dict):
            err(key, f"must be a mapping, got {v!r}")
        return dict(v)
    if kind in ("int", "int0", "int1"):
        if isinstance(v, bool) or not isinstance(v, int):
            err(key, f"must be an integer, got {v!r}")
        lo = {"int": None, "int0": 0, "int1": 1}[kind]
        if lo is not None and v < lo:
            err(key, f"must be >= {lo}, got {v}")
        return int(v)
    if kind in ("num0", "gpus"):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0:
            err(key, f"must be a number >= 0, got {v!r}")
        if kind == "gpus" and v > 1 and float(v) != int(v):
            err(key, f"must be a fraction <= 1 or a whole number, got {v}")
        return float(v)
    raise AssertionError(kind)


def job_spec_from_dict(spec: Any, *, file: str | None = None, base_dir: Path | None = None,
                       lines: dict[str, int] | None = None, script_roots=None) -> RuntimeJobSpec:
    """Validate a parsed job spec. Errors are InputErrors naming file, line and field.
    `script_roots`: the server's --script-root directories; a torchrun job's script must lie in
    its workdir or one of them (None: not checked, as a client cannot know the server's)."""
    lines = lines or {}

    def err(key: str | None, msg: str):
        raise InputError(msg, file=file, line=lines.get(key) if key else None, field=key)

    if not isinstance(spec, dict):
        err(None, "a job spec must be a mapping of fields (name, entry, workers, batch_size, ...)")
    unknown = sorted(str(k) for k in spec if k not in FIELDS)
    if unknown:
        err(unknown[0], f"unknown field (allowed: {', '.join(FIELDS)})")
    vals: dict[str, Any] = {}
    byo = spec.get("command") is not None
    for key, (kind, default, required) in FIELDS.items():
        if spec.get(key) is None:
            if required and not (byo and key in ("entry", "batch_size")):
                err(key, "is required")
            if default is not None:
                vals[key] = default
            continue
        vals[key] = _check(kind if kind != "entry" else "str", key, spec[key], err)
    if byo:
        return _byo_spec(vals, spec, base_dir, err, script_roots)
    if any(spec.get(k) is not None for k in BYO_ONLY):
        k = next(k for k in BYO_ONLY if spec.get(k) is not None)
        err(k, "is for a job that gives `command` (a script of your own)")
    if (vals.get("iterations") is None) == (vals.get("epochs") is None):
        err("iterations" if "iterations" in spec else "epochs", "give exactly one of iterations and epochs")
    if vals["batch_size"] % vals["workers"]:
        err("batch_size", f"must be divisible by workers ({vals['workers']}), got {vals['batch_size']}")
    mb = vals.get("max_batch_size")
    if mb is not None and (mb < vals["batch_size"] or vals["ps"]):
        err("max_batch_size", f"must be >= batch_size ({vals['batch_size']}), got {mb}" if not vals["ps"]
            else "is for an all-reduce job (ps: 0): a policy adapts its batch and workers")
    entry = vals["entry"]
    if entry.endswith(".py"):
        p = Path(entry)
        if not p.is_absolute():
            p = (base_dir or Path.cwd()) / p
        if not p.is_file():
            err("entry", f"no such program file: {p}")
        entry = str(p.resolve())
    elif not _ENTRY_FN.match(entry):
        err("entry", f"must be a .py file or 'package.module:function', got {entry!r}")
    problem = program_problem(entry)
    if problem:
        err("entry", problem)
    vals["entry"] = entry
    if vals.get("workdir") is not None:
        w = Path(vals["workdir"])
        if not w.is_absolute():
            w = (base_dir or Path.cwd()) / w
        if not w.is_dir():
            err("workdir", f"no such directory: {w}")
        vals["workdir"] = str(w.resolve())
    vals.setdefault("args", {})
    return RuntimeJobSpec(**vals)


def _byo_spec(vals: dict, spec: dict, base_dir: Path | None, err, script_roots) -> RuntimeJobSpec:
    """The rest of a `command` job's checks (dlsched.runtime.byo, byo_launch)."""
    from dlsched.runtime.byo import regex_problem
    from dlsched.runtime.byo_launch import env_problem, python_problem
    if spec.get("entry"):
        err("entry", "give either entry (a main(ctx) program) or command (a script of your own), not both")
    launcher = vals.get("launcher") or "env"
    if launcher not in LAUNCHERS:
        err("launcher", f"must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    vals["launcher"] = launcher
    if vals["ps"]:
        err("ps", "a command job has no parameter-server ranks (ps: 0)")
    if vals.get("max_batch_size") is not None:
        err("max_batch_size", "is for a main(ctx) program (entry): a command job cannot take a new batch")
    if vals.get("iterations") is not None and vals.get("epochs") is not None:
        err("iterations", "give at most one of iterations and epochs")
    vals.setdefault("batch_size", None)
    vals["grace_s"] = DEFAULT_GRACE_S if vals.get("grace_s") is None else vals["grace_s"]
    prog = vals.get("progress")
    if prog is not None:
        extra = sorted(str(k) for k in prog if k != "regex")
        if extra or "regex" not in prog:
            err("progress", f"must be {{regex: '...'}}, got the keys {sorted(map(str, prog))}")
        problem = regex_problem(prog["regex"])
        if problem:
            err("progress", f"progress.regex {problem}")
        vals["progress"] = {"regex": prog["regex"]}
    if vals.get("env") is not None:
        problem = env_problem(vals["env"])
        if problem:
            err("env", problem)
        vals["env"] = {k: str(v) for k, v in vals["env"].items()}
    if vals.get("python") is not None:
        problem = python_problem(vals["python"])
        if problem:
            err("python", problem)
    w = Path(vals["workdir"]) if vals.get("workdir") is not None else (base_dir or Path.cwd())
    if not w.is_absolute():
        w = (base_dir or Path.cwd()) / w
    if not w.is_dir():
        err("workdir", f"no such directory: {w}")
    vals["workdir"] = str(w.resolve())
    if launcher == "torchrun":
        _torchrun_checks(vals["command"], w, script_roots, err)
    else:
        _command_exists(vals["command"], w, err)
    vals.setdefault("args", {})
    return RuntimeJobSpec(**vals)


def _torchrun_checks(argv, w: Path, script_roots, err) -> None:
    """A torchrun job's command: torchrun's options (byo_launch.torchrun_parts), its script
    there, and inside the allowed roots when the server's are given."""
    from dlsched.runtime.byo_launch import outside_roots, script_of, torchrun_parts
    try:
        opts, script_argv = torchrun_parts(argv)
    except ValueError as e:
        err("command", str(e))
    script = script_of(opts, script_argv)
    if script is None:
        return
    p = Path(script) if Path(script).is_absolute() else w / script
    if not p.is_file():
        err("command", f"no such script: {p} (relative paths are from the workdir, {w})")
    if script_roots is not None:
        problem = outside_roots(script, str(w), script_roots)
        if problem:
            err("command", problem)


def _command_exists(argv, w: Path, err) -> None:
    """`launcher: env`: the executable is there (python: the interpreter), and a .py script after
    python too."""
    import shutil
    exe = argv[0]
    if exe not in ("python", "python3"):
        if "/" in exe:
            p = Path(exe) if Path(exe).is_absolute() else w / exe
            found = p.is_file() and os.access(p, os.X_OK)
        else:
            found = shutil.which(exe) is not None
        if not found:
            err("command", f"no such executable on this node: {exe!r} (give python, a name on PATH or a path)")
    elif len(argv) > 1 and argv[1].endswith(".py"):
        script = Path(argv[1]) if Path(argv[1]).is_absolute() else w / argv[1]
        if not script.is_file():
            err("command", f"no such script: {script} (relative paths are from the workdir, {w})")


MAX_SPEC_FILE_BYTES = 1024 ** 2
MAX_PROGRAM_BYTES = 16 * 1024 ** 2


def program_problem(entry: str) -> str:
    """Why the program `entry` cannot run ("" when it can, as far as can be told without
    running it): the file does not parse, or defines no `main`; a 'module:function' whose
    module cannot be found or does not define the function."""
    import ast
    import importlib.util
    if entry.endswith(".py"):
        path, fn = Path(entry), "main"
    else:
        mod, fn = entry.split(":")
        try:
            found = importlib.util.find_spec(mod)
        except (ImportError, ValueError) as e:
            return f"cannot import {mod}: {e}"
        if found is None:
            return f"no module named {mod!r} (for {entry})"
        if not (found.origin or "").endswith(".py"):
            return ""                           # compiled or namespace: checked when it runs
        path = Path(found.origin)
    try:
        if path.stat().st_size > MAX_PROGRAM_BYTES:
            return f"{path}: over {MAX_PROGRAM_BYTES} bytes"
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as e:
        return f"{path}, line {e.lineno}: the program does not parse: {e.msg}"
    except (OSError, ValueError) as e:
        return f"{path}: cannot read the program: {e}"
    for node in tree.body:
        names = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.asname or a.name.split(".")[0] for a in node.names]
        if fn in names:
            return ""
    return f"{path} defines no top-level {fn}() (a job's program is `def {fn}(ctx): ...`)"


def load_job_spec(path: str | Path) -> RuntimeJobSpec:
    """Read and validate a job spec YAML file (at most 1 MiB; alias bombs refused)."""
    from dlsched.core.yamlio import load_yaml_text, read_text_bounded
    p = Path(path)
    text = read_text_bounded(p, MAX_SPEC_FILE_BYTES, "job spec")
    data = load_yaml_text(text, file=str(path))
    return job_spec_from_dict(data, file=str(path), base_dir=p.resolve().parent, lines=_lines(text))
