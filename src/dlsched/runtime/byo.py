"""Bring your own training script: a job whose spec gives `command` runs that command, one
process per rank, on the rank worker's node (`launcher: env`).

The rank worker (worker.py) keeps a `ProcRun` per run. It starts the command in a new session
(its own process group, so a signal reaches the children it forks, DataLoader workers
included) with the torchrun variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), CUDA_VISIBLE_DEVICES (the policy's GPU ids; empty: no GPU) and
DLSCHED_CHECKPOINT_DIR (`<state dir>/checkpoints/<job id>`: the same on every run, 0700). The
process dies with the worker thread that started it (PR_SET_PDEATHSIG), so a worker killed by
the runtime (a broken gang) leaves no orphan behind.

Output: stdout is read line by line (the `progress.regex` of the spec is matched against it,
lines over MAX_LINE bytes are cut first) and written to the rank's log; stderr goes to the log
directly. Progress records go into the run's JobContext exactly as an SDK program's
`ctx.report` does, so the server stores them and the policies see the step rate as for any job.

`dlsched.reporting.report(step=..., loss=...)` writes one JSON line to the FIFO named by
DLSCHED_REPORT_PATH (in a 0700 directory of its own), which the worker reads; `saved(step)`
says what the script's snapshot holds. Outside dlsched both are no-ops.

`launcher: torchrun` (byo_launch.py): the lowest rank of each node runs that node's torchrun;
the node's other ranks start nothing and are `done` at once (`idle`).

Stop (suspend, migrate, resize, cancel): SIGTERM to the process tree's groups, SIGKILL after the
grace period. The result says whether the process ended within it (`within_grace`) and the work
the stop loses (`lost_steps`, `lost_s`; `lost_estimate`).
"""
from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from dlsched.runtime.byo_launch import interpreter, signal_tree, torchrun_argv

MAX_LINE = 4096                    # bytes of a stdout line the regex sees
REPORT_PATH_ENV = "DLSCHED_REPORT_PATH"
_KEEP_STDERR = 20                  # stderr lines kept for a failure's message


class ProgressRegex:
    """Step (and loss, and any other named number) records from lines of a program's stdout.

    Named groups: `step` is the step, every other named group a metric (`loss`, `accuracy`,
    ...). Without named groups, group 1 is the step and group 2 (if any) the loss."""

    def __init__(self, pattern: str):
        self.rx = re.compile(pattern)
        self.named = dict(self.rx.groupindex)

    def parse(self, line: str) -> dict | None:
        m = self.rx.search(line[:MAX_LINE])
        if m is None:
            return None
        if self.named:
            raw = {k: m.group(k) for k in self.named}
            step = raw.pop("step", None)
        else:
            step = m.group(1) if self.rx.groups >= 1 else None
            raw = {"loss": m.group(2)} if self.rx.groups >= 2 else {}
        try:
            out = {"step": int(step)} if step is not None else {}
        except ValueError:
            return None
        for k, v in raw.items():
            try:
                if v is not None:
                    out[k] = float(v)
            except ValueError:
                pass
        return out if "step" in out else None


def regex_problem(pattern) -> str:
    """Why `pattern` cannot be a progress regex ('' when it can)."""
    if not isinstance(pattern, str) or not pattern or len(pattern) > 512:
        return "must be a regular expression of 1-512 characters"
    try:
        rx = re.compile(pattern)
    except re.error as e:
        return f"does not compile: {e}"
    if not rx.groups:
        return "needs a group for the step, e.g. 'step (\\d+) loss ([0-9.]+)'"
    if rx.groupindex and "step" not in rx.groupindex:
        return "names its groups but has no group named 'step'"
    return ""


