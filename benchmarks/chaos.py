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
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import update_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENTRY = ROOT / "tests" / "runtime" / "plugins" / "chaos_job.py"
KINDS = ("server", "worker", "node")
CHECKPOINT_EVERY = 5
FINAL = ("done", "failed", "cancelled", "rejected")


def _psutil():
    try:
        import psutil
    except ImportError:           # Ray ships its own copy (ray/thirdparty_files), on sys.path after `import ray`
        import ray  # noqa: F401
        import psutil
    return psutil


def _has_env(p, key: str, value: str) -> bool:
    """Whether process `p` was started with key=value in its environment. /proc is read raw:
    Ray's processes set their title over argv, which blanks the start of the environ block and
    stops psutil's parser."""
    needle = f"{key}={value}".encode()
    try:
        with open(f"/proc/{p.pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:                                # gone, not ours, or no /proc
        if not os.path.isdir("/proc/self"):        # no /proc (macOS): psutil's view
            return p.environ().get(key) == value
        return False


def stack_dump(pid: int) -> str:
    """Every thread's Python stack of a live process (py-spy, which Ray installs), or why not."""
    exe = Path(sys.executable).with_name("py-spy")
    exe = str(exe) if exe.exists() else shutil.which("py-spy")
    if not exe:
        return "(no py-spy to dump the stacks)"
    try:
        r = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
        return r.stdout + r.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"(py-spy failed: {e})"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Say:
    def __init__(self, verbose: bool):
        self.verbose, self.t0 = verbose, time.monotonic()

    def __call__(self, msg: str) -> None:
        if self.verbose:
            print(f"[chaos {time.monotonic() - self.t0:7.1f} s] {msg}", file=sys.stderr, flush=True)


class Server:
    """A `dlsched server` subprocess (its own session) on a fixed port, and an API client."""

    def __init__(self, address: str, state_dir: Path, *, namespace: str = "chaos", warm: int = 1,
                 round_s: float = 2.0, env: dict | None = None):
        self.address, self.state_dir, self.namespace = address, state_dir, namespace
        self.warm, self.round_s = warm, round_s
        self.env = dict(env or {})
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.token = ""
        self.http = httpx.Client(timeout=30)
        self.starts = 0

    def start(self, timeout: float = 180.0) -> float:
        """Start and wait for /health; returns the seconds it took."""
        t0 = time.monotonic()
        log = open(self.state_dir / "server.log", "ab")
        log.write(f"\n=== chaos: server start {self.starts + 1} at {time.strftime('%H:%M:%S')} ===\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dlsched.cli.main", "server", "--ray-address", self.address,
             "--state-dir", str(self.state_dir), "--policy", "fifo", "--port", str(self.port),
             "--namespace", self.namespace, "--warm-per-node", str(self.warm), "--round-s", str(self.round_s),
             "--cleanup-on-exit"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "DLSCHED_STATE_DIR": str(self.state_dir), **self.env})
        log.close()
        self.starts += 1
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.healthy():
                break
            if time.monotonic() - t0 > timeout:
                self.kill_group()
                raise RuntimeError(f"server did not answer /health in {timeout:g} s:\n{self.log_tail()}")
            time.sleep(0.1)
        self.token = (self.state_dir / "token").read_text().strip()
        return time.monotonic() - t0

    def healthy(self) -> bool:
        try:
            return self.http.get(self.url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def _h(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str, **params):
        r = self.http.get(self.url + path, params=params or None, headers=self._h())
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body=None) -> httpx.Response:
        return self.http.post(self.url + path, json=body, headers=self._h())

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM (the server stops its jobs and workers: --cleanup-on-exit), then SIGKILL its group."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                pass
        self.kill_group()
        self.http.close()

    def log_tail(self, n: int = 4000) -> str:
        p = self.state_dir / "server.log"
        return p.read_text(errors="replace")[-n:] if p.exists() else ""


