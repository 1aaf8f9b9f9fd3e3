"""seed001-figure9: Figure 9 of seed 001 (Gandiva, "Time slicing six 1-GPU jobs on 4 GPUs") on
the real runtime (issue 12, "Gandiva on real jobs").

An embedded Ray cluster of 2 nodes x 2 virtual GPUs and a real `dlsched server`: four 1-GPU
jobs start at once, two more arrive LATE_S later, when every GPU is taken. The program is
examples/timed_steps.py (a set step time, real gloo, real checkpoints), ITERATIONS steps of
STEP_S each (about 50 s alone). Under `gandiva` (packing and grow-shrink off: this is the time
slicing figure; quantum QUANTUM_S, min_run_s MIN_RUN_S) the late jobs join rings of two at
once: the jobs take turns of a quantum, suspended and resumed at step boundaries through their
checkpoints. Under `fifo` the late two wait for a GPU. Both servers keep gandiva's own round
interval (ROUND_S, 60 s): a turn ends when its quantum does (gandiva_timeslice.next_wake asks
the scheduler for a round then), not at the next round.

Measured from the runtime's store: each job's time to first progress after it arrived; over the
overload window (from the late arrivals to the first job's end) each job's share of a GPU (steps
done x STEP_S / window: the work it did in solo seconds per second) and their sum, the GPUs'
aggregate useful throughput; the longest stall of a job in the window (the largest gap between
two of its steps: a parked job's wait for its turn).

Expected (seed 001, Figure 9: all six jobs make progress; the figure has no numbers): every job
progresses within one quantum of arriving (under FIFO the late two wait far longer); every job
gets a share of the GPUs in the window and no job stalls longer than a quantum plus the switch
(SWITCH_SLACK_S); the four GPUs stay busy: the aggregate at least MIN_AGGREGATE of 4.
"""
from __future__ import annotations

import sys
import time

from dlsched.experiments.base import Check, Experiment, ExperimentResult, register_experiment, summarise

NODES, GPUS_PER_NODE, GPU_TYPE = 2, 2, "fake-gpu"
STEP_S = 0.2
ITERATIONS = 250
LATE_S = 15.0
QUANTUM_S, MIN_RUN_S = 10.0, 5.0
ROUND_S = 60.0
SWITCH_SLACK_S = 5.0
MIN_AGGREGATE = 0.85
TIMEOUT_S = 240.0
POLICIES = ("gandiva", "fifo")
CONFIG = {"gandiva": {"params": {"gandiva_timeslice": {"quantum_s": QUANTUM_S, "min_run_s": MIN_RUN_S},
                                 "gandiva_pack": {"enabled": False}, "gandiva_grow": {"enabled": False}}}}
KEYS = ("mean_jct_s", "makespan_s", "mean_ttfp_s", "gpu_util", "suspensions", "resumes", "switch_lost_s")


def workload() -> list[tuple[float, dict]]:
    from dlsched.experiments.runtime_fidelity import program
    return [(0.0 if i < 4 else LATE_S, {
        "name": f"fig9-{i}", "entry": str(program()), "args": {"step_s": {GPU_TYPE: STEP_S}, "serial": 1.0, "seed": i},
        "workers": 1, "gpus_per_worker": 1, "batch_size": 64, "iterations": ITERATIONS, "checkpoint_every": 50})
        for i in range(6)]


def window_figures(store, epoch: float) -> dict:
    """Per job (by name): arrival, first progress after it, share of a GPU in the overload window
    and the longest gap between two of its steps in it; the window itself."""
    jobs = store.jobs()
    arrive = {j["job_id"]: j["submit_time"] for j in jobs}
    finish = [j["finish_time"] for j in jobs if j["finish_time"]]
    t0 = max(arrive.values())
    t1 = min(finish) if finish else time.time()
    out = {"window_s": t1 - t0, "jobs": {}}
    for j in jobs:
        jid = j["job_id"]
        times = sorted(r["time"] for r in store.stats(jid) if r.get("time") is not None)
        first = next((t for t in times if t >= arrive[jid]), None)
        inside = [t for t in times if t0 <= t <= t1]
        edges = [t0] + inside + [t1]
        out["jobs"][j["spec"]["name"]] = {
            "job_id": jid, "arrival_s": arrive[jid] - epoch,
            "ttfp_s": None if first is None else first - arrive[jid],
            "share": len(inside) * STEP_S / (t1 - t0) if t1 > t0 else 0.0,
            "max_stall_s": max(b - a for a, b in zip(edges, edges[1:]))}
    out["aggregate"] = sum(x["share"] for x in out["jobs"].values())
    return out