def child_env(base: dict, payload: dict) -> dict:
    """The environment of a rank's process: the worker's, the spec's own `env:` (`user_env`), the
    torchrun variables, the GPUs, the checkpoint dir, and this package importable (for
    dlsched.reporting). A spec's virtualenv (`python:` a directory) comes first on PATH."""
    env = {k: v for k, v in base.items() if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    env.update({k: str(v) for k, v in (payload.get("user_env") or {}).items()})
    pkg_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    venv = payload.get("python")
    if venv and Path(venv).is_dir():
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = os.pathsep.join(p for p in (str(Path(venv) / "bin"), env.get("PATH", "")) if p)
    gpus = payload.get("cuda_visible")          # a torchrun node: every GPU of its ranks
    if gpus is None:
        gpus = (payload.get("env") or {}).get("CUDA_VISIBLE_DEVICES", "")
    for k in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
        env.pop(k, None)
    if not payload.get("torchrun"):             # (torchrun sets them for its workers)
        env.update({
            "RANK": str(payload["rank"]), "WORLD_SIZE": str(payload["world_size"]),
            "LOCAL_RANK": str(payload["local_rank"]), "LOCAL_WORLD_SIZE": str(payload["local_world_size"]),
            "MASTER_ADDR": str(payload["master_addr"]), "MASTER_PORT": str(payload["master_port"])})
    env.update({
        "CUDA_VISIBLE_DEVICES": gpus,
        "DLSCHED_CHECKPOINT_DIR": payload["ckpt_dir"], "DLSCHED_JOB_ID": payload["job_id"],
        "DLSCHED_RUN_ID": payload["run_id"], "PYTHONUNBUFFERED": "1",
    })
    return env


def resolve_argv(command: list[str], python: str | None = None) -> list[str]:
    """`python`/`python3` is the spec's interpreter (`python:`), else the worker's own (the one
    dlsched and torch run in)."""
    argv = list(command)
    if argv[0] in ("python", "python3"):
        argv[0] = interpreter(python)
    return argv


def launch_argv(payload: dict) -> list[str]:
    """What a rank's process runs: the command, or its node's torchrun (byo_launch.py)."""
    if payload.get("torchrun"):
        return torchrun_argv(payload, interpreter(payload.get("python")))
    return resolve_argv(payload["command"], payload.get("python"))


def _die_with_parent() -> None:           # in the child, before exec
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except Exception:
        pass


class ProcRun:
    """One rank's process of a command job (see the module docstring). `ctx` is the run's
    JobContext: progress records go there."""

    def __init__(self, payload: dict, ctx, log_path: str | None, workdir: str | None):
        self.payload, self.ctx, self.log_path, self.workdir = payload, ctx, log_path, workdir
        self.idle = bool(payload.get("torchrun_idle"))   # a torchrun node's other ranks
        self.argv = [] if self.idle else launch_argv(payload)
        self.progress = ProgressRegex(payload["progress_regex"]) if payload.get("progress_regex") else None
        self.proc: subprocess.Popen | None = None
        self.stop_asked: float | None = None       # monotonic time of the SIGTERM
        self.killed = False
        self.started = threading.Event()
        self.stderr_tail: list[str] = []
        self._last: tuple[int, float] | None = None   # (step, perf_counter) of the last record
        self._step_s: float | None = None             # the last record's step time
        self.saved: int | None = None                  # the step the script's snapshot holds
        self._t_spawn = time.perf_counter()
        self._t_end: float | None = None
        self._lock = threading.Lock()

    # -- running --------------------------------------------------------------------------
    def run(self) -> dict:
        """Start the process, read its output and reports, wait for it; its result."""
        if self.idle:
            self.started.set()
            return {"state": "done", "step": 0, "rc": 0, "idle": True}
        ckpt = Path(self.payload["ckpt_dir"])
        ckpt.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(ckpt, 0o700)
        wd = self.workdir or str(ckpt)
        os.makedirs(wd, mode=0o700, exist_ok=True)
        log = self._open_log()
        fifo_dir = tempfile.mkdtemp(prefix="dlsched-report-")          # 0700
        fifo = os.path.join(fifo_dir, "report")
        os.mkfifo(fifo, 0o600)
        rfd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)   # RDWR: never EOF, never blocks opening
        env = child_env(dict(os.environ), self.payload)
        env[REPORT_PATH_ENV] = fifo
        try:
            with self._lock:
                if self.stop_asked is not None:   # stopped before it started
                    os.close(rfd)
                    shutil.rmtree(fifo_dir, ignore_errors=True)
                    return self._result(None)
                self.proc = subprocess.Popen(
                    self.argv, cwd=wd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, start_new_session=True,
                    preexec_fn=_die_with_parent, close_fds=True)
        except OSError as e:
            os.close(rfd)
            shutil.rmtree(fifo_dir, ignore_errors=True)
            self._write(log, f"dlsched: cannot start {self.argv[0]}: {e}\n".encode())
            os.close(log)
            return {"state": "failed", "step": 0, "failed_at": time.time(), "permanent": True,
                    "error": f"cannot start {self.argv[0]}: {e}"}
        finally:
            self.started.set()
        readers = [threading.Thread(target=self._read_stdout, args=(log,), daemon=True),
                   threading.Thread(target=self._read_stderr, args=(log,), daemon=True),
                   threading.Thread(target=self._read_reports, args=(rfd,), daemon=True)]
        for t in readers:
            t.start()
        rc = self.proc.wait()
        self._t_end = time.perf_counter()
        for t in readers:
            t.join(10)
        os.close(log)
        shutil.rmtree(fifo_dir, ignore_errors=True)
        return self._result(rc)

    def _result(self, rc: int | None) -> dict:
        step = self.ctx.step
        if self.stop_asked is not None:
            stop_s = time.monotonic() - self.stop_asked
            return {"state": "stopped", "step": step, "rc": rc, "within_grace": not self.killed,
                    "stop_s": stop_s, **self.lost_work()}
        if rc == 0:
            return {"state": "done", "step": step, "rc": 0}
        how = f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exit code {rc}"
        tail = "\n".join(self.stderr_tail[-_KEEP_STDERR:])
        return {"state": "failed", "step": step, "rc": rc, "failed_at": time.time(),
                "permanent": True, "error": f"{how}", "traceback": tail[-3000:]}

    def lost_work(self) -> dict:
        """The work a stop loses, estimated from the progress records (docs/runtime-byo-scripts.md):
        - the script said what its snapshot holds (`saved`): the steps reported after it, at the
          last measured step time;
        - it did not: the time since its last report (a lower bound: what it saved is unknown),
          and the whole steps that time holds at the last step time;
        - it never reported: the run's whole time, steps unknown."""
        end = self._t_end or time.perf_counter()
        if self._last is None:
            return {"lost_steps": None, "lost_s": end - self._t_spawn, "lost_basis": "no report"}
        step, t = self._last
        if self.saved is not None:
            n = max(step - self.saved, 0)
            return {"lost_steps": n, "lost_s": n * (self._step_s or 0.0), "lost_basis": "saved",
                    "saved_step": self.saved}
        since = max(end - t, 0.0)
        n = int(since / self._step_s) if self._step_s else 0
        return {"lost_steps": n, "lost_s": since, "lost_basis": "last report"}

    # -- stopping -------------------------------------------------------------------------
    def stop(self, grace_s: float) -> None:
        """SIGTERM to the process tree now, SIGKILL after `grace_s` if it is still there."""
        with self._lock:
            if self.stop_asked is not None:
                return
            self.stop_asked = time.monotonic()
            proc = self.proc
        if proc is None:
            return
        self._signal(signal.SIGTERM)

        def later():
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.killed = True
                self._signal(signal.SIGKILL)
        threading.Thread(target=later, daemon=True, name="dlsched-grace").start()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.killed = True
            self._signal(signal.SIGKILL)

    def _signal(self, sig) -> None:
        signal_tree(self.proc.pid, sig)

    # -- output ---------------------------------------------------------------------------
    def _open_log(self) -> int:
        if not self.log_path:
            return os.open(os.devnull, os.O_WRONLY)
        p = Path(self.log_path)
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        head = (f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} run {self.payload['run_id']} rank "
                f"{self.payload['rank']}: {' '.join(self.argv if self.payload.get('torchrun') else self.payload['command'])[:600]} ===\n")
        self._write(fd, head.encode())
        return fd

    @staticmethod
    def _write(fd: int, data: bytes) -> None:
        try:
            os.write(fd, data)
        except OSError:
            pass

    def _read_stdout(self, log: int) -> None:
        for raw in iter(self.proc.stdout.readline, b""):
            self._write(log, raw)
            if self.progress is not None:
                rec = self.progress.parse(raw[:MAX_LINE].decode("utf-8", errors="replace"))
                if rec is not None:
                    self.record(rec)

    def _read_stderr(self, log: int) -> None:
        for raw in iter(self.proc.stderr.readline, b""):
            self._write(log, raw)
            self.stderr_tail.append(raw[:MAX_LINE].decode("utf-8", errors="replace").rstrip("\n"))
            del self.stderr_tail[:-_KEEP_STDERR]

    def _read_reports(self, rfd: int) -> None:
        """JSON lines from the report FIFO until the process has ended and the FIFO is empty."""
        buf = b""
        try:
            while True:
                ended = self.proc.poll() is not None
                r, _, _ = select.select([rfd], [], [], 0.2)
                chunk = b""
                if r:
                    try:
                        chunk = os.read(rfd, 65536)
                    except BlockingIOError:
                        chunk = b""
                buf += chunk
                *lines, buf = buf.split(b"\n")
                buf = buf[-MAX_LINE:]
                for raw in lines:
                    self._report_line(raw)
                if ended and not chunk:
                    return
        finally:
            os.close(rfd)

    def _report_line(self, raw: bytes) -> None:
        if len(raw) > MAX_LINE:
            return
        try:
            rec = json.loads(raw)
            if "saved" in rec and "step" not in rec:
                self.saved = int(rec["saved"])
                return
            rec = {"step": int(rec["step"]), **{k: float(v) for k, v in rec.items()
                                                if k != "step" and isinstance(k, str) and len(k) <= 64}}
        except (ValueError, TypeError, KeyError, AttributeError):
            return
        self.record(rec)

    def record(self, rec: dict) -> None:
        """A progress record as the SDK's ctx.report makes it; the step time is the time since
        the last record over the steps since it."""
        now = time.perf_counter()
        step = rec["step"]
        if self._last is not None and step > self._last[0]:
            step_s = self._step_s = (now - self._last[1]) / (step - self._last[0])
        else:
            step_s = now - self._t_spawn if self._last is None else None
        self._last = (step, now)
        if step_s is None:
            self.ctx.step = step
            return
        self.ctx._step_t0 = now - step_s
        self.ctx.report(**rec)
