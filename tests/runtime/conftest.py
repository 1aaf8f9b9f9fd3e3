"""The runtime tests' fixtures: one real local Ray cluster per test session (4 virtual GPU nodes,
fixed CPUs, small object stores, no dashboard, fast health checks, a private short temp dir), and
one real `dlsched server` process against it (`runtime.server`), which tests may kill (SIGKILL)
and restart, with the same or another policy, on the same SQLite store. A restarted server adopts
the warm rank workers of the previous one, so the session pays for their start-up once."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
NODES, GPUS = 4, 2


@pytest.fixture(scope="session")
def chromium() -> str:
    """Headless Chromium for the browser tests (headless.py). Session scope, and listed before
    `runtime` in a test's arguments: a missing browser skips before the cluster starts, and
    fails in CI (CI=true), so CI cannot pass without running the browser tests."""
    from headless import find_chromium
    return required_tool(find_chromium(), "headless Chromium not found (install it with `make browser` or "
                                          "`apt-get install chromium`)")


def required_tool(exe: str | None, missing: str) -> str:
    """A system tool a test needs (the Makefile installs it): its path, or a skip naming how to
    install it; in CI (CI=true) a failure instead, so CI cannot pass without the test."""
    if exe:
        return exe
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(missing + "; CI must run this test")
    pytest.skip(missing)


@pytest.fixture(scope="session")
def ray_cluster():
    """A 4-node cluster (2 virtual GPUs, 2 CPUs each) kept by this test process."""
    from dlsched.runtime.cluster import LocalRay
    with LocalRay(NODES, GPUS, cpus_per_node=2) as r:
        yield r.cluster


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProc:
    """A `dlsched server` subprocess and a client for its API."""

    def __init__(self, address: str, state_dir: Path, policy: str, namespace: str, warm: int = 1,
                 extra: list[str] | None = None, env: dict | None = None):
        self.address, self.state_dir, self.policy, self.namespace, self.warm = address, state_dir, policy, namespace, warm
        self.extra, self.env = list(extra or []), dict(env or {})
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self, timeout: float = 120.0) -> "ServerProc":
        log = open(self.state_dir / f"server-{self.port}.log", "ab")
        self.proc = subprocess.Popen(
            self.cmd(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "DLSCHED_STATE_DIR": str(self.state_dir), **self.env})
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise AssertionError("server exited:\n" + self.log_tail())
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > timeout:        # never leave a stuck server behind
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
                raise AssertionError("server did not start:\n" + self.log_tail())
            time.sleep(0.3)
        self.token = (self.state_dir / "token").read_text().strip()
        return self

    def cmd(self) -> list[str]:
        return [sys.executable, "-m", "dlsched.cli.main", "server", "--ray-address", self.address,
                "--state-dir", str(self.state_dir), "--policy", self.policy, "--port", str(self.port),
                "--namespace", self.namespace, "--warm-per-node", str(self.warm), *self.extra]

    def log_tail(self, n: int = 4000) -> str:
        """The last n characters of this server's own log (servers restarted on one store
        share its folder; each writes its own file)."""
        p = self.state_dir / f"server-{self.port}.log"
        return p.read_text(errors="replace")[-n:] if p.exists() else ""

    def get(self, path: str, **kw):
        r = httpx.get(self.url + path, timeout=60, headers={"Authorization": f"Bearer {self.token}"}, **kw)
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body=None, token: str | None = "default"):
        tok = self.token if token == "default" else token
        headers = {"Authorization": f"Bearer {tok}"} if tok else {}
        return httpx.post(self.url + path, json=body, headers=headers, timeout=120)

    def cli(self, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        r = subprocess.run([sys.executable, "-m", "dlsched.cli.main", *args, "--url", self.url],
                           capture_output=True, text=True, timeout=180,
                           env={**os.environ, "DLSCHED_STATE_DIR": str(self.state_dir), **(env or {})})
        if check:
            assert r.returncode == 0, r.stdout + r.stderr
        return r

    def submit(self, spec: dict) -> str:
        r = self.post("/jobs", {"spec": spec})
        assert r.status_code == 201, r.text
        return r.json()["job_id"]

    def wait(self, job_id: str, cond, timeout: float = 120.0, what: str = "") -> dict:
        t0 = time.monotonic()
        while True:
            j = self.get(f"/jobs/{job_id}")
            if cond(j):
                return j
            assert j["state"] not in ("failed",) or "failed" in what, f"{job_id} failed: {j['error']}"
            assert time.monotonic() - t0 < timeout, f"timeout waiting for {what or cond}: {json.dumps(j)[:2000]}\n{self.log_tail()}"
            time.sleep(0.2)

    def wait_state(self, job_id: str, state: str, timeout: float = 120.0) -> dict:
        return self.wait(job_id, lambda j: j["state"] == state, timeout, what=state)

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


class Runtime:
    def __init__(self, cluster, state_dir: Path):
        self.cluster, self.state_dir = cluster, state_dir
        self.server = ServerProc(cluster.address, state_dir, "fifo", "t").start()

    def restart(self, policy: str | None = None, kill: bool = False, extra: list[str] | None = None) -> ServerProc:
        """Stop (SIGTERM, or SIGKILL with kill=True) and start a server on the same store (with
        `extra` command-line arguments)."""
        old = self.server
        old.kill9() if kill else old.stop()
        self.server = ServerProc(self.cluster.address, self.state_dir, policy or old.policy, "t",
                                 extra=extra).start()
        return self.server

    def ensure(self, policy: str, extra: list[str] | None = None) -> ServerProc:
        """The running server when it has `policy` and exactly the `extra` arguments, else a
        restart with them (a restart costs seconds)."""
        s = self.server
        if s.policy == policy and s.extra == list(extra or []) and s.proc is not None and s.proc.poll() is None:
            return s
        return self.restart(policy=policy, extra=extra)


@pytest.fixture(scope="session")
def runtime(ray_cluster):
    # its own temp dir: pytest prunes old tmp_path bases when other pytest runs start
    import tempfile
    sd = Path(tempfile.mkdtemp(prefix="dlsched-test-"))
    rt = Runtime(ray_cluster, sd)
    try:
        yield rt
    finally:
        rt.server.stop()
        shutil.rmtree(sd, ignore_errors=True)


def digits_spec(**over) -> dict:
    spec = {"name": "digits", "entry": str(EXAMPLES / "allreduce_digits.py"),
            "args": {"hidden": 32, "lr": 0.1, "seed": 0}, "workers": 2, "gpus_per_worker": 1,
            "batch_size": 64, "iterations": 120, "checkpoint_every": 10}
    spec.update(over)
    return spec


def ps_spec(**over) -> dict:
    spec = {"name": "ps", "entry": str(EXAMPLES / "ps_synthetic.py"), "args": {"lr": 0.05, "seed": 1},
            "workers": 2, "ps": 1, "gpus_per_worker": 1, "batch_size": 128, "iterations": 60,
            "checkpoint_every": 20}
    spec.update(over)
    return spec


def resized_runs(s: ServerProc, job_id: str) -> list[tuple[float, float, int]]:
    """(start, stop, steps recorded in between) of every run of the job that was stopped for a
    resize, from its events and its step records (wall-clock times both)."""
    out, start = [], None
    times = [r["time"] for r in s.get(f"/jobs/{job_id}/stats")]
    for e in s.get(f"/jobs/{job_id}/events"):
        if e["kind"] in ("started", "reattached"):
            start = e["time"]
        elif e["kind"] == "stopped" and start is not None:
            if e["detail"].startswith("resizing"):
                out.append((start, e["time"], sum(start <= t <= e["time"] for t in times)))
            start = None
    return out


# The two-team queue tree of the tenancy tests (test_runtime_tenancy.py, test_runtime_queues.py):
# one file in the session's folder, so a server started by one serves the other (no restart)
TEAM_QUEUES = """\
queues:
  - name: team-a
    quotas:
      gpu: {nominal: 4}
  - name: team-b
    quotas:
      gpu: {nominal: 4}
"""


def team_queues_server(runtime) -> "ServerProc":
    """The server with TEAM_QUEUES (kueue): the running one if it has them, else a restart."""
    qf = runtime.state_dir.parent / f"{runtime.state_dir.name}-team-queues.yaml"
    if not qf.exists():
        qf.write_text(TEAM_QUEUES)
    return runtime.ensure("fifo", extra=["--queues", str(qf), "--tenancy", "kueue"])


def wait_until(pred, what: str, timeout: float = 150.0):
    """pred()'s first truthy value, polled every 0.5 s; AssertionError naming `what` after `timeout`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")
