"""A training program whose step takes a set time: data-parallel training (torch.distributed:
all-reduced gradients, gloo on CPU, NCCL on GPUs) of a small linear model on synthetic data,
each step padded with sleep to a target time that depends on the GPU type and the world size.
The machine's own speed (two CPUs here, shared by every rank) then does not decide how fast a job
runs, so a simulator calibrated from what the runtime measured can be checked against it
(`dlsched experiment runtime-fidelity`).

args:
  step_s:   {gpu type: seconds}   one step with one worker, per GPU type (the node's `gpu_type`
                                  label); key "default" for any other type (default 0.2 s)
  serial:   0.25                  the part of a step that does not shrink with more workers
  comm_s:   0.0                   seconds added per extra worker (the all-reduce's cost)
  model:    None                  the name whose loss curve the job reports (below)
  gpu_busy: 0.0                   emulate GPU sharing on a machine without GPUs: the fraction of
                                  a step that uses the GPU (0: no emulation). With n ranks of
                                  jobs on one GPU (the policy packed them: the same node and
                                  CUDA_VISIBLE_DEVICES id), a step takes
                                  max(1, n x gpu_busy) x (1 + interference) of its target
                                  (SharedGpu): light jobs pack for free, heavy ones divide the GPU
  interference: 0.0               how much two jobs on one GPU slow each other beyond dividing it
                                  (caches, memory bandwidth): what makes packing lose
  data_mb:  0                     the training set's size in MB (0: the default 8,192 rows,
                                  about 2 MB): a larger one takes real time to build (random
                                  features and their labels), a stand-in for reading and decoding
                                  a job's dataset. `prepare(args)` builds it ahead of the run: the
                                  runtime's pre-scheduling calls it in a warm worker while the
                                  GPUs the job will get are still saving; the run finds it there
  seed:     0
  lr:       0.01

    target(W) = step_s[type] x (serial + (1 - serial) / W) + comm_s x (W - 1)

A gang spanning several GPU types runs at its slowest rank's target (the ranks all-reduce their
targets once, with MAX): synchronous training waits for the slowest worker.

Every step does real work: each worker computes the gradient of its slice of the global
mini-batch (fixed by the step number, as in allreduce_digits.py, so the run does not depend on
placement or world size), the gang all-reduces the gradients (one flat tensor, gloo or NCCL),
SGD with momentum updates the model; then the step sleeps for what is left of its target.
(Neither DistributedDataParallel nor torch.optim: the first of either in a process imports
torch._dynamo, about 800 modules, 1.3 s alone and 6-12 s with other ranks starting beside it on
two CPUs: a start cost of this machine and of a rank worker's first program, not of the runtime.) The step reports two losses: `loss`, the job's convergence curve of
dlsched.workload.loss (observed_loss for this job id, model and iteration count: the curve the
simulator gives the same job, so Optimus's convergence fit sees the same thing on both
backends), and `train_loss`, the real mean-squared error of the model it trains (rank 0's
slice of the batch).

Checkpoints (model, optimizer, step) go through ctx.steps: at every `checkpoint_every` steps, at
a stop the scheduler asks for (suspend, migrate, resize) and at the end; a run restores the
latest one, under any world size.
"""
from __future__ import annotations

import functools
import time
from types import SimpleNamespace

import torch
import torch.nn as nn

N, D = 8192, 64
MOMENTUM = 0.9


def make_data(seed: int, rows: int = N):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(D, 1, generator=g)
    x = torch.randn(rows, D, generator=g)
    y = x @ w + 0.1 * torch.randn(rows, 1, generator=g)
    return x, y


@functools.lru_cache(maxsize=2)          # kept in the (warm) worker process
def dataset(seed: int, data_mb: float):
    rows = max(N, int(data_mb * 1e6 / (4 * (D + 1))))
    return make_data(seed, rows)


def prepare(args: dict) -> None:
    """Build the job's dataset ahead of its run (the runtime's pre-scheduling)."""
    dataset(int(args.get("seed", 0)), float(args.get("data_mb", 0.0)))


def gpu_type() -> str:
    """This rank's node's `gpu_type` label ("" outside a Ray worker, or when it cannot be read;
    never starts Ray)."""
    try:
        import ray
        if not ray.is_initialized():
            return ""
        return str(ray.get_runtime_context().get_node_labels().get("gpu_type", ""))
    except Exception:
        return ""