class ChaosCluster:
    """The Ray cluster of this run, with the node kills and the process look-ups chaos needs."""

    def __init__(self, nodes: int, gpus_per_node: int, cpus_per_node: int):
        from dlsched.runtime.cluster import start_cluster
        self.c = start_cluster(nodes, gpus_per_node, cpus_per_node=cpus_per_node)
        self.nodes = {self._name(n): n for n in self.c.worker_nodes}

    @staticmethod
    def _name(node) -> str:
        return dict(node._ray_params.labels or {})["node_name"]

    @property
    def address(self) -> str:
        return self.c.address

    def raylet_pids(self, head: bool = False) -> dict[str, int]:
        """Node name -> its raylet's pid (the head's as "" with head=True)."""
        from ray._private import ray_constants
        out = {}
        nodes = dict(self.nodes)
        if head and self.c.head_node is not None:
            nodes[""] = self.c.head_node
        for name, n in nodes.items():
            procs = n.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET) or []
            if procs:
                out[name] = procs[0].process.pid
        return out

    def rank_workers(self) -> dict[int, str]:
        """pid -> node name of every RankWorker process under this cluster's raylets."""
        psutil = _psutil()
        out = {}
        for name, pid in self.raylet_pids().items():
            try:
                kids = psutil.Process(pid).children(recursive=True)
            except psutil.Error:
                continue
            for p in kids:
                try:
                    if "RankWorker" in " ".join(p.cmdline()):
                        out[p.pid] = name
                except psutil.Error:
                    pass
        return out

    def stray_rank_workers(self, ray_tmpdir: str) -> list[int]:
        """RankWorker processes of this cluster (by their RAY_TMPDIR) not under a live raylet."""
        psutil = _psutil()
        mine = set(self.rank_workers())
        out = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if p.pid in mine or "RankWorker" not in " ".join(p.info["cmdline"] or ()):
                    continue
                if _has_env(p, "RAY_TMPDIR", ray_tmpdir) and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p.pid)
            except psutil.Error:
                pass
        return out

    def _descendants(self, names) -> list:
        psutil = _psutil()
        pids = self.raylet_pids(head=True)
        out = []
        for name in names:
            try:
                out += psutil.Process(pids[name]).children(recursive=True)
            except (KeyError, psutil.Error):
                pass
        return out

    @staticmethod
    def _kill_survivors(procs) -> list[int]:
        """SIGKILL what is left of `procs` (a node's processes: Ray's agents outlive a raylet
        killed by ray.cluster_utils, a real dead node keeps nothing); returns the RankWorker pids."""
        psutil = _psutil()
        ranks = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    if "RankWorker" in " ".join(p.cmdline()):
                        ranks.append(p.pid)
                    p.kill()
            except psutil.Error:
                pass
        return ranks

    def kill_node(self, name: str) -> tuple[dict, list[int]]:
        """Remove the node at once (every process on it killed); returns what re-adds it, and
        the rank worker processes that were still alive after Ray removed the node."""
        n = self.nodes[name]
        procs = self._descendants([name])
        p = n._ray_params
        again = dict(node_ip_address=p.node_ip_address, num_cpus=p.num_cpus, num_gpus=p.num_gpus,
                     object_store_memory=p.object_store_memory, labels=dict(p.labels or {}),
                     resources=dict(p.resources or {}),          # its per-GPU resources (GPU sharing)
                     env_vars=dict(p.env_vars or {}))            # as start_cluster made it
        del self.nodes[name]
        self.c.remove_node(n, allow_graceful=False)
        time.sleep(1.0)                          # the node's processes see their raylet gone
        return again, self._kill_survivors(procs)

    def add_node(self, args: dict) -> None:
        # a node joining gives up on the GCS after about 20 s by default; on a loaded machine
        # (CI: two suites on two cores) the head may be slower to answer right after a kill,
        # and the re-add failed with "Failed to connect to GCS": wait up to 60 s (an operator's
        # own setting wins)
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "60")
        n = self.c.add_node(**args)
        self.nodes[self._name(n)] = n

    def shutdown(self) -> None:
        procs = self._descendants([*self.nodes, ""])
        for n in list(self.c.worker_nodes):
            try:
                self.c.remove_node(n, allow_graceful=False)
            except Exception:
                pass
        if self.c.head_node is not None:
            try:
                self.c.remove_node(self.c.head_node, allow_graceful=False)
            except Exception:
                pass
        self.c.shutdown()
        self._kill_survivors(procs)

    @staticmethod
    def sweep(ray_tmpdir: str) -> list[str]:
        """SIGKILL every process left with this run's private RAY_TMPDIR (only this run's)."""
        psutil = _psutil()
        out = []
        for p in psutil.process_iter(["pid"]):
            try:
                if p.pid != os.getpid() and _has_env(p, "RAY_TMPDIR", ray_tmpdir) \
                        and p.status() != psutil.STATUS_ZOMBIE:
                    name = " ".join(p.cmdline())[:60]
                    p.kill()
                    out.append(f"{p.pid} {name}")
            except psutil.Error:
                pass
        return out


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


