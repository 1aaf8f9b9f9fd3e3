"""RankWorker: a long-lived Ray actor that runs one rank of a job at a time.

Workers are detached, named actors (`w-<node>-<n>` in the runtime's namespace), pinned to one node
by its `ray.io/node-id` label, with torch imported when they start. They stay up between jobs
(a warm pool per node: seed 003's pre-scheduling), so starting, resuming or migrating a job does
not pay for a new Python process and a torch import; a restarted server finds them by name.

Threaded actor: `start` runs the program in a thread and returns at once; `wait` blocks until the
run ends (the runtime keeps one `wait` call in flight per rank, so a dead rank or node shows as an
error on it); `stop` asks the program to stop at its next mini-batch boundary; `status` and
`drain` are cheap reads. A worker whose program touched CUDA is retired after the run (its CUDA
context is bound to the GPU it had).
"""
from __future__ import annotations

import os
import socket
import time
import threading
import traceback

import ray

# the payload keys of a command job (runtime/byo.py), not JobContext's
_BYO = ("command", "progress_regex", "local_rank", "local_world_size", "grace_s", "torchrun", "torchrun_idle",
        "cuda_visible", "user_env", "python")


class RankWorker:
    def __init__(self, node: str, warm_imports: tuple[str, ...] = ()):
        import importlib

        import torch  # noqa: F401  (warm: the import is most of a rank's start-up time)
        import torch.distributed  # noqa: F401
        torch.set_num_threads(1)
        os.umask(0o077)                   # checkpoints and logs: owner only
        for mod in warm_imports:          # what the programs import (a job's first step is then fast)
            try:
                importlib.import_module(mod)
            except Exception:
                pass
        self.node = node
        self.ctx = None
        self.run_id = None
        self.job_id = None
        self.thread = None
        self.result = None
        self.done = threading.Event()
        self.done.set()
        self.preloads: dict[str, threading.Thread | None] = {}   # program_key -> its preload
        self.proc = None                  # a command job's process (runtime/byo.py)

    def ping(self) -> dict:
        return {"pid": os.getpid(), "node": self.node}

    def preload(self, entry: str, args: dict) -> bool:
        """Load a program and its data ahead of its run (pre-scheduling, runtime/pool.py), in a
        thread: returns at once. False when this worker has it already."""
        from dlsched.runtime.sdk import program_key
        key = program_key(entry, args)
        if key in self.preloads:
            return False

        def run():
            from dlsched.runtime.sdk import prepare_entry
            try:
                prepare_entry(entry, dict(args or {}))
            except BaseException:             # the run itself will meet the error and report it
                pass
        t = self.preloads[key] = threading.Thread(target=run, daemon=True, name="dlsched-preload")
        t.start()
        return True

    def until_saving(self, run_id: str, timeout: float | None = None) -> bool:
        """Block until the run's last step is done (its saving phase) or the run ends; True in
        the first case."""
        ctx = self.ctx
        if run_id != self.run_id or ctx is None:
            return False
        end = None if timeout is None else time.monotonic() + timeout
        while not ctx.saving.wait(0.2):
            if self.done.is_set() or (end is not None and time.monotonic() > end):
                return False
        return True

    def address(self) -> tuple[str, int]:
        """This node's IP and a free TCP port, for the gang's rendezvous (rank 0)."""
        ip = ray.util.get_node_ip_address()
        with socket.socket() as s:
            s.bind(("", 0))
            return ip, s.getsockname()[1]

    def start(self, payload: dict, address: tuple[str, int] | None = None) -> str:
        """Run a rank of `payload` in a thread; returns at once. `address`: rank 0's rendezvous
        address and port (the server passes rank 0's `address()` call, which Ray resolves first)."""
        from dlsched.runtime.sdk import JobContext
        if not self.done.is_set():
            raise RuntimeError(f"worker busy with {self.run_id}")
        if address is not None:
            payload = {**payload, "master_addr": address[0], "master_port": address[1]}
        fields = {k: v for k, v in payload.items() if k not in ("entry", "env", "log_path", "workdir") + _BYO}
        self.ctx = JobContext(**fields)
        self.run_id, self.job_id = payload["run_id"], payload["job_id"]
        self.result = None
        self.done.clear()
        if payload.get("command"):           # a script of its own, in a process (runtime/byo.py)
            from dlsched.runtime.byo import ProcRun
            self.proc = ProcRun(payload, self.ctx, payload.get("log_path"), payload.get("workdir"))
            self.thread = threading.Thread(target=self._run_proc, daemon=True)
            self.thread.start()
            return self.run_id
        self.proc = None
        for k, v in (payload.get("env") or {}).items():
            os.environ[k] = v
        self.thread = threading.Thread(target=self._run, args=(payload["entry"], payload.get("log_path"),
                                                               payload.get("workdir")), daemon=True)
        self.thread.start()
        return self.run_id

    def _run_proc(self) -> None:
        """A command job's rank: its process runs, this thread waits for it (the process dies
        with this thread: PR_SET_PDEATHSIG, byo.py)."""
        try:
            self.result = self.proc.run()
        except BaseException as e:        # the worker's own error: reported, the worker lives on
            self.result = {"state": "failed", "step": self.ctx.step, "failed_at": time.time(),
                           "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
        finally:
            self.ctx.close()
            self.result["reusable"] = True
            self.done.set()

    def _run(self, entry: str, log_path: str | None, workdir: str | None = None) -> None:
        import contextlib

        from dlsched.runtime.joblogs import Capture
        from dlsched.runtime.sdk import load_entry, program_key
        ctx = self.ctx
        cap = (Capture(log_path, f"run {self.run_id} rank {ctx.rank} on {self.node} (pid {os.getpid()})")
               if log_path else contextlib.nullcontext())
        key = program_key(entry, ctx.args)
        pre = self.preloads.setdefault(key, None)      # loaded from here on, by this run if not before
        if pre is not None:
            pre.join()
        loaded = False
        try:
            if workdir:                # the job's own working directory (one rank at a time here)
                os.makedirs(workdir, mode=0o700, exist_ok=True)
                os.chdir(workdir)
            with cap:
                try:
                    fn = load_entry(entry)
                    loaded = True
                    fn(ctx)
                except BaseException:
                    traceback.print_exc()      # into the rank's log, where the user looks
                    raise
            self.result = {"state": "stopped" if ctx.stopped else "done", "step": ctx.step}
        except BaseException as e:  # the program's own failure: reported, the worker lives on
            # a program that cannot even be loaded (syntax or import error, no main) fails the
            # same way on every attempt: `permanent`, not retried
            self.result = {"state": "failed", "step": ctx.step, "failed_at": time.time(),
                           "permanent": not loaded,
                           "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
        finally:
            ctx.close()
            try:
                import torch.distributed as dist
                if dist.is_initialized():
                    dist.destroy_process_group()
            except Exception:
                pass
            try:
                import torch
                self.result["reusable"] = not torch.cuda.is_initialized()
            except Exception:
                pass
            self.done.set()

    def wait(self, run_id: str, timeout: float | None = None) -> dict | None:
        if run_id != self.run_id:
            return {"state": "unknown", "step": 0, "error": f"worker runs {self.run_id}, not {run_id}"}
        if not self.done.wait(timeout):
            return None
        return dict(self.result or {})

    def stop(self, run_id: str, grace_s: float = 30.0) -> bool:
        """Ask the run to stop: an SDK program at its next mini-batch boundary; a command
        job's processes by SIGTERM, then SIGKILL after `grace_s`."""
        if run_id == self.run_id and self.ctx is not None and not self.done.is_set():
            if self.proc is not None:
                self.proc.stop(grace_s)
            else:
                self.ctx.request_stop()
            return True
        return False

    def status(self) -> dict:
        ctx = self.ctx
        return {"run_id": self.run_id, "job_id": self.job_id,
                "state": "running" if not self.done.is_set() else ("idle" if self.result is None else "finished"),
                "result": self.result, "step": ctx.step if ctx else 0,
                # can it stop at a mini-batch boundary? (its loop is ctx.steps); has it reported?
                "in_steps": bool(ctx and ctx.in_steps), "reported": bool(ctx and ctx._seq),
                "command": self.proc is not None}

    def drain(self, ack: int = 0) -> tuple[list, list]:
        return self.ctx.drain(ack) if self.ctx is not None else ([], [])

    def release(self) -> None:
        """Back to the pool: forget the finished run."""
        if self.done.is_set():
            self.ctx = self.run_id = self.job_id = self.result = self.proc = None
