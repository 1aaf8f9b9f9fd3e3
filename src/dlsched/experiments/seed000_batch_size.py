"""seed000-batch-size: seed 000's Figure 4 on the real runtime, epoch time against batch size,
distributed and alone, for a parameter-server job and (seed 000's future work) an all-reduce
job; and the simulator's speed model, calibrated from the same runs, beside it.

Seed 000 found distributed AlexNet (TensorFlow 1.15, 1 parameter server + 1 worker) many times
slower than the same model trained alone: 330 s per epoch at batch size 16, 49 s at 128, while
alone took 5-8 s per epoch whatever the batch size. A worker exchanges its gradient with the
parameter server after every mini-batch, so an epoch costs (samples / batch) exchanges: larger
batches, fewer exchanges.

Here: an embedded Ray cluster of 2 nodes x 1 virtual GPU (2 CPUs each), one real `dlsched
server` (fifo), and the shipped examples, each at batch sizes 16, 32, 64 and 128:
- examples/ps_synthetic.py (gradients pushed to the parameter server, parameters pulled back,
  every step; 4,096 synthetic samples per epoch), distributed: 2 workers + 1 PS; alone: 1
  worker, no PS (it updates its own parameters: plain training);
- examples/allreduce_digits.py (DistributedDataParallel, gloo; scikit-learn's 1,797 digits per
  epoch), distributed: 2 workers; alone: 1 worker.
Both with a hidden layer of HIDDEN units (the examples' `hidden` argument: about 170,000 and
300,000 parameters, 0.7 and 1.2 MB exchanged per step), so that a step's compute and its
exchange are both visible on a CPU. The jobs run one at a time (nothing else on the cluster),
WARM_STEPS + MEASURED_STEPS steps each (a fraction of an epoch at small batches, a few epochs at
large ones), REPEATS runs per point in passes of alternating order.

Epoch time, from the runtime's own records (the store's step records, written by rank 0 after
each step): steps per epoch x the step time, the QUANTILE of the measured steps' wall times
(record to record: the step, its exchange, the runtime's per-step stop-flag all-reduce), pooled
over the point's runs. A low quantile, not the mean: the machine has 2 cores that other programs
share, and a step the OS took the CPU from says nothing about the step; the epoch times of the
median and of the mean are in results.csv (the median's in the table too). Steps per epoch are
the example's samples // batch, checked against the records' epoch numbers.

The speed model (dlsched.workload.speed), calibrated from the same runs per example: its step
time is overhead + (global batch / workers) x per-sample time + exchange (overlap 0: the
examples do not overlap their exchange with compute on a CPU). One straight line in the batch
per mode (`fit_speed`): alone gives the overhead and the per-sample time; distributed, on top of
that overhead, its own per-sample time and the exchange. The distributed per-sample time is the
larger (`contention`, 2-3x here): the workers and the PS of a job compete for the 2 cores, which
GPU workers would not; the simulator gets it as the model's per-sample time. Each mode is a
ModelProfile (overhead_ms, ms_per_sample, param_mb: the model's real size), and the cluster's
NIC bandwidth is the effective one that makes the exchange take its fitted time (as the `pollux`
preset's NICs: fitted, not nominal; on loopback the exchange is mostly the collectives'
latency). Each point is then a one-job workload run by the simulator (dlsched.simulate, fifo:
each worker and the PS on its own node), one epoch of iterations; its JCT is the predicted epoch
time.

Checks: per example, every run finished; the simulated epoch within TOLERANCE of the measured at
every point; the distributed epoch time falls at every doubling of the batch (the seed's trend),
measured and simulated; distributed is slowest against alone at the smallest batch and the gap
narrows as the batch grows; alone varies less with the batch than distributed (the seed's
"stable regardless of batch size"). About 3 minutes. `--seeds` is ignored.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dlsched.experiments.base import Check, Experiment, ExperimentResult, register_experiment

NODES, GPUS_PER_NODE, GPU_TYPE = 2, 1, "fake-gpu"
BATCHES = (16, 32, 64, 128)
HIDDEN = 4096
WARM_STEPS = 10                  # steps of each run not measured (process group, first iterations)
MEASURED_STEPS = 100             # steps measured per run
QUANTILE = 0.25                  # of the measured steps' times: the step time (module docstring)
REPEATS = 2                      # runs per point, in passes (the second in reverse order), pooled
DIST_WORKERS = 2
TOLERANCE = 0.20
ROUND_S = 2.0
JOB_TIMEOUT_S = 120.0
NAMESPACE = "batchsize"
# example -> the job spec's fixed part; (in, out) of its model (its size: param_mb)
EXAMPLES = {
    "ps": {"entry": "ps_synthetic.py", "args": {"lr": 0.05, "seed": 1, "hidden": HIDDEN},
           "comm": "ps", "dims": (32, 8), "samples": 4096},
    "allreduce": {"entry": "allreduce_digits.py", "args": {"lr": 0.1, "seed": 0, "hidden": HIDDEN},
                  "comm": "allreduce", "dims": (64, 10), "samples": 1797},
}
MODES = ("alone", "distributed")
# Seed 000, Figure 4 and its text: distributed AlexNet (1 PS + 1 worker), seconds per epoch;
# non-distributed "stable at 5-8 seconds per epoch, regardless of batch size".
PUBLISHED_DIST_S = {16: 330.0, 128: 49.0}
PUBLISHED_ALONE_S = (5.0, 8.0)


def examples_dir() -> Path:
    p = Path(__file__).resolve().parents[3] / "examples"
    if not (p / "ps_synthetic.py").is_file():
        raise FileNotFoundError(f"seed000-batch-size runs the examples of the source tree ({p} has none)")
    return p


def shape(example: str, mode: str) -> tuple[int, int]:
    """(workers, parameter servers) of a run."""
    if mode == "alone":
        return 1, 0
    return DIST_WORKERS, (1 if EXAMPLES[example]["comm"] == "ps" else 0)


def param_count(example: str, hidden: int = HIDDEN) -> int:
    """Parameters of the example's model: Linear(in, hidden), Linear(hidden, out)."""
    d_in, d_out = EXAMPLES[example]["dims"]
    return d_in * hidden + hidden + hidden * d_out + d_out