def run(seeds: int = 1, log=None, policies: tuple[str, ...] = POLICIES) -> ExperimentResult:
    from dlsched.experiments.runtime_fidelity import run_real, warm_up
    from dlsched.runtime.cluster import LocalRay
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    jobs = workload()
    outs = {}
    with LocalRay(NODES, GPUS_PER_NODE, gpu_type=GPU_TYPE) as rc:
        warm_up(rc.address, namespace="figure9", gpus=NODES * GPUS_PER_NODE, log=log)
        for p in policies:
            o = run_real(rc.address, p, jobs, round_s=ROUND_S, namespace="figure9", timeout_s=TIMEOUT_S,
                         log=log, policy_config=CONFIG.get(p), collect=window_figures)
            if "refused" in o:
                raise RuntimeError(f"the runtime refused {p}: {o['refused']}")
            outs[p] = o
    return compare(outs)


def compare(outs: dict) -> ExperimentResult:
    published, checks = [], []
    fig = {p: o["collected"] for p, o in outs.items()}
    for p, f in fig.items():
        for name, x in sorted(f["jobs"].items()):
            published.append({"figure": f"{p} {name} (arrives {x['arrival_s']:.0f} s)",
                              "published": "progresses" if p == "gandiva" else "-",
                              "first progress after arrival": "never" if x["ttfp_s"] is None else f"{x['ttfp_s']:.1f} s",
                              "GPU share in the window": f"{x['share']:.2f}",
                              "longest stall": f"{x['max_stall_s']:.1f} s"})
        published.append({"figure": f"{p}: aggregate (GPUs of useful work) over {f['window_s']:.0f} s",
                          "published": "4 GPUs busy" if p == "gandiva" else "-",
                          "first progress after arrival": "-", "GPU share in the window": f"{f['aggregate']:.2f}",
                          "longest stall": "-"})
    if "gandiva" in fig:
        g = fig["gandiva"]["jobs"]
        slow = {n: x["ttfp_s"] for n, x in g.items() if x["ttfp_s"] is None or x["ttfp_s"] > QUANTUM_S}
        checks.append(Check(f"gandiva: all six jobs progress within one quantum ({QUANTUM_S:.0f} s) of arriving",
                            not slow and len(g) == 6,
                            ", ".join(f"{n} {x['ttfp_s']:.1f} s" for n, x in sorted(g.items()) if x["ttfp_s"] is not None)))
        stall = max(x["max_stall_s"] for x in g.values())
        starved = [n for n, x in g.items() if x["share"] <= 0.0]
        checks.append(Check(f"gandiva: every job progresses in the overload window, none stalls longer than a "
                            f"quantum plus {SWITCH_SLACK_S:.0f} s of switching",
                            not starved and stall <= QUANTUM_S + SWITCH_SLACK_S,
                            f"longest stall {stall:.1f} s" + (f"; no progress: {', '.join(starved)}" if starved else "")))
        agg = fig["gandiva"]["aggregate"]
        checks.append(Check(f"gandiva: time slicing keeps the 4 GPUs busy (aggregate >= {MIN_AGGREGATE * 4:.1f})",
                            agg >= MIN_AGGREGATE * NODES * GPUS_PER_NODE, f"{agg:.2f} GPUs of useful work"))
    if "fifo" in fig:
        late = [x["ttfp_s"] for x in fig["fifo"]["jobs"].values() if x["arrival_s"] > 1.0]
        checks.append(Check("fifo: the late two wait for a GPU (longer than a quantum)",
                            all(t is None or t > QUANTUM_S for t in late),
                            ", ".join("never" if t is None else f"{t:.1f} s" for t in late)))
    runs = {p: [o["result"]] for p, o in outs.items()}
    rows = summarise(runs, KEYS, group="runtime")
    return ExperimentResult("seed001-figure9", "Gandiva's time slicing on the real runtime (seed 001, Figure 9)",
                            rows, published, checks, results={"runtime": runs},
                            extra={"figures": fig, "quantum_s": QUANTUM_S, "round_s": ROUND_S,
                                   "real_wall_s": {p: o["wall_s"] for p, o in outs.items()}})