def _summary(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0, "median": None, "max": None}
    return {"n": len(xs), "median": round(statistics.median(xs), 3), "max": round(max(xs), 3)}


class _Chaos:
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

    # -- kills ---------------------------------------------------------------------------------
    def _wait(self, cond, what: str) -> float | None:
        """The monotonic time at which cond() held (polled), or None (a violation) after the
        recovery timeout."""
        t0 = time.monotonic()
        while True:
            try:
                if cond():
                    return time.monotonic()
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            if time.monotonic() - t0 > self.recovery_timeout_s:
                self.violation(f"no recovery in {self.recovery_timeout_s:g} s: {what}" + self._stuck())
                return None
            time.sleep(0.2)

    def _stuck(self) -> str:
        """After a recovery timeout: dump the server's stacks (kept in the state dir), then kill
        -9 and restart it so the run can go on (counted in `forced_restarts`)."""
        self.forced_restarts += 1
        p = self.state_dir / f"stuck-server-{self.forced_restarts}.txt"
        p.write_text(stack_dump(self.server.proc.pid))
        try:
            self.server.kill9()
            self.server.start()
        except Exception as e:               # noqa: BLE001 (reported, and the run stops)
            self.stop.set()
            return f"; server stacks in {p}; the server did not restart: {e}"
        return f"; server stacks in {p}; server restarted"

    def _job(self, job_id: str) -> dict:
        return self.server.get(f"/jobs/{job_id}")

    def kill_server(self, running: dict[str, dict]) -> dict:
        before = sorted(running)
        pid = self.server.proc.pid
        t0, t_kill = time.monotonic(), time.time()
        self.server.kill9()
        try:
            up_s = self.server.start()
        except RuntimeError as e:
            self.violation(f"server did not come back after kill -9: {e}")
            raise
        t_up = time.monotonic() - t0

        def ok():              # each job re-attached (or requeued and started again) by the new server
            for j in before:
                d = self._job(j)
                if d["state"] == "done":
                    continue
                if d["state"] != "running" or not any(
                        e["kind"] in ("reattached", "started") and e["time"] >= t_kill
                        for e in self.server.get(f"/jobs/{j}/events")):
                    return False
            return True
        t_ok = self._wait(ok, f"server kill: jobs {before} running again")
        return {"target": f"server pid {pid}", "affected": before,
                "server_up_s": round(t_up, 3), "server_start_s": round(up_s, 3),
                "recovery_s": None if t_ok is None else round(t_ok - t0, 3)}

    def _rerun(self, attempts: dict[str, int]):
        def ok():
            for j, a in attempts.items():
                d = self._job(j)
                if d["state"] == "done":
                    continue
                if d["state"] != "running" or d["attempts"] <= a:
                    return False
            return True
        return ok

    def kill_worker(self, running: dict[str, dict]) -> dict | None:
        workers = ChaosCluster.rank_workers(self.cluster)
        busy = []
        for j, d in sorted(running.items()):
            for a in d["allocation"]:
                pid = self._rank_pid(j, a["rank"], a["run_id"])
                if pid is not None and pid in workers:
                    busy.append((j, a["rank"], a["node"], pid, d["attempts"]))
        if not busy:
            return None
        j, rank, node, pid, attempts = busy[int(self.pick.integers(len(busy)))]
        t0 = time.monotonic()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        t_ok = self._wait(self._rerun({j: attempts}), f"worker kill: {j} running again")
        return {"target": f"{j} rank {rank} on {node} (pid {pid})", "affected": [j],
                "recovery_s": None if t_ok is None else round(t_ok - t0, 3)}

    def kill_node(self, running: dict[str, dict], readd_after: float = 3.0) -> dict:
        busy = sorted({a["node"] for d in running.values() for a in d["allocation"]} & set(self.cluster.nodes))
        names = busy or sorted(self.cluster.nodes)
        name = names[int(self.pick.integers(len(names)))]
        affected = {j: d["attempts"] for j, d in running.items() if any(a["node"] == name for a in d["allocation"])}
        old_id = self.cluster.nodes[name].node_id

        def node_back() -> bool:
            return any(n["name"] == name and n["up"] and n["ray_id"] != old_id for n in self.server.get("/nodes"))
        t0 = time.monotonic()
        args, survivors = self.cluster.kill_node(name)
        removed_s = time.monotonic() - t0
        if survivors:
            self.say(f"node kill {name}: rank worker processes {survivors} outlived the raylet by 1 s (killed)")
        time.sleep(max(0.0, readd_after - removed_s))
        self.cluster.add_node(args)
        back_s = time.monotonic() - t0
        if affected:
            cond, what = self._rerun(affected), f"node kill {name}: jobs {sorted(affected)} running again"
        else:
            cond, what = node_back, f"node kill {name}: node back in /nodes"
        t_ok = self._wait(cond, what)
        t_up = self._wait(node_back, f"node {name} back in /nodes")
        return {"target": f"node {name}", "affected": sorted(affected), "removed_s": round(removed_s, 3),
                "rank_survivors": len(survivors),
                "readded_s": round(back_s, 3),
                "node_up_s": None if t_up is None else round(t_up - t0, 3),
                "recovery_s": None if t_ok is None else round(t_ok - t0, 3)}

    def kill_once(self) -> None:
        if not self._kinds:                   # every kind once per three kills, in a random order
            self._kinds = [str(k) for k in self.script.permutation(KINDS)]
        kind = self._kinds.pop(0)
        readd_after = float(self.script.uniform(2.0, 5.0))     # drawn every time: the script stays fixed
        running = self.running()
        order = {"worker": ("worker", "node", "server"), "node": ("node",), "server": ("server",)}[kind]
        for k in order:
            t_wall = time.time()
            res = self.kill_node(running, readd_after) if k == "node" else getattr(self, f"kill_{k}")(running)
            if res is not None:
                res.update(kind=k, drawn=kind, time=t_wall, running_jobs=len(running))
                self.kills.append(res)
                self.say(f"kill {k}: {res['target']}, affected {res['affected']}, recovery {res['recovery_s']} s")
                return

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

    def check(self) -> None:
        s = self.server
        js = s.get("/jobs")
        by_name: dict[str, list[dict]] = {}
        for j in js:
            by_name.setdefault(j["name"], []).append(j)
        self.final = js
        for _, spec in self.plan:
            name = spec["name"]
            got = by_name.get(name, [])
            if name not in self.ids and not got:
                self.violation(f"{name}: never submitted (submitter stopped)")
                continue
            if len(got) != 1:
                self.violation(f"{name}: {len(got)} jobs in the store ({[g['job_id'] for g in got]})")
                if not got:
                    continue
            j = got[0]
            jid, n = j["job_id"], spec["iterations"]
            if self.ids.get(name) not in (None, jid):
                self.violation(f"{name}: submitted as {self.ids[name]}, the store has {jid}")
            if j["state"] != "done":
                self.violation(f"{jid} ({name}): state {j['state']} ({j['reason']})")
            st = s.get(f"/jobs/{jid}/stats", since=-1, limit=1_000_000)
            steps = [r["step"] for r in st]
            if steps != list(range(n)):
                missing = sorted(set(range(n)) - set(steps))
                extra = sorted(set(steps) - set(range(n)))
                self.violation(f"{jid}: stats cover {len(steps)} steps, not 0..{n - 1}: missing {missing[:20]}, "
                               f"extra {extra[:20]}")
            bad = [(r["step"], r.get("counter")) for r in st if r.get("counter") != r["step"] + 1]
            if bad:
                self.violation(f"{jid}: loss curve broken: (step, counter) {bad[:10]} ({len(bad)} steps)")
            split = [r["step"] for r in st if r.get("agree") != 1.0]
            if split:
                self.violation(f"{jid}: ranks disagreed on the counter at steps {split[:10]}")
            ev = s.get(f"/jobs/{jid}/events")
            fin = sum(1 for e in ev if e["kind"] == "finished")
            if fin != 1:
                self.violation(f"{jid}: 'finished' {fin} times in its events")
        unknown = [j["job_id"] for j in js if j["name"] not in {sp["name"] for _, sp in self.plan}]
        if unknown:
            self.violation(f"jobs nobody submitted: {unknown}")
        stray = self.cluster.stray_rank_workers(self.ray_tmpdir)
        if stray:
            self.violation(f"rank worker processes outside any live raylet at the end: {stray}")

    def figures(self, run_s: float, cluster_s: float, wall_s: float) -> dict:
        by_kind = {k: [x for x in self.kills if x["kind"] == k] for k in KINDS}
        done = sum(1 for j in self.final if j["state"] == "done")
        attempts = [j["attempts"] for j in self.final]
        res = {
            "jobs": self.n_jobs, "nodes": self.n_nodes, "gpus_per_node": self.gpus_per_node, "seed": self.seed,
            "kill_every_s": list(self.kill_every_s), "steps": list(self.steps), "step_s": self.step_s,
            "load": self.load, "submitted": len(self.ids), "done": done,
            "kills": {k: len(v) for k, v in by_kind.items()} | {"total": len(self.kills)},
            "recovery_s": {k: _summary([x["recovery_s"] for x in v if x["recovery_s"] is not None])
                           for k, v in by_kind.items()},
            "server_up_s": _summary([x["server_up_s"] for x in by_kind["server"]]),
            "node_up_s": _summary([x["node_up_s"] for x in by_kind["node"] if x["node_up_s"] is not None]),
            "jobs_hit": len({j for x in self.kills for j in x["affected"]}),
            "attempts": {"total": int(sum(attempts)), "max": int(max(attempts, default=0)),
                         "jobs_restarted": sum(1 for a in attempts if a > 1)},
            "submit_retries": self.submit_retries, "server_starts": self.server.starts,
            "forced_restarts": self.forced_restarts,
            "cluster_s": round(cluster_s, 1), "run_s": round(run_s, 1), "wall_s": round(wall_s, 1),
            "violations": list(self.violations), "kill_log": self.kills,
            "state_dir": str(self.state_dir) if (self.out is not None or self.violations) else None,
        }
        if self.out is not None:
            (self.out / "chaos.json").write_text(json.dumps(res, indent=1))
        return res


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


