"""The SDK a training program uses: rendezvous, restore, the step loop, reports, checkpoints,
and a clean stop at a mini-batch boundary.

A program is a function `main(ctx: JobContext)` (see examples/):

    def main(ctx):
        ctx.init_process_group()                      # gloo on CPU, NCCL when CUDA is there
        model, opt = build(ctx.args)
        state = ctx.restore()                         # the latest checkpoint, or None
        start = 0
        if state:
            model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
        save = lambda: {"model": model.state_dict(), "opt": opt.state_dict()}
        for step in ctx.steps(start, save):           # stops cleanly when the scheduler asks
            loss = train_one_batch(step)
            ctx.report(loss=loss)                      # step time is measured by ctx.steps

A program that lets an adaptive policy (pollux) choose its batch size and replica count reads
`ctx.batch_size` (the global batch of this run, set by the policy at each restart) and
`ctx.local_batch` at start, and averages its gradients with `ctx.allreduce_gradients(model)`
after `backward()` instead of wrapping the model in DistributedDataParallel: that one all-reduce
also measures what the server fits goodput from (see `allreduce_gradients`).

Contract
- `steps` agrees on stopping across the gang: before every step the ranks all-reduce a stop flag
  (one tiny collective), so every rank stops after the same mini-batch. On a stop it checkpoints
  and returns; the runtime then frees the ranks (Gandiva's suspend unit).
- A checkpoint is `save()` called on every rank (so parameter servers can gather their shards);
  rank 0 writes what its call returned, to `step-NNNNNNNN.pt.tmp`, then renames it (atomic), and
  keeps the newest two; the ranks then pass a barrier. The file holds `step` (steps done).
- Reports are kept by rank 0 and drained by the runtime (the server stores and serves them).
- A program that runs its own loop instead of `steps` may give the step it is at with its
  report (`ctx.report(step=i, loss=...)`): that is its progress. It cannot be stopped at a
  mini-batch boundary: a suspend, a migration or a preemption stops it at once, and the work
  since its last checkpoint is lost (the runtime says how many steps).
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

KEEP_CHECKPOINTS = 2
STATS_LOG = "stats.jsonl"


def latest_checkpoint(ckpt_dir: str | Path) -> Path | None:
    d = Path(ckpt_dir)
    if not d.is_dir():
        return None
    files = sorted(d.glob("step-*.pt"))
    return files[-1] if files else None


def clean_checkpoints(ckpt_dir: str | Path, keep: int = KEEP_CHECKPOINTS) -> list[str]:
    """Remove superseded checkpoints (all but the newest `keep`) and half-written temp files."""
    d = Path(ckpt_dir)
    removed = []
    if not d.is_dir():
        return removed
    for p in list(d.glob("*.tmp")) + sorted(d.glob("step-*.pt"))[:-keep or None]:
        try:
            p.unlink()
            removed.append(p.name)
        except FileNotFoundError:
            pass
    return removed


@dataclass
class JobContext:
    job_id: str
    run_id: str
    rank: int
    world_size: int
    worker_ranks: list[int]
    ps_ranks: list[int]
    master_addr: str
    master_port: int
    ckpt_dir: str
    args: dict = field(default_factory=dict)
    batch_size: int = 32         # the global batch of this run (an adaptive policy may change it)
    init_batch_size: int | None = None   # the batch the job was submitted with (M0), None: batch_size
    num_nodes: int = 1           # nodes the worker ranks are on
    iterations: int | None = None
    epochs: int | None = None
    checkpoint_every: int = 20
    gpus: float = 0.0
    stop_event: threading.Event = field(default_factory=threading.Event)
    saving: threading.Event = field(default_factory=threading.Event)   # saving, or lead_s before
    lead_s: float = 0.0          # set `saving` this many seconds (by the step time) before the end
    stats: list = field(default_factory=list)
    checkpoints: list = field(default_factory=list)
    step: int = 0
    stopped: bool = False
    in_steps: bool = False       # the program's loop is `steps`: it can stop at a mini-batch boundary
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _step_t0: float = 0.0
    _spe: int | None = None
    _seq: int = 0
    _log: Any = None
    _grad: dict = field(default_factory=dict)    # the last allreduce_gradients' measures

    # -- roles -------------------------------------------------------------------------------
    @property
    def role(self) -> str:
        return "ps" if self.rank in self.ps_ranks else "worker"

    @property
    def num_workers(self) -> int:
        return len(self.worker_ranks)

    @property
    def worker_index(self) -> int:
        return self.worker_ranks.index(self.rank)

    @property
    def local_batch(self) -> slice:
        """This worker's slice of the global mini-batch (the global batch is the same for every
        world size, so a resized job computes the same mean gradient)."""
        per = self.batch_size // self.num_workers
        return slice(self.worker_index * per, (self.worker_index + 1) * per)

    @property
    def device(self):
        import torch
        if self.gpus > 0 and torch.cuda.is_available():
            return torch.device("cuda", 0)
        return torch.device("cpu")

    # -- process group ---------------------------------------------------------------------
    def init_process_group(self, backend: str | None = None) -> None:
        """Join the gang: every rank rendezvouses at rank 0's address (gloo on CPU, NCCL when
        this rank has a GPU and CUDA is there, unless `backend` is given)."""
        import datetime

        import torch
        import torch.distributed as dist
        if backend is None:
            backend = "nccl" if self.gpus > 0 and torch.cuda.is_available() else "gloo"
        timeout = datetime.timedelta(seconds=60)
        listen = None
        if self.rank == 0:
            # rank 0's rendezvous store listens on the node's address only (an init_method URL
            # would make torch listen on every interface): a socket bound here is handed over
            import socket
            fam = socket.AF_INET6 if ":" in self.master_addr else socket.AF_INET
            listen = socket.socket(fam, socket.SOCK_STREAM)
            listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listen.bind((self.master_addr, self.master_port))
            listen.listen(128)
        store = dist.TCPStore(self.master_addr, self.master_port, self.world_size, self.rank == 0,
                              timeout=timeout, master_listen_fd=listen.fileno() if listen else None,
                              use_libuv=False)
        if listen is not None:
            listen.detach()                  # the store owns the descriptor now (closes it with itself)
        dist.init_process_group(backend, store=store, rank=self.rank, world_size=self.world_size,
                                timeout=timeout)

    def _dist(self):
        import torch.distributed as dist
        return dist if dist.is_available() and dist.is_initialized() else None

    # -- checkpoints -------------------------------------------------------------------------
    def restore(self, *, weights_only: bool = True) -> dict | None:
        """The latest checkpoint's dict (it has 'step'), or None for a fresh start.

        Loaded with `torch.load(weights_only=True)`: tensors, state dicts and plain Python
        values, never arbitrary pickled objects (a checkpoint file is data; unpickling it
        could run code). A program that saves other objects passes weights_only=False for its
        own checkpoints, knowingly."""
        import torch
        p = latest_checkpoint(self.ckpt_dir)
        if p is None:
            return None
        return torch.load(p, map_location="cpu", weights_only=weights_only)

    def checkpoint(self, step: int, save: Callable[[], dict]) -> None:
        import torch
        state = save()
        if self.rank == 0:
            d = Path(self.ckpt_dir)
            d.mkdir(parents=True, exist_ok=True)
            final = d / f"step-{step:08d}.pt"
            tmp = d / f"step-{step:08d}.pt.tmp"
            torch.save({**state, "step": step}, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, final)
            clean_checkpoints(d)
            with self._lock:
                self.checkpoints.append({"step": step, "path": str(final), "time": time.time(),
                                         "seq": self._next_seq()})
        dist = self._dist()
        if dist is not None:
            dist.barrier()

    # -- the step loop -----------------------------------------------------------------------
    def total_steps(self, steps_per_epoch: int | None = None) -> int:
        if self.iterations:
            return int(self.iterations)
        if not steps_per_epoch:
            raise ValueError("a job given in epochs needs steps_per_epoch")
        return int(self.epochs) * int(steps_per_epoch)

    def _stop_agreed(self) -> bool:
        dist = self._dist()
        flag = 1 if self.stop_event.is_set() else 0
        if dist is None:
            return bool(flag)
        import torch
        t = torch.tensor([flag], dtype=torch.int32)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def steps(self, start: int, save: Callable[[], dict], steps_per_epoch: int | None = None) -> Iterator[int]:
        """The job's steps from `start` (see the module docstring). Steps count work at the
        submitted batch (`init_batch_size`, M0): a run that an adaptive policy gave batch M
        advances M / M0 of them per mini-batch (the step given is the M0-steps done, rounded
        down), so the job's work, iterations x M0 samples, is the same whatever its batch."""
        total = self.total_steps(steps_per_epoch)
        self._spe = steps_per_epoch
        self.in_steps = True
        scale = self.batch_size / self.init_batch_size if self.init_batch_size else 1.0
        step, done, saved = start, float(start), start
        step_s = None                 # the last step's wall time (for lead_s)
        while step < total:
            if self._stop_agreed():
                self.checkpoint(step, save)
                self.stopped = True
                return
            if step // self.checkpoint_every > saved // self.checkpoint_every:
                self.checkpoint(step, save)
                saved = step
            self.step = step
            self._step_t0 = time.perf_counter()
            yield step
            step_s = time.perf_counter() - self._step_t0
            done += scale
            step = int(done + 1e-9)
            self.step = step
            if self.lead_s > 0 and (total - step) / scale * step_s <= self.lead_s:
                self.saving.set()     # the end is near: the runtime may preload the next job
        self.saving.set()             # the saving phase: the runtime may preload the next job
        self.checkpoint(step, save)

    # -- gradients (an adaptive job's goodput inputs) ---------------------------------------
    def allreduce_gradients(self, model) -> None:
        """Average the gradients of `model` (a module or its parameters, after `backward()`)
        over the worker ranks in one all-reduce, and measure what Pollux's goodput model needs.
        The next `report` carries, from rank 0: `sync_s` (the all-reduce's seconds: a step's
        sync part), `local_bsz`, `replicas`, `nodes`, and, with 2 or more replicas,
        `grad_sqr` and `grad_var`, the gradient statistics at the submitted batch M0
        (`gradient_stats`). The local squared norm rides in the same buffer: one collective."""
        import torch
        params = model.parameters() if hasattr(model, "parameters") else model
        ps = [p for p in params if p.grad is not None]
        if not ps:
            raise ValueError("allreduce_gradients: no parameter has a gradient (call it after backward())")
        n = self.num_workers
        t0 = time.perf_counter()
        flat = torch.cat([p.grad.reshape(-1) for p in ps])
        buf = torch.cat([flat, flat.pow(2).sum().reshape(1)])
        dist = self._dist()
        if dist is not None and n > 1:
            dist.all_reduce(buf)
            buf /= n
        i = 0
        for p in ps:
            k = p.grad.numel()
            p.grad.copy_(buf[i:i + k].view_as(p.grad))
            i += k
        total_sqr = float(buf[:-1].pow(2).sum())
        local_sqr = float(buf[-1])
        sync_s = time.perf_counter() - t0
        local_bsz = self.batch_size // max(n, 1)
        rec = {"sync_s": sync_s if n > 1 else 0.0, "local_bsz": float(local_bsz),
               "replicas": float(n), "nodes": float(self.num_nodes)}
        if n > 1:
            sqr, var = gradient_stats(local_sqr, total_sqr, n, local_bsz,
                                      self.init_batch_size or self.batch_size)
            rec.update(grad_sqr=sqr, grad_var=var)
        self._grad = rec

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def report(self, **metrics: float) -> None:
        """Record this step's metrics (rank 0 keeps them: loss, accuracy, ...). A program with
        its own loop (no `steps`) gives its step here: `report(step=i, loss=...)`."""
        if "step" in metrics:
            self.step = int(metrics.pop("step"))
        if self.rank != 0:
            return
        rec = {"step": self.step, "step_s": time.perf_counter() - self._step_t0, "time": time.time()}
        if self._spe:
            rec["epoch"] = self.step // self._spe
        rec.update(self._grad)
        self._grad = {}
        rec.update({k: float(v) for k, v in metrics.items()})
        with self._lock:
            if self._log is None:
                Path(self.ckpt_dir).mkdir(parents=True, exist_ok=True)
                self._log = open(Path(self.ckpt_dir) / STATS_LOG, "a")
            # beside the checkpoints: a rank or node that dies before the server read these
            # records does not lose the steps its last checkpoint already covers
            self._log.write(json.dumps(rec) + "\n")
            self._log.flush()
            rec["seq"] = self._next_seq()
            self.stats.append(rec)

    def drain(self, ack: int = 0) -> tuple[list, list]:
        """Records not yet acknowledged. `ack` is the highest `seq` the caller has stored: those
        are dropped now, the rest are returned and kept until acknowledged, so a server that dies
        between reading and storing loses nothing (the next one reads them again)."""
        with self._lock:
            self.stats = [r for r in self.stats if r["seq"] > ack]
            self.checkpoints = [r for r in self.checkpoints if r["seq"] > ack]
            return list(self.stats), list(self.checkpoints)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def request_stop(self) -> None:
        self.stop_event.set()