def steps_per_epoch(example: str, batch: int) -> int:
    """The example's steps per epoch (its samples // the batch size, as the program computes it;
    checked against the step records' epoch numbers where a run crosses an epoch)."""
    return EXAMPLES[example]["samples"] // batch


def job_spec(example: str, mode: str, batch: int) -> dict:
    ex = EXAMPLES[example]
    workers, ps = shape(example, mode)
    return {"name": f"bs-{example}-{mode}-{batch}", "entry": str(examples_dir() / ex["entry"]),
            "args": dict(ex["args"]), "workers": workers, "ps": ps, "gpus_per_worker": 1,
            "cpus_per_worker": 0.5, "batch_size": batch, "iterations": WARM_STEPS + MEASURED_STEPS, "model": f"{example}-{mode}",
            "checkpoint_every": 1_000_000}


def plan(repeats: int = REPEATS) -> list[tuple[str, str, int]]:
    """The runs, in order: points interleaved, and each pass after the first in reverse order, so
    that a slow spell of the machine does not fall on one point's runs alone."""
    one = [(e, m, b) for b in BATCHES for e in EXAMPLES for m in MODES]
    return [r for k in range(repeats) for r in (one if k % 2 == 0 else one[::-1])]


# -- from the store ------------------------------------------------------------------------------

def step_intervals(recs: list[dict], warm: int = WARM_STEPS) -> list[float]:
    """Wall seconds of each measured step of one run: from the previous step's record to its own
    (rank 0 writes a record after each step), for the steps after the first `warm`."""
    by_step = {int(r["step"]): float(r["time"]) for r in recs if r.get("time") is not None}
    return [by_step[s] - by_step[s - 1] for s in sorted(by_step) if s > warm and s - 1 in by_step]


