"""What the real runtime can do, and its job_stats: the vocabulary of
dlsched.scheduler.backend.STATS_KEYS, measured.

RUNTIME_CAPABILITIES (dlsched.scheduler.backend.CAPABILITIES): RayBackend suspends and resumes
(checkpoint at a mini-batch boundary), migrates and resizes (stop, start on the new placements,
any world size), pays and measures what each switch costs (`switch_lost_s` below: the real cost
stands in for a decision's modelled `cost`), measures progress, and shares GPUs between jobs
(`packed` decisions and over-subscription: per-GPU slots that mirror the ledger, see
dlsched.runtime.shares; a backend on a cluster whose nodes lack the slots drops "gpu_sharing"
and refuses such a profile at start), and pre-schedules (the next jobs' programs and data
loaded into warm workers while a run saves: dlsched.runtime.runs). Kept here, beside the stats, so that the CLI checks a
--policy against it without importing Ray.

Everything comes from the store, so a restarted server answers the same as the one before it:
- step:      steps done (the highest step rank 0 reported, plus one);
- remaining, progress: from the spec's `iterations` (None when the job is sized in epochs and
             has not reported its epoch length yet: steps per epoch are known after one epoch);
- rate:      steps per second now, from the step times rank 0 measured in the current run (the
             median of its last RATE_WINDOW steps, times the steps each record advanced: 1, or for
             a job with max_batch_size M / M0 when pollux gave it batch M; 0 when the job does not run);
- loss:      the last loss the program reported;
- gpu_s:     GPU-seconds held, from the runs' start and stop events;
- first_progress_s: when the first step was recorded (backend clock: seconds since the store's
             epoch);
- suspends, resumes: stops asked by a policy or an operator, and runs after the first;
- switch_lost_s: what restarts cost: for every run after the first, the time from its start to
             its first recorded step (restore, rendezvous, warm-up), plus each stop's own time;
- nic_bytes, cross_rack_bytes: not measured on the runtime (0).
"""
from __future__ import annotations

import statistics

RUNTIME_CAPABILITIES = frozenset(("preemption", "migration", "resize", "costed_switches", "gpu_sharing",
                                  "progress", "prescheduling"))
RATE_WINDOW = 20
_RUN_START = ("started", "reattached")
_RUN_END = ("stopped", "finished", "gang_broken", "requeued", "start_failed", "cancelled")


def job_gpus(job: dict) -> float:
    """GPUs the job holds while it runs: its tasks' GPU demand, with the worker count of its
    latest run (a resize changes it)."""
    from dlsched.core.types import GPU
    from dlsched.runtime.spec import RuntimeJobSpec
    spec = RuntimeJobSpec(**job["spec"])
    return float(sum(t.demand[GPU] for t in spec.tasks(job["workers"] or None)))


def job_stats(store, job_id: str, epoch: float, now: float) -> dict:
    """`now`: wall-clock time (a run still going counts until then)."""
    out = {"step": None, "remaining": None, "progress": 0.0, "rate": 0.0, "loss": None, "gpu_s": 0.0,
           "first_progress_s": None, "suspends": 0, "resumes": 0, "switch_lost_s": 0.0,
           "switch_lost_gpu_s": 0.0, "nic_bytes": 0.0, "cross_rack_bytes": 0.0}
    j = store.job(job_id)
    if j is None:
        return out
    step = int(j["step"] or 0)
    out["step"] = step
    total = (j["spec"] or {}).get("iterations")
    if total:
        out["remaining"] = max(float(total) - step, 0.0)
        out["progress"] = min(step / float(total), 1.0)
    if j["state"] == "done":
        out["progress"] = 1.0
        if total:
            out["remaining"] = 0.0
    recent = store.stats(job_id, since_step=step - RATE_WINDOW - 1)
    if recent:
        out["loss"] = recent[-1]["loss"]
    first = store.stats(job_id, limit=1)
    if first:
        out["first_progress_s"] = first[0]["time"] - epoch

    # runs: (start, end or None) from the events, oldest first
    runs, stop_s = [], 0.0
    for e in store.events(job_id, limit=100000):          # oldest first
        kind = e["kind"]
        if kind in _RUN_START:
            if runs and runs[-1][1] is None and kind == "reattached":
                continue                              # the same run, seen by the next server
            runs.append([e["time"], None])
        elif kind in _RUN_END and runs and runs[-1][1] is None:
            runs[-1][1] = e["time"]
            if kind == "stopped" and e["detail"].startswith(("suspended", "migrating", "resizing")):
                out["suspends"] += 1
        elif kind == "stop_s":                        # how long a stop took (checkpoint and exit)
            try:
                stop_s += float(e["detail"])
            except ValueError:
                pass
    running = j["state"] == "running" and runs and runs[-1][1] is None
    gpus = job_gpus(j)
    out["gpu_s"] = gpus * sum((end if end is not None else now) - start for start, end in runs)
    out["resumes"] = max(len(runs) - 1, 0)
    lost = stop_s
    for start, end in runs[1:]:
        first_step = store.first_step_time(job_id, start, end)
        lost += (first_step if first_step is not None else (end if end is not None else now)) - start
    out["switch_lost_s"] = lost
    out["switch_lost_gpu_s"] = lost * gpus
    if running:
        now_run = [r for r in recent if r["step_s"] is not None and r["time"] >= runs[-1][0]]
        cur = [r["step_s"] for r in now_run]
        if cur:
            med = statistics.median(cur)
            # steps per record: 1, or M / M0 for a run an adaptive policy gave batch M (sdk `steps`)
            adv = 1.0
            if (j["spec"] or {}).get("max_batch_size") and len(now_run) > 1:
                adv = (now_run[-1]["step"] - now_run[0]["step"]) / (len(now_run) - 1)
            out["rate"] = adv / med if med > 0 else 0.0
    return out