def gradient_stats(local_sqr: float, total_sqr: float, replicas: int, local_bsz: int,
                   init_batch_size: int) -> tuple[float, float]:
    """(grad_sqr, grad_var): |E g|^2 and tr Var g at batch `init_batch_size` (M0), estimated
    from one step of `replicas` (N >= 2) data-parallel replicas, each on `local_bsz` (b) samples,
    as AdaptDL does (adaptdl/torch/gradient_noise_scale.py): with S the per-sample gradient
    variance, E|g_i|^2 = |G|^2 + S/b (`local_sqr`: the replicas' mean) and
    E|mean g|^2 = |G|^2 + S/(N b) (`total_sqr`), so

        grad_sqr = (N total_sqr - local_sqr) / (N - 1)
        grad_var = S / M0 = (local_sqr - total_sqr) N b / ((N - 1) M0)

    Unbiased and noisy: one step's grad_sqr may be negative; the server averages many."""
    n = int(replicas)
    if n < 2:
        raise ValueError("gradient statistics need at least 2 replicas")
    sqr = (n * total_sqr - local_sqr) / (n - 1)
    var = (local_sqr - total_sqr) * n * local_bsz / ((n - 1) * float(init_batch_size))
    return float(sqr), float(var)


_LOADED: dict[tuple[str, float], Any] = {}