# -- packing from measured throughput (seed 001, Table 1) -------------------------------------------
PACK_QUANTUM_S, PACK_WINDOW_S = 10.0, 15.0
PACK_CONFIG = {"params": {"gandiva_timeslice": {"quantum_s": PACK_QUANTUM_S, "min_run_s": MIN_RUN_S},
                          "gandiva_pack": {"max_util": 2.0, "window_s": PACK_WINDOW_S},
                          "gandiva_grow": {"enabled": False}}}
# the emulated GPU (examples/timed_steps.py gpu_busy, interference): a light model whose steps use
# the GPU a tenth of the time, and a heavy one that uses it 87 % of the time and slows by 50 %
# where it meets another job (Table 1: VAE 8.7 % util, +412 %; LSTM 87.2 %, -16 %). The models'
# names are Table 1's, so gandiva_pack's feasibility (peak memory, utilisation) is the
# simulator's: two LSTMs (6 GB each) fit the runtime's 16 GB GPUs; two ResNet-50s (12 GB) would not.
PACK_MODELS = {"vae": {"gpu_busy": 0.10, "interference": 0.0, "published": 4.12},
               "lstm": {"gpu_busy": 0.87, "interference": 0.5, "published": -0.16}}
PACK_ORDER = ("vae", "vae", "lstm", "lstm")             # GPUs 0..3 in first-fit order
PACK_STOP_S = 75.0                                       # after the verdicts: the rest is cancelled


def pack_workload() -> list[tuple[float, dict]]:
    """Four jobs fill the 4 GPUs (vae, vae, lstm, lstm in first-fit order), one second
    apart; four more of the same models arrive in the same order and each joins the ring of the
    running job of its model (fewest members, then the lowest GPU)."""
    from dlsched.experiments.runtime_fidelity import program
    out = []
    for i, model in enumerate(PACK_ORDER + PACK_ORDER):
        m = PACK_MODELS[model]
        out.append((float(i) + (2.0 if i >= 4 else 0.0), {
            "name": f"pack-{model}-{i}", "entry": str(program()), "model": model,
            "args": {"step_s": {GPU_TYPE: STEP_S}, "serial": 1.0, "seed": i, "model": model,
                     "gpu_busy": m["gpu_busy"], "interference": m["interference"]},
            "workers": 1, "gpus_per_worker": 1, "batch_size": 64, "iterations": 2000, "checkpoint_every": 50}))
    return out


