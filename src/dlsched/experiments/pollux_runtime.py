"""pollux-runtime: Pollux adapting real jobs' batch size and GPU count as they train, against the
same jobs under their fixed request (issue 36, part 3).

A few jobs of examples/pollux_digits.py (an MLP on the digits; real gloo all-reduce through
`ctx.allreduce_gradients`, which also measures the all-reduce time and the gradient statistics;
each step padded with a sleep per sample of the local batch and a fixed one per step, so the
step time depends on the local batch as on a GPU, with a per-step cost a larger batch amortises,
and the two CPUs of a small machine do not decide it) arrive a few
seconds apart on an embedded Ray cluster of 2 nodes x 2 virtual GPUs, each asking for 1 GPU and
batch 32 (M0), with max_batch_size 256. They run twice, under a real `dlsched server` each:

- `fifo`: each job keeps its request (1 worker, batch 32);
- `pollux`: every ROUND_S the server fits each job's goodput from what it measured
  (dlsched.runtime.goodput) and the allocator restarts jobs into the replicas per node and batch
  it picks (restart cost RESTART_S, the runtime's order of magnitude, instead of the
  simulator's 30 s).

A job's work is the same under both: `iterations` steps at M0 (a step at batch M counts M / M0,
dlsched.runtime.sdk `steps`). From each run's store the experiment prints, per job: its JCT,
the shapes it ran in (workers x global batch), the throughput the runtime measured (samples per
second of training) and its goodput (throughput x statistical efficiency E(M), the latter from the
gradient statistics the job reported, its fitted GradParams at the end: samples at M0 per second).

Checks: every job finishes under both; under pollux some job ran with more than one worker and a
batch above M0; pollux's mean JCT is below fifo's. About 2-3 minutes on 2 CPUs.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

from dlsched.experiments.base import Check, Experiment, ExperimentResult, register_experiment, summarise

NODES, GPUS_PER_NODE = 2, 2
ROUND_S = 4.0
RESTART_S = 4.0
POLICIES = ("fifo", "pollux")
ARRIVALS_S = (0.0, 2.0, 4.0)
ITERATIONS = 150
M0, MAX_BATCH = 32, 256
ARGS = {"sample_s": 0.004, "step_s": 0.08, "lr": 0.05}
TIMEOUT_S = 240.0
KEYS = ("mean_jct_s", "makespan_s", "mean_wait_s", "gpu_util")
POLLUX = {"round_s": ROUND_S, "params": {"pollux": {"restart_s": RESTART_S, "pop_size": 32, "generations": 20}}}


def program() -> Path:
    p = Path(__file__).resolve().parents[3] / "examples" / "pollux_digits.py"
    if not p.is_file():
        raise FileNotFoundError(f"pollux-runtime runs examples/pollux_digits.py from the source tree ({p} is missing)")
    return p


def workload(arrivals=ARRIVALS_S, iterations: int = ITERATIONS) -> list[tuple[float, dict]]:
    """(arrival offset in s, job spec) per job."""
    return [(t, {"name": f"digits-{i}", "entry": str(program()), "args": {**ARGS, "seed": i},
                 "workers": 1, "gpus_per_worker": 1, "cpus_per_worker": 0.25, "batch_size": M0,
                 "max_batch_size": MAX_BATCH, "iterations": int(iterations), "checkpoint_every": 20})
            for i, t in enumerate(arrivals)]


def measured(store, epoch: float) -> dict:
    """Per job (by name): JCT, shapes run in, measured throughput and goodput (see above)."""
    from dlsched.runtime.goodput import fit_records
    from dlsched.workload.goodput import efficiency
    out = {}
    for j in store.jobs():
        recs = [r for r in store.stats(j["job_id"]) if r.get("replicas") and r.get("step_s")]
        shapes: list[str] = []
        for r in recs:
            s = f"{int(r['replicas'])}x{int(r['replicas'] * r['local_bsz'])}"
            if not shapes or shapes[-1] != s:
                shapes.append(s)
        busy = sum(r["step_s"] for r in recs)
        batch = [r["replicas"] * r["local_bsz"] for r in recs]
        fit = fit_records(recs, M0, MAX_BATCH) if recs else None
        eff = [float(efficiency(fit[0].grad, b, M0)) for b in batch] if fit else [1.0] * len(batch)
        done = j["finish_time"] is not None and j["state"] == "done"
        out[j["spec"]["name"]] = {
            "jct_s": (j["finish_time"] - j["submit_time"]) if done else None,
            "shapes": shapes, "throughput": sum(batch) / busy if busy else None,
            "goodput": sum(b * e for b, e in zip(batch, eff)) / busy if busy else None,
            "restarts": max(len(shapes) - 1, 0)}
    return out


def run(seeds: int = 1, log=None, jobs: list | None = None, keep: Path | None = None) -> ExperimentResult:
    from dlsched.experiments.runtime_fidelity import run_real
    from dlsched.runtime.cluster import LocalRay
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    jobs = workload() if jobs is None else jobs
    outs = {}
    with LocalRay(NODES, GPUS_PER_NODE) as rc:
        for p in POLICIES:
            o = run_real(rc.address, p, jobs, round_s=ROUND_S, namespace="pollux", timeout_s=TIMEOUT_S,
                         log=log, keep=keep, policy_config=POLLUX if p == "pollux" else None, collect=measured)
            if "refused" in o:
                raise RuntimeError(f"the runtime refused {p}: {o['refused']}")
            outs[p] = o
    return compare(outs, log)


def _f(x, unit: str = "") -> str:
    return "-" if x is None else f"{x:.1f}{unit}"


def compare(outs: dict, log=print) -> ExperimentResult:
    got = {p: o["collected"] for p, o in outs.items()}
    published = []
    for p, jobs in got.items():
        for name in sorted(jobs):
            m = jobs[name]
            published.append({"policy": p, "job": name, "JCT": _f(m["jct_s"], " s"),
                              "shapes (workers x batch)": " > ".join(m["shapes"]) or "-",
                              "throughput (samples/s)": _f(m["throughput"]), "goodput (M0 samples/s)": _f(m["goodput"])})
    for row in published:
        log("  ".join(f"{k}: {v}" for k, v in row.items()))
    jct = {p: outs[p]["result"].summary["mean_jct_s"] for p in outs}
    adapted = [n for n, m in got.get("pollux", {}).items()
               if any(int(s.split("x")[0]) > 1 and int(s.split("x")[1]) > M0 for s in m["shapes"])]
    unfinished = {p: [n for n, m in j.items() if m["jct_s"] is None] for p, j in got.items()}
    good = {p: statistics.fmean([m["goodput"] for m in j.values() if m["goodput"]] or [0.0]) for p, j in got.items()}
    checks = [
        Check("every job finishes under both policies", not any(unfinished.values()),
              "; ".join(f"{p}: {len(u)} unfinished" for p, u in unfinished.items())),
        Check("pollux gives some job more than one worker and a batch above its initial one", bool(adapted),
              ", ".join(f"{n}: {' > '.join(got['pollux'][n]['shapes'])}" for n in sorted(got.get("pollux", {})))),
        Check("pollux's mean JCT is below fifo's",
              all(jct.get(p) is not None for p in POLICIES) and jct["pollux"] < jct["fifo"],
              ", ".join(f"{p} {_f(jct.get(p), ' s')} (mean goodput {good.get(p, 0):.0f})" for p in POLICIES)),
    ]
    runs = {p: [o["result"]] for p, o in outs.items()}
    return ExperimentResult("pollux-runtime", "Pollux adapting real jobs on the runtime", summarise(runs, KEYS, group="runtime"),
                            published, checks, results={"runtime": runs},
                            extra={"jobs": got, "real_wall_s": {p: o["wall_s"] for p, o in outs.items()}})


register_experiment(Experiment("pollux-runtime", "Pollux adapting real jobs on the runtime",
                               "issue 36 part 3 (embedded Ray runtime, examples/pollux_digits.py)", run, default_seeds=1))
