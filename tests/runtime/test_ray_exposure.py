"""The embedded Ray cluster of `dlsched up` exposes nothing: started the way `up` starts it (the
keeper, `python -m dlsched.runtime.cluster`, in its own session), with a client connected through
`ray_client_env` and one actor running (so that core-worker processes exist), no process of the
keeper's tree, nor the client's driver, listens on anything but loopback; the machine's other
addresses refuse connections to those ports; and Ray's token auth is on: a client without the
token, or with a wrong one, is refused. See docs/decisions/0017-nothing-exposed.md."""
from __future__ import annotations

import ipaddress
import json
import os
import selectors
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from dlsched.runtime.cluster import ray_client_env

try:
    import psutil
except ImportError:           # Ray vendors psutil (ray/thirdparty_files, put on sys.path by `import ray`)
    import ray  # noqa: F401
    import psutil

ALLOWED = {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}

CLIENT = textwrap.dedent("""
    import json, os, sys
    import ray
    ray.init(address=sys.argv[1], log_to_driver=False)

    @ray.remote(num_cpus=1)
    class Probe:
        def info(self):
            return os.getpid(), os.environ.get("GLOO_SOCKET_IFNAME")

    a = Probe.remote()
    pid, gloo = ray.get(a.info.remote(), timeout=60)
    print("PIDS", json.dumps({"actor": pid, "gloo": gloo, "driver": os.getpid()}), flush=True)
    sys.stdin.read()          # keep the driver and its actor alive until the test closes stdin
""")

PLAIN_CLIENT = textwrap.dedent("""
    import sys
    import ray
    try:
        ray.init(address=sys.argv[1], log_to_driver=False)
    except Exception as e:
        print("REFUSED", type(e).__name__, e, flush=True)
        sys.exit(3)
    print("CONNECTED", flush=True)
""")


def _on_loopback(ip: str) -> bool:
    a = ipaddress.ip_address(ip.split("%")[0])
    if a.version == 6 and a.ipv4_mapped is not None:   # gRPC's dual-stack sockets: ::ffff:127.0.0.1
        a = a.ipv4_mapped
    return a in ALLOWED


def _listening(pids: list[int]) -> list[tuple[int, str, str, int]]:
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            name = p.name()
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.append((pid, name, c.laddr.ip, c.laddr.port))
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    return out


def _other_addresses() -> list[str]:
    """This machine's addresses other than loopback (and link-local IPv6, which needs a scope)."""
    out = []
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            ip = ipaddress.ip_address(a.address.split("%")[0])
            if not ip.is_loopback and not ip.is_link_local:
                out.append(str(ip))
    return out


def _session(sid: int) -> list[int]:
    """Live processes of session `sid` (Ray's core workers make their own process groups)."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (OSError, psutil.Error):
            pass
    return out


def _stop(keeper: subprocess.Popen) -> None:
    """As `dlsched down`: SIGTERM to the keeper (it removes the nodes), then SIGKILL to its process
    group; and to whatever else is left of the session it leads (only processes started here)."""
    if keeper.poll() is None:
        keeper.send_signal(signal.SIGTERM)
        try:
            keeper.wait(40)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(keeper.pid, signal.SIGKILL)
    except OSError:
        pass
    deadline = time.monotonic() + 10
    while (left := _session(keeper.pid)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.2)
    keeper.wait(10)


def _read_marked(proc: subprocess.Popen, marker: str, timeout: float) -> str:
    """The rest of the first line of `proc`'s output that starts with `marker` (Ray logs around it)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        if sel.select(0.5):
            line = proc.stdout.readline()
            if line.startswith(marker):
                return line[len(marker):]
            if line:
                seen.append(line)
            elif proc.poll() is not None:
                break
    raise AssertionError(f"no {marker!r} line from the client (rc {proc.poll()}):\n" + "".join(seen)[-3000:])


