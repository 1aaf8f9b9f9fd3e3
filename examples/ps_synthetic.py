"""Parameter-server training on synthetic data: workers push gradients to the parameter-server
ranks that own them and pull the updated parameters back (torch.distributed, gloo).

Ranks 0..W-1 are workers, W..W+P-1 parameter servers. Parameter tensor i belongs to PS
i mod P (with `ps: 0`, to worker 0: one worker alone is plain, non-distributed training, its
collectives those of a world of one). Each step every worker computes the gradient of its slice
of the global mini-batch; `reduce(grad_i, dst=owner)` is the push (the owner receives the sum),
the owner applies SGD with momentum (its momentum buffers live only there), and
`broadcast(param_i, src=owner)` is the pull.
args: lr (0.05), seed (0), hidden (64: the hidden layer's width; the model has
hidden x (D + C + 1) + C parameters, and every step pushes and pulls all of them), delay_s (0:
extra seconds per step, as in allreduce_digits.py).
A checkpoint gathers the owners' momentum buffers on rank 0, so it restores under any number of
workers or parameter servers.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

N, D, C = 4096, 32, 8


def make_data(seed: int):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(C, D, generator=g) * 1.5
    y = torch.randint(0, C, (N,), generator=g)
    x = centers[y] + torch.randn(N, D, generator=g)
    return x, y


def main(ctx):
    torch.set_num_threads(1)
    ctx.init_process_group(backend="gloo")
    seed = int(ctx.args.get("seed", 0))
    lr, mu = float(ctx.args.get("lr", 0.05)), 0.9
    delay_s = float(ctx.args.get("delay_s", 0.0))
    hidden = int(ctx.args.get("hidden", 64))
    x, y = make_data(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(D, hidden), nn.Tanh(), nn.Linear(hidden, C))
    params = list(model.parameters())
    servers = ctx.ps_ranks or ctx.worker_ranks[:1]
    owner = [servers[i % len(servers)] for i in range(len(params))]
    bufs = [torch.zeros_like(p) for p in params]
    start = 0
    state = ctx.restore()
    if state:
        model.load_state_dict(state["model"])
        for b, s in zip(bufs, state["bufs"]):
            b.copy_(s)
        start = state["step"]

    def save():
        for i, b in enumerate(bufs):          # gather every owner's momentum on every rank
            dist.broadcast(b, src=owner[i])
        return {"model": model.state_dict(), "bufs": [b.clone() for b in bufs]}

    spe = N // ctx.batch_size
    is_worker = ctx.role == "worker"
    for step in ctx.steps(start, save, steps_per_epoch=spe):
        epoch, i = divmod(step, spe)
        perm = torch.randperm(N, generator=torch.Generator().manual_seed(seed * 7919 + epoch))
        m = torch.zeros(2)
        if is_worker:
            idx = perm[i * ctx.batch_size:(i + 1) * ctx.batch_size][ctx.local_batch]
            model.zero_grad()
            out = model(x[idx])
            loss = F.cross_entropy(out, y[idx]) / ctx.num_workers
            loss.backward()
            grads = [p.grad.detach() for p in params]
            m[0] = loss.item()
            m[1] = (out.argmax(1) == y[idx]).float().mean().item() / ctx.num_workers
        else:
            grads = [torch.zeros_like(p) for p in params]
        for j, g in enumerate(grads):                       # push
            dist.reduce(g, dst=owner[j])
        with torch.no_grad():
            for j, p in enumerate(params):
                if owner[j] == ctx.rank:                    # the owning server updates
                    bufs[j].mul_(mu).add_(grads[j])
                    p.sub_(lr * bufs[j])
                dist.broadcast(p.data, src=owner[j])        # pull
        dist.all_reduce(m)
        if delay_s:
            time.sleep(delay_s)
        ctx.report(loss=m[0].item(), accuracy=m[1].item())
