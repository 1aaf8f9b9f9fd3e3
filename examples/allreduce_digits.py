"""All-reduce data-parallel training (torch DistributedDataParallel; gloo on CPU, NCCL on GPUs)
of a small MLP on scikit-learn's handwritten digits (1,797 8x8 images, shipped with the package).

The global mini-batch of step s is fixed by s alone (a seeded permutation per epoch), and each
worker takes its slice of it, so the mean gradient -- and the loss curve -- does not depend on
the world size: a job suspended, migrated or resized continues the same curve.

args: hidden (64), lr (0.1), seed (0), delay_s (0: extra seconds per step, a stand-in for a
heavier model in demos and tests; it sleeps, so it costs no CPU).
"""
from __future__ import annotations

import functools
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@functools.lru_cache(maxsize=1)          # once per (warm) worker process
def load_data():
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.int64)
    return x, y


def main(ctx):
    torch.set_num_threads(1)
    ctx.init_process_group()
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    seed = int(ctx.args.get("seed", 0))
    hidden = int(ctx.args.get("hidden", 64))
    lr = float(ctx.args.get("lr", 0.1))
    delay_s = float(ctx.args.get("delay_s", 0.0))
    x, y = load_data()
    dev = ctx.device
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10)).to(dev)
    ddp = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    start = 0
    state = ctx.restore()
    if state:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    spe = len(x) // ctx.batch_size                 # steps per epoch
    save = lambda: {"model": model.state_dict(), "opt": opt.state_dict()}   # noqa: E731
    for step in ctx.steps(start, save, steps_per_epoch=spe):
        epoch, i = divmod(step, spe)
        perm = np.random.default_rng(seed * 100003 + epoch).permutation(len(x))
        idx = torch.from_numpy(perm[i * ctx.batch_size:(i + 1) * ctx.batch_size][ctx.local_batch])
        xb, yb = x[idx].to(dev), y[idx].to(dev)
        opt.zero_grad()
        out = ddp(xb)
        loss = F.cross_entropy(out, yb)
        loss.backward()
        opt.step()
        m = torch.tensor([loss.item(), (out.argmax(1) == yb).float().mean().item()])
        dist.all_reduce(m)
        m /= ctx.num_workers
        if delay_s:
            time.sleep(delay_s)
        ctx.report(loss=m[0].item(), accuracy=m[1].item())
