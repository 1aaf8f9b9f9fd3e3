"""A training program for the GPU-sharing tests: prints the GPUs its rank sees
(CUDA_VISIBLE_DEVICES, as the runtime set it from the policy's GPU ids), then takes `step_s`
seconds a step (a sleep: two jobs packed on one GPU do not slow each other down on two CPUs).
With `until_file`, it ends (done) at the first step after that file appears, so a test decides
when it finishes whatever the machine's load."""
import os
import time


def main(ctx):
    a = ctx.args
    ctx.init_process_group()
    state = ctx.restore()
    start = state["step"] + 1 if state else 0
    until = a.get("until_file")
    print(f"rank {ctx.rank} CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')} "
          f"from step {start}", flush=True)
    for step in ctx.steps(start, lambda: {"step": step}):
        if until and os.path.exists(until):
            break
        time.sleep(a.get("step_s", 0.05))
        ctx.report(loss=1.0 / (step + 1))
