"""The infrastructure of the chaos run (benchmarks/chaos.py): the `dlsched server` subprocess
and its API client (Server), this run's local Ray cluster with its node kills and process look-ups
(ChaosCluster), the stack dump of a stuck server, and the constants the chaos modules share.

A library of chaos.py, not a script (tests/integration/test_benchmarks_smoke.py: LIBRARIES)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

KINDS = ("server", "worker", "node")     # what a kill hits (chaos_kills.py; the figures count each)
CHECKPOINT_EVERY = 5                     # the jobs' checkpoint interval in steps (chaos.py's workload)


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
