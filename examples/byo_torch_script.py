"""A plain PyTorch DDP training script: nothing in it is dlsched's (`dlsched.reporting.report` is optional).

It runs as torchrun runs it: it reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from its
environment (torch.distributed's env:// rendezvous, gloo on CPU), saves its own snapshot, and
resumes from it. Under dlsched (examples/byo.yaml) the snapshot goes to DLSCHED_CHECKPOINT_DIR,
the same directory on every run of the job; on SIGTERM (a suspend, migration or resize) it
saves at the next step boundary and exits 0.

    python examples/byo_torch_script.py --steps 50                      # alone (world size 1)
    torchrun --nproc-per-node 2 examples/byo_torch_script.py --steps 50  # or with torchrun
    dlsched submit examples/byo_torchrun.yaml                           # the same, torchrun under dlsched
"""
from __future__ import annotations

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

try:                                   # optional: progress for the scheduler, a no-op elsewhere
    from dlsched.reporting import report, saved
except ImportError:
    def report(step, **metrics):
        pass

    def saved(step):
        pass

stop = False


def on_sigterm(signum, frame):
    global stop
    stop = True                        # saved and exited at the next step boundary


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--save-every", type=int, default=20)
    ap.add_argument("--step-ms", type=float, default=0.0, help="extra time per step (a slower model)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    ckpt_dir = os.environ.get("DLSCHED_CHECKPOINT_DIR", "checkpoints")
    os.makedirs(ckpt_dir, exist_ok=True)
    snap = os.path.join(ckpt_dir, "snapshot.pt")
    if world > 1:
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    start = 0
    if os.path.exists(snap):
        state = torch.load(snap, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = int(state["step"])
        print(f"resumed from {snap} at step {start}", flush=True)
    ddp = DDP(model) if world > 1 else model
    g = torch.Generator().manual_seed(1234)
    X = torch.randn(4096, 16, generator=g)
    y = (X @ torch.linspace(-1, 1, 16)).unsqueeze(1) + 0.1 * torch.randn(4096, 1, generator=g)
    per = 64 // world

    def save(step: int) -> None:
        if rank == 0:
            tmp = snap + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, snap)                      # atomic: a kill never leaves half a file
            saved(step)                                # optional: dlsched counts the work a stop loses
        if world > 1:
            dist.barrier()

    step = start
    while step < a.steps:
        if world > 1:                                   # every rank stops after the same step
            flag = torch.tensor([1 if stop else 0])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stopping = bool(flag.item())
        else:
            stopping = stop
        if stopping:
            save(step)
            print(f"SIGTERM: saved step {step}, exiting", flush=True)
            break
        i = (step * 64) % 4096 + rank * per
        loss = torch.nn.functional.mse_loss(ddp(X[i:i + per]), y[i:i + per])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if a.step_ms:
            time.sleep(a.step_ms / 1000)
        step += 1
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
            report(step=step, loss=loss.item())
        if step % a.save_every == 0:
            save(step)
    else:
        save(step)
        print(f"done at step {step}", flush=True)
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
