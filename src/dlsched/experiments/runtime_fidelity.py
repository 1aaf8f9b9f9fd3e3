"""runtime-fidelity: the simulator checked against the real runtime (issue 12, "Simulator against
reality").

One small workload (16 jobs, seeded arrivals, 1-4 GPUs each, two step-time models) runs twice
per policy: on the real runtime (an embedded local Ray cluster of 4 nodes x 2 virtual GPUs and a
real `dlsched server` per policy, jobs submitted through its API at their arrival times, the
program examples/timed_steps.py: real gloo all-reduce, real checkpoints, each step padded to a
set time per GPU type and world size, so the two CPUs of a small machine do not decide the
speed), and in the simulator calibrated from what the runtime measured
(dlsched.runtime.calibration: step times per model, GPU type and workers, start, restart, stop
and finish costs; pooled over the real runs into one calibration file, calibration.json;
dlsched.workload.calibrated runs the simulator on it). Both backends use the same round interval
(`--round-s`, ROUND_S) and the same arrival times (those the runtime recorded), and the
simulated jobs carry the runtime's job ids (the loss curves' noise is seeded by them). Before the
measured runs, one throw-away job runs the program on every rank worker (`warm_up`).

Expected: each policy's mean JCT and makespan in simulation within 10 % of the real run, and the
same ranking of the policies (pairs within RANK_MARGIN of each other in the real run are tied;
the strict rankings are in the table). docs/runtime-fidelity.md has the details. A policy the runtime refuses at start (e.g. gandiva without GPU
sharing) is recorded with its reason and left out. `--seeds` is ignored (one real run per
policy; the workload's seed is SEED).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dlsched.experiments.base import Check, Experiment, ExperimentResult, register_experiment, summarise

POLICIES = ("fifo", "fifo-gang", "tiresias", "gandiva", "optimus")
NODES, GPUS_PER_NODE, GPU_TYPE = 4, 2, "fake-gpu"
ROUND_S = 5.0
SEED = 0
JOBS = 16
MEAN_GAP_S = 1.8                 # mean time between arrivals (exponential)
ITERATIONS = (25, 60)            # uniform, per job
WORKERS = ((1, 0.45), (2, 0.35), (4, 0.20))
# the models: args of examples/timed_steps.py (step time with one worker per GPU type, serial
# part, seconds per extra worker)
MODELS = {"timed-a": {"step_s": {GPU_TYPE: 0.2}, "serial": 0.25, "comm_s": 0.01},
          "timed-b": {"step_s": {GPU_TYPE: 0.3}, "serial": 0.4, "comm_s": 0.02}}
TOLERANCE = 0.10
# Two policies whose real figures are within this of each other are tied (not ranked): the
# simulator is asked to be within TOLERANCE, so it cannot be asked to order them, and the runtime's
# own run-to-run spread is of that size: fifo and fifo-gang make the same decisions on this
# workload (strict FIFO: nobody passes a head job that does not fit, whether it holds part of its
# GPUs or none; the simulation gives them figures within 0.1 %), and their real runs differed by
# -3 % to +8 % in mean JCT (the `spread` row of the table).
RANK_MARGIN = TOLERANCE
TIMEOUT_S = 300.0                # per real run
FINAL = ("done", "failed", "cancelled", "rejected")
KEYS = ("mean_jct_s", "makespan_s", "median_jct_s", "mean_wait_s", "gpu_util", "switch_lost_s", "sched_time_s")


def _s(x) -> str:
    return "-" if x is None else f"{x:.1f} s"


def program() -> Path:
    p = Path(__file__).resolve().parents[3] / "examples" / "timed_steps.py"
    if not p.is_file():
        raise FileNotFoundError(f"runtime-fidelity runs examples/timed_steps.py from the source tree ({p} is missing)")
    return p


def workload(jobs: int = JOBS, seed: int = SEED, mean_gap_s: float = MEAN_GAP_S,
             iterations: tuple[int, int] = ITERATIONS) -> list[tuple[float, dict]]:
    """(arrival offset in s, job spec) per job, seeded."""
    import numpy as np
    rng = np.random.default_rng(seed)
    sizes, probs = zip(*WORKERS)
    names = sorted(MODELS)
    out, t = [], 0.0
    for i in range(jobs):
        if i:
            t += float(rng.exponential(mean_gap_s))
        w = int(rng.choice(sizes, p=probs))
        model = names[int(rng.integers(len(names)))]
        its = int(rng.integers(iterations[0], iterations[1] + 1))
        out.append((round(t, 3), {
            "name": f"fid-{i:02d}", "entry": str(program()), "args": {**MODELS[model], "model": model, "seed": i},
            "workers": w, "gpus_per_worker": 1, "batch_size": 64, "iterations": its, "model": model,
            "checkpoint_every": 25}))
    return out


class _Server:
    """A `dlsched server` subprocess on its own state dir, and a client for its API."""

    def __init__(self, address: str, state_dir: Path, policy: str, round_s: float, namespace: str,
                 policy_config: Path | None = None):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.state_dir, self.policy, self.url = state_dir, policy, f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "dlsched.cli.main", "server", "--ray-address", address,
                    "--state-dir", str(state_dir), "--policy", policy, "--port", str(self.port),
                    "--namespace", namespace, "--round-s", str(round_s)]
        if policy_config is not None:
            self.cmd += ["--policy-config", str(policy_config)]
        self.proc = None
        self.token = ""

    def start(self, timeout: float = 120.0) -> "_Server":
        """Start and wait for /health; raises RuntimeError with the server's last line when it
        exits (a policy the runtime refuses)."""
        import httpx
        log = open(self.state_dir / "server.log", "ab")
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env={**os.environ, "DLSCHED_STATE_DIR": str(self.state_dir)})
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                lines = [x for x in (self.state_dir / "server.log").read_text(errors="replace").splitlines() if x.strip()]
                raise RuntimeError(lines[-1].removeprefix("error: ") if lines else "server exited")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > timeout:
                self.stop()
                raise RuntimeError("server did not start")
            time.sleep(0.3)
        self.token = (self.state_dir / "token").read_text().strip()
        return self

    def _h(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str):
        import httpx
        r = httpx.get(self.url + path, headers=self._h(), timeout=60)
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body=None):
        import httpx
        r = httpx.post(self.url + path, json=body, headers=self._h(), timeout=60)
        r.raise_for_status()
        return r.json()

    def submit(self, spec: dict) -> str:
        return self.post("/jobs", {"spec": spec})["job_id"]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def run_real(address: str, policy: str, jobs: list[tuple[float, dict]], *, round_s: float = ROUND_S,
             namespace: str = "fidelity", timeout_s: float = TIMEOUT_S, log=print,
             keep: Path | None = None, policy_config: dict | None = None,
             collect=None) -> dict:
    """One policy on the real runtime: {"refused": reason} or {"result": SimResult (the
    runtime's report), "calibration": dict, "jobs": [(job id, spec, submit s)], "epoch", "wall_s"}.
    `keep`: a folder to keep the state dir in (its store, server log, rank logs), else removed;
    `policy_config`: the profile's settings ({"params": ...}, the server's --policy-config);
    `collect(store, epoch)`: more figures from the run's store, returned as "collected"."""
    from dlsched.runtime.calibration import calibration_from_store
    from dlsched.runtime.report import result_from_store
    from dlsched.runtime.store import Store
    sd = Path(tempfile.mkdtemp(prefix=f"fidelity-{policy}-", dir=keep))
    try:
        cfg = None
        if policy_config is not None:
            import yaml
            cfg = sd / "policy.yaml"
            cfg.write_text(yaml.safe_dump({"policies": {policy: policy_config}}))
        srv = _Server(address, sd, policy, round_s, namespace, cfg)
        try:
            srv.start()
        except RuntimeError as e:
            log(f"{policy}: refused at start: {e}")
            return {"refused": str(e)}
        log(f"{policy}: server up")
        try:
            t_ready = time.monotonic()
            while time.monotonic() - t_ready < 90:       # warm rank workers up before the clock runs
                nodes = srv.get("/nodes")
                # (a server adopting the previous one's workers counts those that answered as ready)
                if all(n["warm_ready"] >= n["gpus"] for n in nodes):
                    break
                time.sleep(0.5)
            log(f"{policy}: warm")
            t0 = time.monotonic()
            ids = []
            for offset, spec in jobs:
                time.sleep(max(0.0, t0 + offset - time.monotonic()))
                ids.append(srv.submit(spec))
            while True:
                left = [j["job_id"] for j in srv.get("/jobs") if j["state"] not in FINAL]
                if not left:
                    break
                if time.monotonic() - t0 > timeout_s:       # the report counts them unfinished
                    log(f"{policy}: {len(left)} job(s) not done after {timeout_s:.0f} s: cancelled")
                    for jid in left:
                        srv.post(f"/jobs/{jid}/cancel")
                    break
                time.sleep(0.5)
            wall = time.monotonic() - t0
            nodes = srv.get("/nodes")
        finally:
            srv.stop()
        log(f"{policy}: server stopped")
        store = Store(sd / "dlsched.db")
        try:
            epoch = float(store.meta("epoch"))
            total = sum(int(n["gpus"]) for n in nodes)
            res = result_from_store(store, epoch, total, policy=policy)
            cal = calibration_from_store(store, epoch, nodes=nodes, policy=policy)
            stored = [(j["job_id"], j["spec"], j["submit_time"] - epoch) for j in store.jobs()]
            collected = collect(store, epoch) if collect is not None else None
        finally:
            store.close()
        log(f"{policy}: real: {res.summary['finished']}/{len(jobs)} done, mean JCT "
            f"{_s(res.summary['mean_jct_s'])}, makespan {_s(res.summary['makespan_s'])} ({wall:.0f} s)")
        return {"result": res, "calibration": cal, "jobs": stored, "epoch": epoch, "wall_s": wall,
                "collected": collected}
    finally:
        if keep is None:
            shutil.rmtree(sd, ignore_errors=True)


def warm_up(address: str, *, namespace: str = "fidelity", gpus: int = NODES * GPUS_PER_NODE, log=print) -> None:
    """Run the program once on every rank worker of the namespace (one job of `gpus` workers, a
    few short steps) under a throw-away server: a worker's first program pays for loading it
    (1-2 s here, more with CPU contention), once per worker process; the measured runs then all
    start from the same warm pool, which the next servers adopt."""
    sd = Path(tempfile.mkdtemp(prefix="fidelity-warmup-"))
    try:
        srv = _Server(address, sd, "fifo-gang", ROUND_S, namespace).start()
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 90 and not all(n["warm_ready"] >= n["gpus"] for n in srv.get("/nodes")):
                time.sleep(0.5)
            jid = srv.submit({"name": "warm-up", "entry": str(program()), "args": {"step_s": {"default": 0.05}},
                              "workers": gpus, "gpus_per_worker": 1, "batch_size": 64, "iterations": 3})
            while time.monotonic() - t0 < 180 and srv.get(f"/jobs/{jid}")["state"] not in FINAL:
                time.sleep(0.5)
            log(f"warm-up: {srv.get(f'/jobs/{jid}')['state']} in {time.monotonic() - t0:.0f} s")
        finally:
            srv.stop()
    finally:
        shutil.rmtree(sd, ignore_errors=True)


def sim_jobs(stored: list) -> list:
    """The runtime's jobs as its scheduler saw them (ids, specs, arrival times)."""
    from dlsched.runtime.spec import RuntimeJobSpec
    return [RuntimeJobSpec(**spec).to_jobspec(jid, t) for jid, spec, t in stored]


def rank(values: dict[str, float]) -> list[str]:
    return sorted(values, key=lambda p: (values[p], p))


def ranking_text(values: dict[str, float]) -> str:
    """'a < b = c': the policies in order, '=' between equal figures."""
    order = rank(values)
    out = order[:1]
    for a, b in zip(order, order[1:]):
        out += ["=" if abs(values[b] - values[a]) <= 1e-6 * max(abs(values[a]), 1e-9) else "<", b]
    return " ".join(out)


def ranking_pairs(real: dict[str, float], sim: dict[str, float], margin: float) -> tuple[list, list]:
    """(ties, wrong): pairs of policies whose real figures are within `margin` of each other (the
    runtime's own run-to-run spread: no ranking to keep), and pairs (a, b) the real run orders
    a < b by more than that which the simulation orders the other way."""
    ties, wrong = [], []
    pols = rank(real)
    for i, a in enumerate(pols):
        for b in pols[i + 1:]:
            if real[b] <= real[a] * (1.0 + margin):
                ties.append((a, b))
            elif not sim[a] < sim[b]:
                wrong.append((a, b))
    return ties, wrong


def compare(real: dict, sim: dict, refused: dict, *, tolerance: float = TOLERANCE, margin: float = RANK_MARGIN,
            calibration=None, wall: dict | None = None, name: str = "runtime-fidelity") -> ExperimentResult:
    """The table and checks from the real and simulated results (policy -> SimResult)."""
    pols = [p for p in real if p in sim]
    published, checks = [], []
    dev: dict[str, dict[str, float]] = {}
    for p in pols:
        dev[p] = {}
        for key, label in (("mean_jct_s", "mean JCT"), ("makespan_s", "makespan")):
            r, s = real[p].summary[key], sim[p].summary[key]
            d = (s / r - 1.0) if r and s is not None else float("nan")
            dev[p][key] = d
            published.append({"figure": f"{p} {label} (s)", "real": r, "simulated": s,
                              "deviation": f"{100 * d:+.1f} %"})
            checks.append(Check(f"{p}: simulated {label} within {100 * tolerance:.0f} % of the real run",
                                abs(d) <= tolerance, f"real {_s(r)}, simulated {_s(s)} ({100 * d:+.1f} %)"))
        unfinished = real[p].summary["unfinished"] + sim[p].summary["unfinished"]
        if unfinished:
            checks.append(Check(f"{p}: every job finished on both backends", False,
                                f"real {real[p].summary['unfinished']}, simulated {sim[p].summary['unfinished']} unfinished"))
    for key, label in (("mean_jct_s", "mean JCT"), ("makespan_s", "makespan")):
        both = [p for p in pols if real[p].summary[key] is not None and sim[p].summary[key] is not None]
        rv = {p: real[p].summary[key] for p in both}
        sv = {p: sim[p].summary[key] for p in both}
        tr, ts = ranking_text(rv), ranking_text(sv)
        published.append({"figure": f"ranking by {label}", "real": tr, "simulated": ts,
                          "deviation": "same" if tr == ts else "differs"})
        ties, wrong = ranking_pairs(rv, sv, margin)
        checks.append(Check(f"the same ranking of the policies by {label} (policies within "
                            f"{100 * margin:.0f} % of each other in the real run are tied)", not wrong,
                            f"real {tr}; simulated {ts}; tied: "
                            + (", ".join(f"{a} = {b}" for a, b in ties) or "none")
                            + (f"; ordered otherwise: {', '.join(f'{a} < {b}' for a, b in wrong)}" if wrong else "")))
    if "fifo" in pols and "fifo-gang" in pols and all(
            x[q].summary[k] for x in (real, sim) for q in ("fifo", "fifo-gang") for k in ("mean_jct_s", "makespan_s")):
        same = all(abs(sim["fifo"].summary[k] - sim["fifo-gang"].summary[k]) <= 0.005 * sim["fifo"].summary[k]
                   for k in ("mean_jct_s", "makespan_s"))
        published.append({"figure": "spread: fifo-gang vs fifo, mean JCT / makespan"
                                    + (" (the same decisions: within 0.5 % in simulation)" if same else ""),
                          "real": " / ".join(f"{100 * (real['fifo-gang'].summary[k] / real['fifo'].summary[k] - 1):+.1f} %"
                                             for k in ("mean_jct_s", "makespan_s")),
                          "simulated": " / ".join(f"{100 * (sim['fifo-gang'].summary[k] / sim['fifo'].summary[k] - 1):+.1f} %"
                                                  for k in ("mean_jct_s", "makespan_s")),
                          "deviation": "the runtime's run-to-run spread" if same else "-"})
    for p, why in refused.items():
        published.append({"figure": f"{p}", "real": "refused at start", "simulated": "-", "deviation": why[:200]})
    runs = {"real": {p: [real[p]] for p in pols}, "simulated": {p: [sim[p]] for p in pols}}
    rows = summarise(runs["real"], KEYS, group="real") + summarise(runs["simulated"], KEYS, group="simulated")
    extra = {"deviations": dev, "refused": refused, "round_s": ROUND_S, "real_wall_s": wall or {}}
    if calibration is not None:
        from dlsched.runtime.calibration import write_calibration
        extra["calibration"] = calibration
        extra["files"] = {"calibration.json": lambda path: write_calibration(path, calibration)}
    return ExperimentResult(name, "The simulator against the real runtime", rows, published, checks,
                            results=runs, extra=extra)


def run(seeds: int = 1, policies: tuple[str, ...] = POLICIES, jobs: list | None = None,
        round_s: float = ROUND_S, log=None, keep: Path | None = None, nodes: int = NODES,
        gpus_per_node: int = GPUS_PER_NODE) -> ExperimentResult:
    from dlsched.runtime.calibration import merge_calibrations
    from dlsched.workload.calibrated import simulate
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    jobs = workload() if jobs is None else jobs
    outs, refused, wall = {}, {}, {}
    from dlsched.runtime.cluster import LocalRay
    with LocalRay(nodes, gpus_per_node, gpu_type=GPU_TYPE) as ray_cluster:
        warm_up(ray_cluster.address, gpus=nodes * gpus_per_node, log=log)
        for p in policies:
            o = run_real(ray_cluster.address, p, jobs, round_s=round_s, log=log, keep=keep)
            if "refused" in o:
                refused[p] = o["refused"]
            else:
                outs[p] = o
                wall[p] = o["wall_s"]
    if not outs:
        raise RuntimeError("the runtime refused every policy: " + "; ".join(f"{p}: {r}" for p, r in refused.items()))
    cal = merge_calibrations([o["calibration"] for o in outs.values()])
    log(f"calibration: start {cal['simulator']['start_delay_s']:.2f} s, restart {cal['simulator']['restart_delay_s']:.2f} s")
    real, sim = {}, {}
    for p, o in outs.items():
        real[p] = o["result"]
        sim[p] = simulate(None, sim_jobs(o["jobs"]), p, cal, round_s=round_s)
        log(f"{p}: simulated: mean JCT {_s(sim[p].summary['mean_jct_s'])}, makespan {_s(sim[p].summary['makespan_s'])}")
    return compare(real, sim, refused, calibration=cal, wall=wall)


register_experiment(Experiment("runtime-fidelity", "The simulator against the real runtime",
                               "issue 12 (embedded Ray runtime vs calibrated simulator)", run, default_seeds=1))