class SharedGpu:
    """The emulated GPU (gpu_busy): each rank on a GPU (node, CUDA_VISIBLE_DEVICES id) marks its
    presence with a file named by its pid in that GPU's folder; a step with n ranks present
    takes max(1, n x gpu_busy) x (1 + interference) of its target when n > 1 (the GPU's time
    divided among them, plus what they cost each other), its target when alone."""

    def __init__(self, busy: float, interference: float) -> None:
        import os
        import tempfile
        self.busy, self.interference, self.path = busy, interference, None
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        if busy <= 0 or not gpus:
            return
        node = "local"
        try:
            import ray
            if ray.is_initialized():
                node = ray.get_runtime_context().get_node_id()[:16]
        except Exception:
            pass
        self.dir = os.path.join(tempfile.gettempdir(), "dlsched-gpus", f"{node}-{gpus.split(',')[0]}")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self.path = os.path.join(self.dir, str(os.getpid()))
        open(self.path, "w").close()

    def users(self) -> int:
        import os
        n = 0
        for name in os.listdir(self.dir):
            try:
                os.kill(int(name), 0)          # a rank that died without closing does not count
                n += 1
            except (ValueError, ProcessLookupError, PermissionError):
                pass
        return n

    def factor(self) -> float:
        if self.path is None:
            return 1.0
        n = self.users()
        return 1.0 if n <= 1 else max(1.0, n * self.busy) * (1.0 + self.interference)

    def close(self) -> None:
        import os
        if self.path is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


def target_step_s(args: dict, gtype: str, world: int) -> float:
    """Seconds one step should take with `world` workers on GPUs of type `gtype`."""
    table = args.get("step_s", {}) or {}
    if not isinstance(table, dict):
        table = {"default": table}
    base = float(table.get(gtype, table.get("default", 0.2)))
    serial = float(args.get("serial", 0.25))
    comm_s = float(args.get("comm_s", 0.0))
    return base * (serial + (1.0 - serial) / max(world, 1)) + comm_s * max(world - 1, 0)


def main(ctx):
    torch.set_num_threads(1)
    ctx.init_process_group()
    import torch.distributed as dist

    from dlsched.workload.loss import observed_loss

    args = ctx.args
    seed = int(args.get("seed", 0))
    lr = float(args.get("lr", 0.01))
    # the gang's step time: the slowest rank's target
    t = torch.tensor([target_step_s(args, gpu_type(), ctx.num_workers)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    target = float(t.item())
    curve = SimpleNamespace(job_id=ctx.job_id, model=args.get("model"), iterations=ctx.iterations)

    hits, t_data = dataset.cache_info().hits, time.perf_counter()
    x, y = dataset(seed, float(args.get("data_mb", 0.0)))
    # what the run's start spent on its data: found ready (pre-scheduling's prepare) or built here
    print(f"dataset: {'ready' if dataset.cache_info().hits > hits else 'built'} "
          f"in {time.perf_counter() - t_data:.3f} s", flush=True)
    dev = ctx.device
    torch.manual_seed(seed)
    model = nn.Linear(D, 1).to(dev)
    params = list(model.parameters())
    bufs = [torch.zeros_like(p) for p in params]          # momentum
    start = 0
    state = ctx.restore()
    if state:
        model.load_state_dict(state["model"])
        for b, s in zip(bufs, state["bufs"]):
            b.copy_(s)
        start = state["step"]
    save = lambda: {"model": model.state_dict(), "bufs": [b.clone() for b in bufs]}   # noqa: E731
    per = len(x) // ctx.batch_size
    gpu = SharedGpu(float(args.get("gpu_busy", 0.0)), float(args.get("interference", 0.0)))
    try:
        for step in ctx.steps(start, save):
            t0 = time.perf_counter()
            i = step % per
            rows = torch.arange(i * ctx.batch_size, (i + 1) * ctx.batch_size)[ctx.local_batch]
            xb, yb = x[rows].to(dev), y[rows].to(dev)
            model.zero_grad(set_to_none=False)
            mse = ((model(xb) - yb) ** 2).mean()
            mse.backward()
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat)                      # the mean gradient of the global mini-batch
            flat /= ctx.num_workers
            with torch.no_grad():
                k = 0
                for p, b in zip(params, bufs):
                    b.mul_(MOMENTUM).add_(flat[k:k + p.numel()].view_as(p))
                    p.sub_(lr * b)
                    k += p.numel()
            left = target * gpu.factor() - (time.perf_counter() - t0)
            if left > 0:
                time.sleep(left)
            ctx.report(loss=observed_loss(curve, step + 1), train_loss=mse.item())   # after step + 1 steps
    finally:
        gpu.close()
