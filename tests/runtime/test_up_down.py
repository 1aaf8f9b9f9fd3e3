"""`dlsched up` / `down` as a user runs them: a typo refused before anything starts, nothing
listening beyond loopback, a second `up` refused while a server holds the state dir (even one
restarted by hand), and `down` stopping whatever the state dir names."""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import psutil

from conftest import _free_port


def dl(*args, env, timeout=240):
    return subprocess.run([sys.executable, "-m", "dlsched.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def tree(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def loopback(ip: str) -> bool:
    a = ipaddress.ip_address(ip.split("%")[0])
    return (a.ipv4_mapped or a).is_loopback if a.version == 6 else a.is_loopback


def listening(procs) -> list[tuple[str, int, str]]:
    out = []
    for p in procs:
        try:
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.append((c.laddr.ip, c.laddr.port, " ".join(p.cmdline()[:3])[:80]))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def test_up_down_lifecycle(tmp_path):
    sd = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["DLSCHED_STATE_DIR"] = str(sd)
    r = dl("up", "--policy", "fifo-gnag", env=env)
    assert r.returncode == 2 and "unknown policy 'fifo-gnag'" in r.stderr and "fifo-gang" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (sd / "up.json").exists()
    r = dl("up", "--nodes", "0", env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    port = _free_port()
    r = dl("up", "--nodes", "2", "--gpus-per-node", "1", "--port", str(port), "--warm-per-node", "0", env=env)
    logs = sd / "logs"
    assert r.returncode == 0, r.stdout + r.stderr + "".join(
        f"\n--- {p.name}:\n" + p.read_text(errors="replace")[-4000:] for p in sorted(logs.glob("*.log")))
    up = json.loads((sd / "up.json").read_text())
    try:
        procs = tree(up["keeper_pid"]) + tree(up["server_pid"])
        assert len(procs) > 5
        exposed = [x for x in listening(procs) if not loopback(x[0])]
        assert not exposed, exposed
        assert any(x[1] == port and loopback(x[0]) for x in listening(procs))
        # a second up on the same state dir names the running server
        r = dl("up", "--port", str(_free_port()), env=env)
        assert r.returncode == 2 and f"pid {up['server_pid']}" in r.stderr, r.stderr
        # kill -9 the server, restart it by hand: up refuses, down stops it and the cluster
        os.kill(up["server_pid"], signal.SIGKILL)
        hand = subprocess.Popen([sys.executable, "-m", "dlsched.cli.main", "server", "--port", str(port)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env, start_new_session=True)
        t0 = time.monotonic()
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()["pid"] == hand.pid:
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            assert hand.poll() is None and time.monotonic() - t0 < 120
            time.sleep(0.5)
        r = dl("up", "--port", str(_free_port()), env=env)
        assert r.returncode == 2 and f"pid {hand.pid}" in r.stderr, r.stderr
        r = dl("down", env=env)
        assert r.returncode == 0 and f"server (pid {hand.pid})" in r.stdout and "cluster" in r.stdout, r.stdout
        hand.wait(30)
        time.sleep(1)
        assert not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not (sd / "up.json").exists()
        r = dl("down", env=env)
        assert r.returncode == 0 and "nothing to stop" in r.stdout
    finally:
        for pid in (up.get("server_pid"), up.get("keeper_pid")):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
