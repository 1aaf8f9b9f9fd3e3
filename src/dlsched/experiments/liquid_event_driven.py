"""liquid-event-driven: Liquid's comparison of event-driven scheduling against polling, on the
real runtime (seed 003, issue "Liquid complete" part 4).

Liquid schedules when something happens (a job arrives, a job finishes), where the schedulers it
compares with look at the queue every P seconds. Here one workload (runtime-fidelity's: 16 jobs
of 1-4 GPUs with seeded arrivals, examples/timed_steps.py) runs under `liquid-immediate` on an
embedded Ray cluster of 4 nodes x 2 virtual GPUs three times: rounds on events (and a 30 s
fallback), and rounds only every POLLS seconds (the profile's `event_rounds: false`).

Scheduling latency, from the server's typed log (its store): for each job's first start, the
time from the moment it could first have started, its arrival or the last finish before the
decision if later (the GPUs it got were freed then), to the decision. Polling adds up to P to it;
events should add almost nothing. The mean JCT follows.

Checks: event-driven has the lowest mean scheduling latency and a mean JCT no higher than any
polling run's (within the runtime's run-to-run spread, SPREAD); the latency grows with P. About
4 minutes.
"""
from __future__ import annotations

import statistics
import sys

from dlsched.experiments.base import Check, Experiment, ExperimentResult, register_experiment, summarise

NODES, GPUS_PER_NODE, GPU_TYPE = 4, 2, "fake-gpu"
POLICY = "liquid-immediate"
POLLS = (5.0, 15.0)
FALLBACK_S = 30.0
SPREAD = 0.08
TIMEOUT_S = 300.0
KEYS = ("mean_jct_s", "makespan_s", "mean_wait_s", "gpu_util")


def latencies(store, epoch: float) -> dict:
    """Per job: seconds from when it could first start (arrival, or the last finish before its
    first start) to the decision that started it."""
    log = store.schedlog_all()
    arrival, first, finishes = {}, {}, []
    for r in log:
        k, j, t = r["kind"], r["job_id"], r["time_s"]
        if k == "arrival":
            arrival.setdefault(j, t)
        elif k in ("launch", "resume", "resize") and j not in first:
            first[j] = t
        elif k == "finish":
            finishes.append(t)
    out = {}
    for j, t in first.items():
        if j not in arrival:
            continue
        freed = max((f for f in finishes if f <= t + 1e-9), default=None)
        ready = arrival[j] if freed is None else max(arrival[j], freed)
        out[j] = max(t - ready, 0.0)
    vals = sorted(out.values())
    return {"jobs": out, "mean_s": statistics.fmean(vals) if vals else None,
            "p90_s": vals[int(0.9 * (len(vals) - 1))] if vals else None}


def configs() -> dict[str, tuple[float, dict]]:
    """name -> (the server's --round-s, the profile's settings)."""
    out = {"events": (FALLBACK_S, {"event_rounds": True})}
    for p in POLLS:
        out[f"poll {p:g} s"] = (p, {"event_rounds": False, "round_s": p})
    return out


def run(seeds: int = 1, log=None) -> ExperimentResult:
    from dlsched.experiments.runtime_fidelity import run_real, warm_up, workload
    from dlsched.runtime.cluster import LocalRay
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    jobs = workload()
    outs = {}
    with LocalRay(NODES, GPUS_PER_NODE, gpu_type=GPU_TYPE) as rc:
        warm_up(rc.address, namespace="events", gpus=NODES * GPUS_PER_NODE, log=log)
        for name, (round_s, settings) in configs().items():
            o = run_real(rc.address, POLICY, jobs, round_s=round_s, namespace="events", timeout_s=TIMEOUT_S,
                         log=log, policy_config=settings, collect=latencies)
            if "refused" in o:
                raise RuntimeError(f"the runtime refused {POLICY}: {o['refused']}")
            outs[name] = o
            log(f"{name}: mean scheduling latency {o['collected']['mean_s']:.2f} s")
    return compare(outs)


def compare(outs: dict) -> ExperimentResult:
    lat = {n: o["collected"] for n, o in outs.items()}
    jct = {n: o["result"].summary["mean_jct_s"] for n, o in outs.items()}
    published = [{"run": n, "published (seed 003)": "event-driven: lower latency and JCT" if n == "events" else "polling",
                  "mean scheduling latency": f"{lat[n]['mean_s']:.2f} s", "p90": f"{lat[n]['p90_s']:.2f} s",
                  "mean JCT": f"{jct[n]:.1f} s"} for n in outs]
    polls = [n for n in outs if n != "events"]
    checks = [
        Check("event-driven has the lowest mean scheduling latency",
              all(lat["events"]["mean_s"] < lat[n]["mean_s"] for n in polls),
              ", ".join(f"{n} {lat[n]['mean_s']:.2f} s" for n in outs)),
        Check(f"event-driven's mean JCT is no higher than polling's (within {SPREAD:.0%})",
              all(jct["events"] <= jct[n] * (1 + SPREAD) for n in polls),
              ", ".join(f"{n} {jct[n]:.1f} s" for n in outs)),
        Check("polling's latency grows with its period",
              all(lat[a]["mean_s"] <= lat[b]["mean_s"] for a, b in zip(polls, polls[1:])),
              ", ".join(f"{n} {lat[n]['mean_s']:.2f} s" for n in polls)),
    ]
    runs = {n: [o["result"]] for n, o in outs.items()}
    rows = summarise(runs, KEYS, group="runtime")
    return ExperimentResult("liquid-event-driven", "Event-driven rounds against polling on the real runtime (seed 003)",
                            rows, published, checks, results={"runtime": runs},
                            extra={"latency": lat, "real_wall_s": {n: o["wall_s"] for n, o in outs.items()}})


register_experiment(Experiment("liquid-event-driven", "Event-driven rounds against polling on the real runtime (seed 003)",
                               "seed 003 on an embedded Ray cluster (issue 13)", run, default_seeds=1))
