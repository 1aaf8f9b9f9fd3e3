"""The chaos test's training program (benchmarks/chaos.py, tests/runtime/test_chaos.py).

Its whole state is one counter, kept in the checkpoints: every step adds one and rank 0 reports
`loss=1/counter, counter=counter`. A job that restores correctly from its checkpoints after any
failure therefore has `counter == step + 1` at every step (a continuous loss curve); a run that
restored a stale or foreign checkpoint, skipped steps or ran some twice breaks that equation.

The ranks also check that they agree: every step all-reduces the counter (sum), and rank 0
reports `agree=1` when the sum is world_size * counter (every rank restored the same state).

args: step_s (0.2: seconds each step sleeps; it costs no CPU).
"""
import time


def main(ctx):
    import torch
    import torch.distributed as dist
    step_s = float(ctx.args.get("step_s", 0.2))
    ctx.init_process_group()
    state = ctx.restore()
    start, counter = (int(state["step"]), int(state["counter"])) if state else (0, 0)
    for step in ctx.steps(start, lambda: {"counter": counter}):
        counter += 1
        agree = 1.0
        if ctx.world_size > 1:
            t = torch.tensor([counter], dtype=torch.int64)
            dist.all_reduce(t)
            agree = 1.0 if int(t.item()) == ctx.world_size * counter else 0.0
        time.sleep(step_s)
        ctx.report(loss=1.0 / counter, counter=counter, agree=agree)