def check_epochs(recs: list[dict], spe: int) -> bool:
    """The records' epoch numbers agree with `spe` steps per epoch."""
    return all(int(r["epoch"]) == int(r["step"]) // spe for r in recs if r.get("epoch") is not None)


def epoch_figures(intervals: list[float], spe: int) -> dict:
    """Step and epoch time of one point from its measured steps' times (pooled over its runs):
    the step time is their QUANTILE (the module docstring says why), the epoch time that times
    the steps per epoch; the median's and the mean's epochs beside it."""
    a = np.asarray(intervals, dtype=float)
    step = float(np.quantile(a, QUANTILE))
    return {"steps_per_epoch": spe, "steps": int(a.size), "step_s": step, "epoch_s": spe * step,
            "epoch_median_s": spe * float(np.median(a)), "epoch_mean_s": spe * float(a.mean())}


# -- the real runs -------------------------------------------------------------------------------

def run_real(address: str, runs: list[tuple[str, str, int]], log=print, keep: Path | None = None) -> list[dict]:
    """Each run alone on one `dlsched server`, one after the other; the points (example, mode,
    batch, workers, ps, runs and those done, and epoch_figures over their pooled steps) from its
    store."""
    from dlsched.experiments.runtime_fidelity import FINAL, _Server
    from dlsched.runtime.store import Store
    sd = Path(tempfile.mkdtemp(prefix="batchsize-", dir=keep))
    try:
        srv = _Server(address, sd, "fifo", ROUND_S, NAMESPACE).start()
        ids = {}
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 90 and not all(n["warm_ready"] >= n["gpus"] for n in srv.get("/nodes")):
                time.sleep(0.5)
            for run in runs:
                t = time.monotonic()
                jid = srv.submit(job_spec(*run))
                ids[jid] = run
                while srv.get(f"/jobs/{jid}")["state"] not in FINAL:
                    if time.monotonic() - t > JOB_TIMEOUT_S:
                        log(f"{run}: not done after {JOB_TIMEOUT_S:.0f} s: cancelled")
                        srv.post(f"/jobs/{jid}/cancel")
                        break
                    time.sleep(0.2)
                log(f"{'/'.join(map(str, run))}: {srv.get(f'/jobs/{jid}')['state']} in {time.monotonic() - t:.1f} s")
        finally:
            srv.stop()
        store = Store(sd / "dlsched.db")
        try:
            pooled: dict[tuple, dict] = {}
            for j in store.jobs():
                if j["job_id"] not in ids:
                    continue
                example, mode, batch = key = ids[j["job_id"]]
                spe = steps_per_epoch(example, batch)
                pt = pooled.setdefault(key, {"runs": 0, "done": 0, "intervals": [], "epochs_agree": True})
                pt["runs"] += 1
                if j["state"] == "done":
                    recs = store.stats(j["job_id"])
                    pt["done"] += 1
                    pt["intervals"] += step_intervals(recs)
                    pt["epochs_agree"] &= check_epochs(recs, spe)
            points = []
            for (example, mode, batch), pt in pooled.items():
                workers, ps = shape(example, mode)
                fig = epoch_figures(pt["intervals"], steps_per_epoch(example, batch)) if pt["intervals"] else {}
                points.append({"example": example, "mode": mode, "batch": batch, "workers": workers, "ps": ps,
                               "runs": pt["runs"], "done": pt["done"], "epochs_agree": pt["epochs_agree"], **fig})
        finally:
            store.close()
        return points
    finally:
        if keep is None:
            shutil.rmtree(sd, ignore_errors=True)


# -- the speed model, calibrated -----------------------------------------------------------------

def _nnls_rel(A: np.ndarray, y: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Non-negative least squares relative to the step times t: min sum ((A x - y) / t)^2, x >= 0."""
    from scipy.optimize import nnls
    return nnls(A / t[:, None], y / t)[0]


def fit_speed(points: list[dict]) -> dict:
    """One example's speed model, fitted to its measured step times (relative errors, every
    unknown >= 0), one straight line in the batch size per mode, step = a + c x batch:
    - alone: overhead_s + batch x sample_s;
    - distributed: overhead_s (alone's) + batch / workers x dist_sample_s + exchange_s.
    dist_sample_s / sample_s (`contention`) is how much slower a worker computes a sample when
    the job's ranks run at once: on a machine of 2 cores shared with other programs, the
    workers and the PS compete for them (a GPU job's workers would not)."""
    alone = [p for p in points if p.get("step_s") and p["mode"] == "alone"]
    dist = [p for p in points if p.get("step_s") and p["mode"] == "distributed"]
    if len(alone) < 2 or len(dist) < 2:
        raise ValueError(f"{len(alone)} alone and {len(dist)} distributed points measured: 2 of each are needed")
    t = np.array([p["step_s"] for p in alone])
    over, sample = _nnls_rel(np.array([[1.0, p["batch"]] for p in alone]), t, t)
    t = np.array([p["step_s"] for p in dist])
    # the distributed step less alone's overhead, relative to the whole step
    dsample, exchange = _nnls_rel(np.array([[p["batch"] / p["workers"], 1.0] for p in dist]), t - over, t)
    return {"overhead_s": float(over), "sample_s": float(sample), "dist_sample_s": float(dsample),
            "exchange_s": float(exchange), "contention": float(dsample / sample) if sample > 0 else float("nan")}


def model_name(example: str, mode: str) -> str:
    """The simulated job's model: one profile per example and mode (the runtime's jobs carry the
    model `example-mode` too)."""
    return f"seed000-batch-{example}-{mode}"


def sim_cluster(example: str, nic_gbps: float):
    """DIST_WORKERS one-GPU nodes and a PS node on one rack, each worker's CPU demand filling its
    node (every rank gets a node of its own, as the speed model's exchange assumes)."""
    from dlsched.cluster.topology import cluster_from_dict
    cpus = float(job_spec(example, "distributed", BATCHES[0])["cpus_per_worker"])
    common = {"rack": "r0", "mem_gb": 16, "nic_gbps": nic_gbps}
    return cluster_from_dict({"name": f"seed000-batch-{example}", "rack_uplink_gbps": 1e6, "node_groups": [
        {"count": DIST_WORKERS, "gpus": 1, "gpu_type": GPU_TYPE, "gpu_mem_gb": 16, "cpus": cpus,
         "name_prefix": "w", **common},
        {"count": 1, "gpus": 0, "cpus": cpus, "name_prefix": "ps", **common}]})


def calibrated(example: str, fit: dict, hidden: int = HIDDEN):
    """({model name: ModelProfile}, Cluster) of the fit: per mode, the model with the fitted
    overhead and per-sample time on GPU_TYPE and its real size (4-byte parameters); the
    cluster's NICs as fast as makes the distributed exchange take exchange_s (the busiest link's
    bytes per step, from the speed model itself, over exchange_s)."""
    from dlsched.core.types import Role, TaskPlacement
    from dlsched.workload.models import ModelProfile
    from dlsched.workload.speed import GBPS, SpeedModel, SpeedParams
    models = {}
    for mode, key in (("alone", "sample_s"), ("distributed", "dist_sample_s")):
        models[model_name(example, mode)] = ModelProfile(
            model_name(example, mode), param_mb=4.0 * param_count(example, hidden) / 1e6,
            ms_per_sample=1000.0 * fit[key], overhead_ms=1000.0 * fit["overhead_s"], overlap=0.0,
            default_batch=max(BATCHES), ms_per_sample_by_gpu={GPU_TYPE: 1000.0 * fit[key]})
    job = sim_job(example, "distributed", max(BATCHES), 1)
    workers = iter(range(DIST_WORKERS))
    placements = tuple(TaskPlacement(t.index, next(workers), (0,)) if t.role is Role.WORKER
                       else TaskPlacement(t.index, DIST_WORKERS) for t in job.tasks)
    comm = SpeedModel(sim_cluster(example, 1.0), SpeedParams(models=models, measured=False)).profile(job, placements)
    busiest = max(comm.link_bytes.values(), default=0.0)
    nic = busiest / fit["exchange_s"] / GBPS if fit["exchange_s"] > 0 and busiest > 0 else 1e6
    return models, sim_cluster(example, nic)


def sim_job(example: str, mode: str, batch: int, iterations: int):
    """The run as the simulator's job (the runtime's own spec -> JobSpec), `iterations` steps."""
    from dlsched.runtime.spec import RuntimeJobSpec
    spec = job_spec(example, mode, batch)
    spec.update(iterations=int(iterations), model=model_name(example, mode))
    return RuntimeJobSpec(**spec).to_jobspec(f"{example}-{mode}-{batch}", 0.0)


def predict(example: str, fit: dict, points: list[dict]) -> dict[tuple[str, int], float]:
    """(mode, batch) -> the simulated epoch time: a one-job workload of one epoch's iterations
    through dlsched.simulate on the calibrated models and cluster (fifo); its JCT."""
    from dlsched.api import simulate
    from dlsched.workload.speed import SpeedParams
    models, cl = calibrated(example, fit)
    speed = SpeedParams(models=models, measured=False)
    out = {}
    for p in points:
        if not p.get("steps_per_epoch"):
            continue
        res = simulate(cl, [sim_job(example, p["mode"], p["batch"], p["steps_per_epoch"])], "fifo", speed=speed)
        out[(p["mode"], p["batch"])] = float(res.jobs["jct_s"].iloc[0])
    return out


# -- the table, the checks, the figure ------------------------------------------------------------

def _falls(xs: list) -> bool:
    return len(xs) >= 2 and all(x is not None for x in xs) and all(b < a for a, b in zip(xs, xs[1:]))


def _sec(x) -> str:
    return "-" if x is None or x != x else (f"{x:.3f} s" if x < 10 else f"{x:.1f} s")


def seed_figure(example: str, mode: str, batch: int) -> str:
    """Seed 000's published figure for this point (AlexNet, parameter server), as text."""
    if example != "ps":
        return "future work" if batch == BATCHES[0] else ""
    if mode == "distributed":
        return f"{PUBLISHED_DIST_S[batch]:.0f} s" if batch in PUBLISHED_DIST_S else ""
    return f"{PUBLISHED_ALONE_S[0]:.0f}-{PUBLISHED_ALONE_S[1]:.0f} s"


def compare(points: list[dict], sims: dict[str, dict], fits: dict[str, dict]) -> ExperimentResult:
    """The table (published beside ours, per point), the result rows and the checks."""
    pt = {(p["example"], p["mode"], p["batch"]): p for p in points}
    order = sorted(pt, key=lambda k: (list(EXAMPLES).index(k[0]), MODES.index(k[1]), k[2]))
    published, rows, checks = [], [], []
    for e, m, b in order:
        p = pt[(e, m, b)]
        meas, sim = p.get("epoch_s"), sims.get(e, {}).get((m, b))
        dev = (sim / meas - 1.0) if meas and sim is not None else float("nan")
        published.append({"example": e, "mode": m, "batch": str(b), "seed 000 (AlexNet, s/epoch)": seed_figure(e, m, b),
                          "epoch (ours)": _sec(meas),
                          "step": "-" if p.get("step_s") is None else f"{1000 * p['step_s']:.1f} ms",
                          "epoch, median step": _sec(p.get("epoch_median_s")),
                          "simulated epoch": _sec(sim), "deviation": f"{100 * dev:+.1f} %" if dev == dev else "-"})
        rows.append({"group": e, "policy": f"{m} {b}", "seeds": 1, "example": e, "mode": m, "batch": b,
                     "workers": p["workers"], "ps": p["ps"], "runs": p.get("runs"), "done": p.get("done"),
                     "steps": p.get("steps"), "steps_per_epoch": p.get("steps_per_epoch"), "step_s": p.get("step_s"),
                     "epoch_s": meas, "epoch_median_s": p.get("epoch_median_s"),
                     "epoch_mean_s": p.get("epoch_mean_s"), "sim_epoch_s": sim, "deviation": dev})
    for e in EXAMPLES:
        mine = [k for k in order if k[0] == e]
        if not mine:
            continue
        done = [pt[k].get("done", 0) == pt[k].get("runs", 0) and pt[k].get("epochs_agree", True) for k in mine]
        checks.append(Check(f"{e}: every run finished (and its records' epochs agree with the steps per epoch)",
                            all(done), f"{sum(pt[k].get('done', 0) for k in mine)} of "
                                       f"{sum(pt[k].get('runs', 0) for k in mine)} runs done"))
        devs = {(m, b): (sims.get(e, {}).get((m, b)), pt[(e, m, b)].get("epoch_s")) for _, m, b in mine}
        bad = [k for k, (sv, rv) in devs.items() if not rv or sv is None or abs(sv / rv - 1) > TOLERANCE]
        checks.append(Check(f"{e}: the calibrated speed model's epoch time within {TOLERANCE:.0%} of the measured "
                            "at every point", not bad,
                            ", ".join(f"{m} {b}: {100 * (sv / rv - 1):+.0f} %" if rv and sv is not None else f"{m} {b}: -"
                                      for (m, b), (sv, rv) in devs.items())))
        dist = [pt[(e, "distributed", b)].get("epoch_s") if (e, "distributed", b) in pt else None for b in BATCHES]
        alone = [pt[(e, "alone", b)].get("epoch_s") if (e, "alone", b) in pt else None for b in BATCHES]
        sdist = [sims.get(e, {}).get(("distributed", b)) for b in BATCHES]
        seed = (f" (seed 000: {PUBLISHED_DIST_S[16]:.0f} s at 16 -> {PUBLISHED_DIST_S[128]:.0f} s at 128)"
                if e == "ps" else " (seed 000's future work)")
        checks.append(Check(f"{e}: the distributed epoch time falls at every doubling of the batch{seed}",
                            _falls(dist), " -> ".join(_sec(x) for x in dist)))
        checks.append(Check(f"{e}: the calibrated simulator shows the same fall", _falls(sdist),
                            " -> ".join(_sec(x) for x in sdist)))
        if all(dist) and all(alone):
            ratio = [d / a for d, a in zip(dist, alone)]
            checks.append(Check(f"{e}: distributed is slowest against alone at the smallest batch, and the gap "
                                "narrows as the batch grows", ratio[0] == max(ratio) and ratio[-1] < ratio[0],
                                "distributed / alone: " + " -> ".join(f"{r:.2f}x" for r in ratio)))
            sa, sd = max(alone) / min(alone), max(dist) / min(dist)
            checks.append(Check(f"{e}: alone varies less with the batch than distributed (seed 000: alone "
                                f"{PUBLISHED_ALONE_S[0]:.0f}-{PUBLISHED_ALONE_S[1]:.0f} s at every batch)", sa < sd,
                                f"slowest / fastest epoch over the batch sizes: alone {sa:.2f}x, distributed {sd:.2f}x"))
    for e, f in fits.items():
        published.append({"example": e, "mode": "speed model", "batch": "fit",
                          "seed 000 (AlexNet, s/epoch)": (f"16 vs 128: {PUBLISHED_DIST_S[16] / PUBLISHED_DIST_S[128]:.1f}x"
                                                          if e == "ps" else ""),
                          "epoch (ours)": f"alone: {1000 * f['overhead_s']:.2f} ms + batch x {1000 * f['sample_s']:.4f} ms",
                          "step": f"distributed: + batch / {DIST_WORKERS} x {1000 * f['dist_sample_s']:.4f} ms",
                          "epoch, median step": f"+ exchange {1000 * f['exchange_s']:.2f} ms",
                          "simulated epoch": f"NIC {f.get('nic_gbps', float('nan')):.2f} Gbps",
                          "deviation": f"contention {f['contention']:.2f}x"})
    res = ExperimentResult("seed000-batch-size", TITLE, rows, published, checks, results={},
                           extra={"points": points, "fits": fits, "tolerance": TOLERANCE, "quantile": QUANTILE,
                                  "simulated": {e: {f"{m}/{b}": v for (m, b), v in sv.items()} for e, sv in sims.items()},
                                  "published": {"distributed_s": PUBLISHED_DIST_S, "alone_s": PUBLISHED_ALONE_S}})
    res.extra["plots"] = {"epoch_vs_batch.png": plot}
    res.extra["files"] = {"report.html": lambda path: write_report(res, path)}
    return res


def plot(rows: list[dict], path: Path) -> None:
    """Epoch time against batch size per example: measured (markers), simulated (lines)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(EXAMPLES), figsize=(5 * len(EXAMPLES), 4), squeeze=False)
    for ax, e in zip(axes[0], EXAMPLES):
        for m, colour in zip(MODES, ("tab:blue", "tab:red")):
            rs = sorted((r for r in rows if r["example"] == e and r["mode"] == m), key=lambda r: r["batch"])
            ax.plot([r["batch"] for r in rs], [r["epoch_s"] for r in rs], "o", color=colour, label=f"{m}, measured")
            ax.plot([r["batch"] for r in rs], [r["sim_epoch_s"] for r in rs], "-", color=colour, label=f"{m}, simulated")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(list(BATCHES), [str(b) for b in BATCHES])
        ax.set_xlabel("batch size")
        ax.set_ylabel("epoch time (s)")
        ax.set_title(f"{e}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(res: ExperimentResult, path: Path) -> None:
    import html
    head = "".join(f"<th>{html.escape(k)}</th>" for k in res.published[0]) if res.published else ""
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.values()) + "</tr>"
                   for r in res.published)
    checks = "".join(f"<li>{'PASS' if c.ok else 'FAIL'}: {html.escape(c.text)} <small>{html.escape(c.detail)}</small></li>"
                     for c in res.checks)
    doc = html.escape((__doc__ or "").strip())
    path.write_text(f"<!doctype html><meta charset='utf-8'><title>{html.escape(res.title)}</title>"
                    f"<h1>{html.escape(res.title)}</h1><h2>Published figures beside ours</h2>"
                    f"<table border=1 cellpadding=3><tr>{head}</tr>{body}</table>"
                    f"<h2>Expected direction</h2><ul>{checks}</ul>"
                    f"<p><img src='epoch_vs_batch.png' alt='epoch time against batch size'></p>"
                    f"<h2>How</h2><pre>{doc}</pre>")


TITLE = "Epoch time against batch size, distributed and alone (seed 000, Figure 4)"


def run(seeds: int = 1, log=None, runs: list | None = None, keep: Path | None = None) -> ExperimentResult:
    from dlsched.experiments.runtime_fidelity import warm_up
    from dlsched.runtime.cluster import LocalRay
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    runs = plan() if runs is None else runs
    with LocalRay(NODES, GPUS_PER_NODE, gpu_type=GPU_TYPE) as rc:
        warm_up(rc.address, namespace=NAMESPACE, gpus=NODES * GPUS_PER_NODE, log=log)
        points = run_real(rc.address, runs, log=log, keep=keep)
    fits, sims = {}, {}
    for e in EXAMPLES:
        mine = [p for p in points if p["example"] == e and p.get("step_s")]
        if len(mine) < 3:
            continue
        fits[e] = fit_speed(mine)
        sims[e] = predict(e, fits[e], mine)
        fits[e]["nic_gbps"] = calibrated(e, fits[e])[1].nodes[0].nic_gbps
        log(f"{e}: speed model: overhead {1000 * fits[e]['overhead_s']:.2f} ms, "
            f"{1000 * fits[e]['sample_s']:.4f} ms/sample, exchange {1000 * fits[e]['exchange_s']:.2f} ms")
    return compare(points, sims, fits)


register_experiment(Experiment("seed000-batch-size", TITLE,
                               "seed 000 Figure 4 on an embedded Ray cluster (issue 13)", run, default_seeds=1))
