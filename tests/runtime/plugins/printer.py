"""A tiny training program for the runtime tests: prints to stdout and stderr every few steps,
and fails on rank `fail_rank` at step `fail_step` when asked."""
import sys
import time


def main(ctx):
    import torch
    a = ctx.args
    ctx.init_process_group()
    state = ctx.restore()
    start = state["step"] + 1 if state else 0
    w = torch.zeros(4)
    if state:
        w = state["w"]
    print(f"hello from rank {ctx.rank} of {ctx.world_size}, starting at step {start}", flush=True)
    for step in ctx.steps(start, lambda: {"w": w}):
        if a.get("fail_rank") == ctx.rank and step >= a.get("fail_step", 0):
            raise ValueError(f"rank {ctx.rank} cannot go on at step {step}")
        time.sleep(a.get("step_s", 0.0))
        w = w + 1.0
        if step % 5 == 0:
            print(f"rank {ctx.rank} step {step}", flush=True)
            print(f"rank {ctx.rank} warning at step {step}", file=sys.stderr, flush=True)
        ctx.report(loss=float(1.0 / (step + 1)))