def pack_figures(store, epoch: float) -> dict:
    """Per model: when its pair was packed (a Launch / Resume with packed set), the pair's
    aggregate throughput measured over the packed window (steps x STEP_S / window, in solo
    speeds), and the verdict the schedule shows: undone when a member was suspended at the end
    of the window (the ring time-slices again), kept when both still ran packed after it."""
    jobs = {j["job_id"]: j for j in store.jobs()}
    model = {jid: j["spec"].get("model") for jid, j in jobs.items()}
    recs = [r for r in store.schedlog_all() if r["job_id"] in jobs]
    out = {}
    for m in PACK_MODELS:
        packs = [r for r in recs if r["kind"] in ("launch", "resume") and r["packed"] and model[r["job_id"]] == m]
        if not packs:
            out[m] = {"packed_at_s": None, "aggregate": None, "verdict": "not packed"}
            continue
        t_pack = packs[0]["time_s"]
        mine = {jid for jid in jobs if model[jid] == m}
        node_gpu = {(n, tuple(g)) for _, n, g in packs[0]["placements"]}
        pair = sorted(jid for jid in mine if any(
            r["job_id"] == jid and r["kind"] in ("launch", "resume") and r["time_s"] <= t_pack
            and {(n, tuple(g)) for _, n, g in r["placements"]} == node_gpu for r in recs))
        undo = [r for r in recs if r["kind"] == "suspend" and r["job_id"] in pair
                and t_pack + PACK_WINDOW_S * 0.8 <= r["time_s"] <= t_pack + PACK_WINDOW_S + 10.0]
        t0 = epoch + t_pack + 3.0                           # the packed member's restart done
        t1 = epoch + (undo[0]["time_s"] if undo else t_pack + PACK_WINDOW_S)
        steps = sum(1 for jid in pair for r in store.stats(jid) if r.get("time") and t0 <= r["time"] <= t1)
        solo_first = all(any(r["job_id"] == jid and r["kind"] in ("launch", "resume") and not r["packed"]
                             and r["time_s"] < t_pack for r in recs) for jid in pair)
        out[m] = {"packed_at_s": t_pack, "pair": pair, "solo_first": solo_first and len(pair) == 2,
                  "aggregate": steps * STEP_S / (t1 - t0) if t1 > t0 else None,
                  "verdict": "undone" if undo else "kept",
                  "verdict_at_s": undo[0]["time_s"] if undo else None}
    return out


def run_packing(seeds: int = 1, log=None) -> ExperimentResult:
    from dlsched.experiments.runtime_fidelity import run_real, warm_up
    from dlsched.runtime.cluster import LocalRay
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    with LocalRay(NODES, GPUS_PER_NODE, gpu_type=GPU_TYPE) as rc:
        warm_up(rc.address, namespace="packing", gpus=NODES * GPUS_PER_NODE, log=log)
        o = run_real(rc.address, "gandiva", pack_workload(), round_s=ROUND_S, namespace="packing",
                     timeout_s=PACK_STOP_S, log=log, policy_config=PACK_CONFIG, collect=pack_figures)
    if "refused" in o:
        raise RuntimeError(f"the runtime refused gandiva: {o['refused']}")
    return compare_packing(o)


def compare_packing(o: dict) -> ExperimentResult:
    fig = o["collected"]
    published, checks = [], []
    for m, f in fig.items():
        pub = PACK_MODELS[m]["published"]
        published.append({"figure": f"Table 1 {m}: packing gain / gandiva_pack's verdict",
                          "published": f"{100 * pub:+.0f} % / {'kept' if pub > 0 else 'undone'}",
                          "ours (runtime, measured)": ("-" if f["aggregate"] is None else
                                                       f"aggregate {f['aggregate']:.2f} solo speeds") + f" / {f['verdict']}"})
        want = "kept" if pub > 0 else "undone"
        checks.append(Check(f"{m}: the pair is packed after each job's solo turn and the pack is {want} "
                            f"from the throughput measured in the {PACK_WINDOW_S:.0f} s window",
                            f["verdict"] == want and f.get("solo_first", False) and f["aggregate"] is not None
                            and (f["aggregate"] > 1.0) == (pub > 0),
                            "not packed" if f["packed_at_s"] is None else
                            f"packed at {f['packed_at_s']:.1f} s after a solo turn each: {f['solo_first']}; "
                            f"{f['verdict']}; aggregate {f['aggregate']:.2f} solo speeds"))
    res = o["result"]
    return ExperimentResult("seed001-packing", "Gandiva's packing on the real runtime, from measured throughput (seed 001, Table 1)",
                            summarise({"gandiva": [res]}, KEYS, group="runtime"), published, checks,
                            results={"runtime": {"gandiva": [res]}}, extra={"figures": fig})


register_experiment(Experiment("seed001-figure9", "Gandiva's time slicing on the real runtime (seed 001, Figure 9)",
                               "seed 001 Figure 9 on an embedded Ray cluster (issue 12)", run, default_seeds=1))
register_experiment(Experiment("seed001-packing", "Gandiva's packing on the real runtime (seed 001, Table 1)",
                               "seed 001 Table 1's verdicts on an embedded Ray cluster (issue 12)", run_packing,
                               default_seeds=1))