def test_embedded_cluster_listens_on_loopback_only_and_requires_the_token(tmp_path: Path):
    t0 = time.monotonic()
    info_path = tmp_path / "cluster.json"
    log = open(tmp_path / "cluster.log", "wb")
    base_env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}   # it would override the address
    keeper = subprocess.Popen(
        [sys.executable, "-m", "dlsched.runtime.cluster", "--nodes", "2", "--gpus-per-node", "1",
         "--info", str(info_path)], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, env=base_env)
    client = None
    refused: list[subprocess.Popen] = []
    try:
        while not info_path.exists():
            assert keeper.poll() is None, (tmp_path / "cluster.log").read_text()[-3000:]
            assert time.monotonic() - t0 < 120, "the cluster did not start in 120 s"
            time.sleep(0.2)
        info = json.loads(info_path.read_text())
        host = info["address"].rsplit(":", 1)[0]
        assert host == "127.0.0.1", info

        # the token: a file next to the info file, readable by this user only
        token_file = Path(info["ray_token_file"])
        assert token_file.parent == info_path.parent and token_file.exists(), info
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        env = ray_client_env(info)
        assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN"] == token_file.read_text().strip()

        client = subprocess.Popen([sys.executable, "-c", CLIENT, info["address"]], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env={**base_env, **env})
        pids = json.loads(_read_marked(client, "PIDS ", 90))

        # clients without the token (Ray's default, auth off) and with a wrong one: refused by the
        # GCS (2 connection attempts instead of 20, so that this takes seconds, not 20 s)
        quick = {"RAY_gcs_server_port_wait_time_s": "2"}
        no_token = {k: v for k, v in {**base_env, **env, **quick}.items()
                    if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
        no_token["RAY_AUTH_MODE"] = "disabled"
        wrong = {**base_env, **env, **quick, "RAY_AUTH_TOKEN": "0" * 64}
        wrong.pop("RAY_AUTH_TOKEN_PATH")
        for e in (no_token, wrong):
            refused.append(subprocess.Popen([sys.executable, "-c", PLAIN_CLIENT, info["address"]],
                                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True, env=e))

        # every process of the cluster, with the actor up, and the client's driver
        tree = [keeper.pid] + [c.pid for c in psutil.Process(keeper.pid).children(recursive=True)]
        assert pids["actor"] in tree, "the actor's core worker is a descendant of the keeper"
        assert pids["gloo"] == "lo", "the jobs' collectives are told to stay on loopback"
        names = {psutil.Process(p).name() for p in tree if psutil.pid_exists(p)}
        assert {"gcs_server", "raylet"} <= names, names
        socks = _listening(tree + [pids["driver"]])
        kinds = {name for _, name, _, _ in socks}
        assert {"gcs_server", "raylet"} <= kinds and any("Probe" in k for k in kinds), socks
        exposed = [s for s in socks if not _on_loopback(s[2])]
        assert not exposed, f"listening beyond loopback (pid, name, ip, port): {exposed}"
        gcs_port = int(info["address"].rsplit(":", 1)[1])
        assert any(port == gcs_port for _, name, _, port in socks if name == "gcs_server")

        # from this machine's other addresses, every one of those ports refuses a connection
        for addr in _other_addresses():
            for _, name, _, port in socks:
                try:
                    with socket.create_connection((addr, port), timeout=2):
                        raise AssertionError(f"{name} port {port} accepted a connection on {addr}")
                except (ConnectionRefusedError, socket.timeout):
                    pass

        for p in refused:
            out, _ = p.communicate(timeout=60)
            assert p.returncode == 3 and "REFUSED" in out, out[-2000:]
            assert "InvalidAuthToken" in out, out[-2000:]        # refused for the token, not the network
    finally:
        for p in refused:
            if p.poll() is None:
                p.kill()
        if client is not None:
            if client.poll() is None:
                client.stdin.close()
                try:
                    client.wait(15)
                except subprocess.TimeoutExpired:
                    client.kill()
        _stop(keeper)
        log.close()
    assert not _session(keeper.pid), "processes of the cluster left behind"
    assert not token_file.exists(), "the keeper removes its token when the cluster goes down"