def _fmt(s: dict) -> str:
    return "-" if not s["n"] else f"{s['median']:.2f} | {s['max']:.2f}"


def results_lines(res: dict, command: str) -> list[str]:
    k, r, up = res["kills"], res["recovery_s"], res["server_up_s"]
    lines = [
        "## Chaos (`benchmarks/chaos.py`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"Ray {__import__('ray').__version__}, with `{command}`: {res['jobs']} jobs "
        f"(tests/runtime/plugins/chaos_job.py, 1-2 ranks, {res['steps'][0]}-{res['steps'][1]} steps of "
        f"{res['step_s']:g} s, a checkpoint every {CHECKPOINT_EVERY} steps) submitted through the REST API to a "
        f"`dlsched server` (fifo) on a local Ray cluster of {res['nodes']} nodes x {res['gpus_per_node']} GPUs, "
        f"while a seeded script (seed {res['seed']}) killed something every "
        f"{res['kill_every_s'][0]:g}-{res['kill_every_s'][1]:g} s.",
        "",
        "| kill | count | recovery median (s) | recovery max (s) |",
        "| --- | --- | --- | --- |",
        f"| server (kill -9, restart) | {k['server']} | {_fmt(r['server'])} |",
        f"| rank worker (kill -9) | {k['worker']} | {_fmt(r['worker'])} |",
        f"| node (removed, added back after 2-5 s) | {k['node']} | {_fmt(r['node'])} |",
        "",
        f"Jobs done: {res['done']} of {res['jobs']} ({res['jobs_hit']} hit by a kill, "
        f"{res['attempts']['jobs_restarted']} restarted, {res['attempts']['total']} runs in all); "
        f"wall time {res['run_s']:.0f} s (+ {res['cluster_s']:.0f} s cluster start). Violations: "
        + ("none (every job done once, every step recorded once, continuous loss curves)." if not res["violations"]
           else f"{len(res['violations'])}: " + "; ".join(v[:200] for v in res["violations"][:5])),
        "",
        "Recovery: server: kill -> /health answers and every job running before the kill is running "
        "again under the new server (re-attached or started again) or done; worker: kill -> the broken "
        "job runs again (its next attempt); node: kill -> the jobs that had ranks on it run again."
        + (f" The server's restart alone (imports, Ray connect, recovery) took {up['median']:.2f} s median, "
           f"{up['max']:.2f} s max." if up["n"] else ""),
    ]
    return lines


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
