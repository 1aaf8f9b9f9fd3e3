"""Chaos run of the real runtime: jobs submitted through the REST API while a seeded script kills
the server, rank workers and nodes; at the end every job must be done exactly once, with every
step recorded once and a continuous loss curve.

    python benchmarks/chaos.py --jobs 60 --nodes 3 --seed 1 --kill-every-s 8,15 [--results] [--out DIR]
    make soak          # 2,000 jobs, a kill every ~30 s (not in CI)

What it starts (and stops, also on failure): a local Ray cluster of `--nodes` virtual GPU nodes
(dlsched.runtime.cluster.start_cluster, private RAY_TMPDIR), and a real `dlsched server`
subprocess on a private state dir (policy fifo, `--round-s 2`, `--warm-per-node 1`).

Jobs: tests/runtime/plugins/chaos_job.py, 1-2 workers, `steps` steps of `step_s` seconds each,
a checkpoint every 5 steps; arrivals are a Poisson process that loads the cluster to `load`.
Its state is a counter restored from the checkpoints and reported at every step, so a job that
recovered correctly has `counter == step + 1` at every step.

Chaos: at moments `kill_every_s` apart (uniform in [lo, hi]; one number X means [X/2, 3X/2]),
one of the following, in blocks of three kills with each kind once in an order drawn by a numpy
Generator(seed) (the script; the targets are drawn from a second stream of the same seed):
- server: kill -9 the server, start it again at once (same state dir, same port);
- worker: kill -9 the process of one busy rank worker (a `RankWorker` process under one of this
  cluster's raylets that runs the current run of a running job);
- node:   remove a worker node (`allow_graceful=False`: every process on it dies), and add it back
  with the same labels and resources a few seconds later.
Kills are sequential: each is followed by its recovery (measured) before the next may start.

Recovery time, per kill: server: kill -> /health answers and every job that was running before
the kill is running again under the new server (re-attached, or requeued and started again) or
done; worker: kill -> the broken job runs again (a new attempt) or is done; node: kill -> the
jobs that had ranks on it run again (or are done); with none on it, until the node is back in
/nodes. A recovery that does not come within `recovery_timeout_s` is a violation: the server's
Python stacks are dumped (py-spy) into the state dir, and the server is killed and restarted so
that the run goes on.

Checks at the end, for every submitted job: present once (submissions retried after a lost
answer are looked up by name first, never doubled), state done, stats cover steps 0..N-1 exactly
with counter == step + 1 and the ranks agreeing at every step, "finished" exactly once in its
events; and no rank worker process of this cluster outside a live node. (A node's processes
still alive 1 s after Ray removed it are killed, as on a real dead machine; the rank workers
among them are counted in the kill log as `rank_survivors`.)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the parts of this script beside it (see each one's docstring); its names stay importable from here
from chaos_cluster import CHECKPOINT_EVERY, KINDS, ChaosCluster, Server, _Say, stack_dump  # noqa: E402,F401
from chaos_kills import _Kills  # noqa: E402
from chaos_report import _Report, results_lines  # noqa: E402
from results import update_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENTRY = ROOT / "tests" / "runtime" / "plugins" / "chaos_job.py"
FINAL = ("done", "failed", "cancelled", "rejected")


def _workload(rng: np.random.Generator, jobs: int, steps: tuple[int, int], step_s: float, capacity: int,
              load: float) -> list[tuple[float, dict]]:
    """(arrival offset s, spec) per job: 1-2 workers, steps uniform in `steps`, Poisson arrivals at
    the rate that keeps `load` of the GPUs busy on average."""
    workers = rng.integers(1, 3, size=jobs)
    n_steps = rng.integers(steps[0], steps[1] + 1, size=jobs)
    gpu_s = float(np.mean(workers * n_steps)) * step_s
    rate = max(load, 1e-3) * capacity / max(gpu_s, 1e-3)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=jobs))
    arrivals -= arrivals[0]
    out = []
    for k in range(jobs):
        out.append((float(arrivals[k]), {
            "name": f"chaos-{k:05d}", "entry": str(ENTRY), "args": {"step_s": step_s},
            "workers": int(workers[k]), "gpus_per_worker": 1, "cpus_per_worker": 0.5,
            "batch_size": 2, "iterations": int(n_steps[k]), "checkpoint_every": CHECKPOINT_EVERY,
            "model": "chaos"}))
    return out


def _kill_every(v: str) -> tuple[float, float]:
    parts = [float(x) for x in re.split(r"[,:]", v) if x.strip()]
    if len(parts) == 1:
        return parts[0] / 2, parts[0] * 3 / 2
    if len(parts) != 2 or parts[0] > parts[1] or parts[0] <= 0:
        raise argparse.ArgumentTypeError(f"give X or LO,HI seconds, got {v!r}")
    return parts[0], parts[1]


class _Chaos(_Kills, _Report):
    """One chaos run (see the module docstring): the kills are _Kills' (chaos_kills.py), the checks
    and figures at the end _Report's (chaos_report.py)."""

    def __init__(self, jobs, nodes, seed, kill_every_s, steps, out, *, step_s, gpus_per_node,
                 cpus_per_node, warm_per_node, load, round_s, timeout_s, recovery_timeout_s, verbose):
        self.n_jobs, self.n_nodes, self.seed = jobs, nodes, seed
        self.kill_every_s, self.steps, self.out = tuple(kill_every_s), tuple(steps), out
        self.step_s, self.gpus_per_node, self.cpus_per_node = step_s, gpus_per_node, cpus_per_node
        self.warm, self.load, self.round_s = warm_per_node, load, round_s
        self.recovery_timeout_s = recovery_timeout_s
        # three streams of one seed: the workload, the script (what is killed when: the same
        # sequence whatever the timing), and the choice of targets among what runs at that moment
        wl, self.script, self.pick = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
        self._kinds: list[str] = []
        self.plan = _workload(wl, jobs, self.steps, step_s, nodes * gpus_per_node, load)
        expected = self.plan[-1][0] + 1.5 * sum(s["workers"] * s["iterations"] * step_s
                                                for _, s in self.plan) / (nodes * gpus_per_node)
        self.timeout_s = timeout_s if timeout_s is not None else 600.0 + 3 * expected
        self.say = _Say(verbose)
        self.ids: dict[str, str] = {}                   # job name -> job id
        self.lock = threading.Lock()
        self.violations: list[str] = []
        self.kills: list[dict] = []
        self.submit_retries = 0
        self.forced_restarts = 0
        self.stop = threading.Event()
        self.submitted = threading.Event()
        self.server: Server | None = None
        self.cluster: ChaosCluster | None = None
        self.state_dir: Path | None = None

    # -- helpers ------------------------------------------------------------------------------
    def violation(self, msg: str) -> None:
        self.say("VIOLATION: " + msg)
        with self.lock:
            self.violations.append(msg)

    def _try(self, fn, default=None):
        try:
            return fn()
        except (httpx.HTTPError, ValueError):
            return default

    def jobs_now(self) -> list[dict] | None:
        return self._try(lambda: self.server.get("/jobs"))

    def running(self) -> dict[str, dict]:
        """job id -> job (with allocation) of every running job; {} when the server does not answer."""
        out = {}
        for j in self.jobs_now() or []:
            if j["state"] == "running":
                d = self._try(lambda: self.server.get(f"/jobs/{j['job_id']}"))
                if d is not None and d["state"] == "running" and d["allocation"]:
                    out[j["job_id"]] = d
        return out

    def _rank_pid(self, job_id: str, rank: int, run_id: str) -> int | None:
        """The pid of the process running `run_id`'s rank (from the header of the rank's log)."""
        from dlsched.runtime.joblogs import rank_log
        p = rank_log(self.state_dir, job_id, rank)
        try:
            text = p.read_text(errors="replace")
        except OSError:
            return None
        m = re.findall(rf"run {re.escape(run_id)} rank {rank} on \S+ \(pid (\d+)\)", text)
        return int(m[-1]) if m else None

    # -- submissions (a thread) -----------------------------------------------------------------
    def submitter(self, t0: float) -> None:
        try:
            for t_arr, spec in self.plan:
                while not self.stop.is_set() and time.monotonic() < t0 + t_arr:
                    time.sleep(max(0.0, min(0.2, t0 + t_arr - time.monotonic())))
                if self.stop.is_set():
                    return
                self._submit(spec)
        finally:
            self.submitted.set()

    def _submit(self, spec: dict) -> None:
        name, uncertain = spec["name"], False
        while not self.stop.is_set():
            if uncertain:                    # an answer was lost: did the server store it?
                js = self.jobs_now()
                if js is None:
                    time.sleep(0.5)
                    continue
                same = [j["job_id"] for j in js if j["name"] == name]
                if same:
                    with self.lock:
                        self.ids[name] = same[0]
                    return
            try:
                r = self.server.post("/jobs", {"spec": spec})
            except httpx.HTTPError:
                r = None
            if r is not None and r.status_code == 201:
                with self.lock:
                    self.ids[name] = r.json()["job_id"]
                return
            if r is not None and r.status_code < 500 and r.status_code != 401:
                self.violation(f"submission of {name} refused: {r.status_code} {r.text[:300]}")
                return
            uncertain = True
            self.submit_retries += 1
            time.sleep(0.5)

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> dict:
        from dlsched.runtime.cluster import isolate_ray_tmp
        from dlsched.runtime.cluster import LOCAL_ONLY_ENV, ray_client_env
        saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED",
                                                LOCAL_ONLY_ENV)}
        t_start = time.monotonic()
        keep = False
        sub = None
        self.ray_tmpdir = isolate_ray_tmp()
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            self.state_dir = self.out / "state"
            if self.state_dir.exists():
                shutil.rmtree(self.state_dir)
            self.state_dir.mkdir()
        else:
            self.state_dir = Path(tempfile.mkdtemp(prefix="dlsched-chaos-"))
        try:
            t0 = time.monotonic()
            self.cluster = ChaosCluster(self.n_nodes, self.gpus_per_node, self.cpus_per_node)
            cluster_s = time.monotonic() - t0
            self.say(f"cluster of {self.n_nodes} nodes up in {cluster_s:.1f} s ({self.cluster.address})")
            env = ray_client_env({"address": self.cluster.address, "ray_tmpdir": self.ray_tmpdir})
            self.server = Server(self.cluster.address, self.state_dir, warm=self.warm, round_s=self.round_s, env=env)
            self.server.start()
            self.say(f"server up at {self.server.url}; {self.n_jobs} jobs over {self.plan[-1][0]:.0f} s")
            t_run = time.monotonic()
            deadline = t_run + self.timeout_s
            sub = threading.Thread(target=self.submitter, args=(t_run,), daemon=True, name="chaos-submit")
            sub.start()
            next_kill = t_run + float(self.script.uniform(*self.kill_every_s))
            last_check = 0.0
            while not self.stop.is_set():             # set when the server could not be restarted
                now = time.monotonic()
                if now > deadline:
                    js = self.jobs_now() or []
                    self.violation(f"timeout after {self.timeout_s:.0f} s: "
                                   f"{len(self.ids)}/{self.n_jobs} submitted, not final: "
                                   f"{[(j['job_id'], j['state']) for j in js if j['state'] not in FINAL][:20]}")
                    break
                if self.submitted.is_set() and now - last_check > 2.0:
                    last_check = now
                    js = self.jobs_now()
                    if js is not None and len(js) >= len(self.ids) and all(j["state"] in FINAL for j in js):
                        break
                if now >= next_kill and not (self.submitted.is_set() and not self._active()):
                    self.kill_once()
                    next_kill = max(next_kill + float(self.script.uniform(*self.kill_every_s)),
                                    time.monotonic() + self.kill_every_s[0] / 2)
                time.sleep(0.2)
            run_s = time.monotonic() - t_run
            self.stop.set()
            sub.join(30)
            if not self.server.healthy():
                self.violation("the server is down at the end: " + self.server.log_tail(2000))
                raise RuntimeError("chaos: the server is down at the end; violations: " + "\n".join(self.violations))
            self.check()
            res = self.figures(run_s, cluster_s, time.monotonic() - t_start)
            keep = bool(self.violations)
            return res
        except BaseException:
            keep = True
            raise
        finally:
            self.stop.set()
            if self.server is not None:
                try:
                    self.server.stop()
                except Exception:
                    pass
            if self.cluster is not None:
                try:
                    self.cluster.shutdown()
                except Exception:
                    pass
            left = ChaosCluster.sweep(self.ray_tmpdir)
            if left:
                self.say(f"killed {len(left)} leftover processes of this run's Ray: {left}")
            shutil.rmtree(self.ray_tmpdir, ignore_errors=True)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            if self.out is None and not keep:
                shutil.rmtree(self.state_dir, ignore_errors=True)
            elif keep:
                self.say(f"state (store, logs) kept in {self.state_dir}")

    def _active(self) -> bool:
        js = self.jobs_now()
        return js is None or any(j["state"] not in FINAL for j in js)