def load_module(entry: str) -> Any:
    """The module of a program: a file is executed once per worker process and version (its
    mtime), so warm workers reuse it; 'package.module:function' imports the module."""
    import importlib
    import importlib.util
    if not entry.endswith(".py"):
        return importlib.import_module(entry.split(":")[0])
    key = (entry, os.stat(entry).st_mtime)
    mod = _LOADED.get(key)
    if mod is None:
        name = "dlsched_job_" + Path(entry).stem
        spec = importlib.util.spec_from_file_location(name, entry)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _LOADED[key] = mod
    return mod


def load_entry(entry: str) -> Callable[[Any], Any]:
    """The `main` of a program file, or the function named by 'package.module:function'."""
    return getattr(load_module(entry), "main" if entry.endswith(".py") else entry.split(":")[1])


def program_key(entry: str, args: dict | None) -> str:
    """What a warm worker has loaded for a job: its program and the arguments its `prepare`
    got (another dataset is another load)."""
    return entry + "\n" + json.dumps(args or {}, sort_keys=True, default=str)


def prepare_entry(entry: str, args: dict) -> bool:
    """Load a program ahead of its run (the runtime's pre-scheduling): its module (its imports)
    and, when the program defines `prepare(args)`, what that loads (its dataset, which the
    program keeps in the process, so the run that follows in this warm worker finds it). True
    when the program has a `prepare`."""
    prep = getattr(load_module(entry), "prepare", None)
    if prep is None:
        return False
    prep(args)
    return True
