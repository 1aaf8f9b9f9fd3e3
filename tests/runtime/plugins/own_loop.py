"""A program with its own loop (it never calls ctx.steps): it gives its step with each report,
and writes `out.txt` with a relative path (the job's working directory), with its own step."""
import os
import time


def main(ctx):
    a = ctx.args
    with open("out.txt", "a") as f:
        f.write(f"{os.getcwd()}\n")
    for i in range(int(a.get("steps", 400))):
        time.sleep(float(a.get("step_s", 0.05)))
        ctx.report(step=i + 1, loss=1.0 / (i + 1))
