"""A job whose batch size and worker count an adaptive policy (pollux) chooses: data-parallel
training of a small MLP on scikit-learn's handwritten digits, with the gradients averaged by
`ctx.allreduce_gradients` (one all-reduce that also measures the all-reduce time and the
gradient statistics the server fits goodput from: dlsched.runtime.goodput).

The program reads its shape at start: `ctx.batch_size` (the global batch of this run: the
policy's choice, its spec's `batch_size` M0 at first, at most its `max_batch_size`) and
`ctx.local_batch` (this worker's slice). Its work is counted in steps at M0 (`ctx.steps`: a
mini-batch of M samples advances M / M0 of them), so the batch at step s starts at sample
s x M0 of a seeded permutation per epoch; the learning rate follows the batch by the
square-root rule, lr x sqrt(batch / M0).

args: hidden (64), lr (0.05), seed (0), sample_s (0: extra seconds per sample of the local batch,
a sleep standing in for a heavier model's compute, so that a step's time depends on the local
batch as on a GPU and the two CPUs of a small machine do not decide it), step_s (0: extra
seconds per step, the part that does not shrink with more workers).

(Neither DistributedDataParallel nor torch.optim: the first of either in a process imports
torch._dynamo, seconds on a loaded machine; SGD with momentum is written out.)
"""
from __future__ import annotations

import functools
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@functools.lru_cache(maxsize=1)          # once per (warm) worker process
def load_data():
    from sklearn.datasets import load_digits
    d = load_digits()
    return torch.tensor(d.data / 16.0, dtype=torch.float32), torch.tensor(d.target, dtype=torch.int64)


def main(ctx):
    torch.set_num_threads(1)
    ctx.init_process_group()
    seed = int(ctx.args.get("seed", 0))
    hidden = int(ctx.args.get("hidden", 64))
    m0 = ctx.init_batch_size or ctx.batch_size
    lr = float(ctx.args.get("lr", 0.05)) * math.sqrt(ctx.batch_size / m0)
    sample_s = float(ctx.args.get("sample_s", 0.0))
    step_s = float(ctx.args.get("step_s", 0.0))
    x, y = load_data()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    mom = [torch.zeros_like(p) for p in model.parameters()]
    start = 0
    state = ctx.restore()
    if state:
        model.load_state_dict(state["model"])
        mom = state["mom"]
        start = state["step"]
    batch = min(ctx.batch_size, len(x))
    local = ctx.local_batch
    save = lambda: {"model": model.state_dict(), "mom": mom}   # noqa: E731
    for step in ctx.steps(start, save):            # step: batches of m0 samples done
        t0 = time.perf_counter()
        epoch, pos = divmod(step * m0, len(x))     # the batch starts at sample step x m0
        perm = np.random.default_rng(seed * 100003 + epoch).permutation(len(x))
        perm = np.concatenate([perm, np.random.default_rng(seed * 100003 + epoch + 1).permutation(len(x))])
        idx = torch.from_numpy(perm[pos:pos + batch][local])
        model.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        if sample_s or step_s:                     # the stand-in compute, before the all-reduce
            time.sleep(max(step_s + sample_s * len(idx) - (time.perf_counter() - t0), 0.0))
        ctx.allreduce_gradients(model)
        with torch.no_grad():
            for p, m in zip(model.parameters(), mom):
                m.mul_(0.9).add_(p.grad)
                p.sub_(lr * m)
        ctx.report(loss=loss.item(), batch=float(ctx.batch_size))