def run_chaos(jobs: int, nodes: int, seed: int, kill_every_s: tuple[float, float] = (8.0, 15.0),
              steps: tuple[int, int] = (20, 60), out: Path | None = None, *, step_s: float = 0.25,
              gpus_per_node: int = 2, cpus_per_node: int = 2, warm_per_node: int = 1, load: float = 0.8,
              round_s: float = 2.0, timeout_s: float | None = None, recovery_timeout_s: float = 180.0,
              verbose: bool = True) -> dict:
    """Run `jobs` jobs on a fresh `nodes`-node cluster under chaos (see the module docstring);
    returns the figures, with `violations` empty when every job ran exactly once, completely.
    `out`: a folder for the state dir (kept) and chaos.json; without it the state dir is a temp
    dir, removed unless something went wrong."""
    return _Chaos(jobs, nodes, seed, kill_every_s, steps, Path(out) if out is not None else None,
                  step_s=step_s, gpus_per_node=gpus_per_node, cpus_per_node=cpus_per_node,
                  warm_per_node=warm_per_node, load=load, round_s=round_s, timeout_s=timeout_s,
                  recovery_timeout_s=recovery_timeout_s, verbose=verbose).run()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="chaos run of the real runtime (see the module docstring)")
    ap.add_argument("--jobs", "--submissions-through-api", dest="jobs", type=int, default=60,
                    help="jobs to submit (each one a submission through the REST API)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kill-every-s", type=_kill_every, default=(8.0, 15.0),
                    help="seconds between kills: LO,HI (uniform), or X for X/2..3X/2")
    ap.add_argument("--steps", type=lambda v: tuple(int(x) for x in v.split(",")), default=(20, 60),
                    help="steps per job: LO,HI")
    ap.add_argument("--step-s", type=float, default=0.25)
    ap.add_argument("--load", type=float, default=0.8, help="mean fraction of the GPUs the arrivals ask for")
    ap.add_argument("--out", type=Path, default=None, help="folder for the state dir and chaos.json (kept)")
    ap.add_argument("--results", action="store_true", help="write the figures into benchmarks/RESULTS.md")
    ap.add_argument("--block", default="chaos", choices=("chaos", "soak"),
                    help="which block of RESULTS.md the figures go to (make soak: soak)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    res = run_chaos(a.jobs, a.nodes, a.seed, a.kill_every_s, a.steps, a.out, step_s=a.step_s, load=a.load,
                    verbose=not a.quiet)
    show = {k: v for k, v in res.items() if k != "kill_log"}
    print(json.dumps(show, indent=1))
    if a.results:
        args = list(argv if argv is not None else sys.argv[1:])
        for i, x in enumerate(args):          # where the files went is no part of the figures
            if x == "--out":
                del args[i:i + 2]
                break
            if x.startswith("--out="):
                del args[i]
                break
        cmd = "python benchmarks/chaos.py " + " ".join(args)
        lines = results_lines(res, cmd.strip())
        if a.block == "soak":
            lines[0] = "## Chaos soak (`make soak`, `benchmarks/chaos.py`)"
        path = update_results(a.block, lines)
        print(f"wrote {path}")
    return 1 if res["violations"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
