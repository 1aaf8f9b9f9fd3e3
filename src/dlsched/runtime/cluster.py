"""The embedded Ray cluster of `dlsched up`: one head (no CPUs, no dashboard) and N virtual GPU
nodes labelled `node_name`, `rack`, `gpu_type`, kept by a small process (`python -m
dlsched.runtime.cluster`) so that the server can be stopped, killed and restarted while the
cluster and the jobs' rank workers live on. `dlsched down` stops that process, which shuts the
cluster down; its process group is killed afterwards so nothing is left behind.

Settings from the notes: Ray's temp dir short and private (RAY_TMPDIR; the AF_UNIX path limit, and
no stale `ray_current_cluster` shared with other clusters), small object stores, fast health checks
(a dead node is noticed in ~3 s, not 13-63 s).

Nothing is exposed (docs/decisions/0017-nothing-exposed.md): every node is started with
node_ip_address=127.0.0.1, which makes every Ray process of it (GCS, raylets' node and object
managers, dashboard agents' gRPC, HTTP and metrics ports, runtime-env agents, the autoscaler
monitor's and dashboard head's metrics ports, core workers) listen on loopback only. A client of
such a cluster needs RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 in its environment before `import ray`, or
`ray.init` rewrites 127.0.0.1 to the machine's outward address and never reaches the GCS. The
keeper (`main`) also turns Ray's token auth on, with a fresh random token in a 0600 file next to its
info file; `ray_client_env(info)` gives the environment a client process must have.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
import tempfile
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)
FAST_HEALTH = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000,
               "health_check_failure_threshold": 3}
OBJECT_STORE = 100 * 1024 ** 2
LOOPBACK = "127.0.0.1"
# Ray waits a fixed 30 s for a new node's raylet to register with the GCS, then raises this; on a
# loaded 2-core machine (CI: the other test worker busy) a node once took longer. start_cluster
# then starts the whole embedded cluster once more (START_TRIES in all).
SLOW_START = "timed out during startup"
START_TRIES = 2
# Ray rewrites a loopback address given to ray.init / services.get_node_ip_address to the address
# the machine routes outward with, unless this is "0" (read once, when `ray` is imported). The name
# is Ray's: "0" also makes `ray start --address` refuse to start (not used for the embedded cluster).
LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# the jobs' own collectives in the rank workers: gloo (and NCCL) listen on loopback as well
COLLECTIVES_ON_LOOPBACK = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}


def isolate_ray_tmp() -> str:
    """A short private Ray temp dir for this process and its children."""
    d = tempfile.mkdtemp(prefix="rdl", dir="/tmp")
    os.makedirs(os.path.join(d, "ray"), exist_ok=True)
    os.environ["RAY_TMPDIR"] = d
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ[LOCAL_ONLY_ENV] = "0"     # a loopback-only cluster: its clients must stay on loopback
    return d


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1")


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` readable by this user only (0600 from creation on, atomic replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)             # whatever the umask was
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def enable_token_auth(token_file: Path) -> Path:
    """Turn Ray's token auth on for this process and the Ray processes it starts: a fresh random
    token (256 bits, Ray's own format) in a 0600 file, found by Ray through RAY_AUTH_TOKEN_PATH.
    Call it before the cluster starts (before `import ray` is safest)."""
    write_private(token_file, secrets.token_hex(32))
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token_file)
    os.environ.pop("RAY_AUTH_TOKEN", None)     # it would win over the file
    import sys
    if "ray" in sys.modules:                   # Ray caches the mode and the token per process
        from ray._raylet import AuthenticationTokenLoader, Config
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    return token_file


def ray_client_env(info: dict) -> dict[str, str]:
    """The environment variables a process must have (before `import ray`) to be a client (e.g.
    `ray.init(address=info["address"])`) of the cluster described by `info`, the keeper's info JSON:
    the auth mode and token, the private Ray temp dir, and, for a loopback-only cluster, the switch
    that keeps Ray from rewriting 127.0.0.1 to the machine's outward address."""
    env: dict[str, str] = {}
    if info.get("ray_tmpdir"):
        env["RAY_TMPDIR"] = str(info["ray_tmpdir"])
    if "ray_token_file" in info:             # the keeper's info: auth as the keeper set it up
        tf = info["ray_token_file"]
        if tf:   # the token itself too: an inherited RAY_AUTH_TOKEN (another cluster's) would win over the file
            env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=Path(tf).read_text().strip(),
                       RAY_AUTH_TOKEN_PATH=str(tf))
        else:                                 # a keeper started with --no-auth
            env["RAY_AUTH_MODE"] = "disabled"
    # else (e.g. {"address": "HEAD:6379"} of a real cluster): auth is the caller's RAY_AUTH_* environment
    if _is_loopback(str(info.get("address", ""))):
        env[LOCAL_ONLY_ENV] = "0"
    return env


def node_labels(i: int, nodes_per_rack: int, gpu_type: str) -> dict:
    return {"node_name": f"n{i}", "rack": f"r{i // max(nodes_per_rack, 1)}", "gpu_type": gpu_type}


def start_cluster(nodes: int, gpus_per_node: int, *, cpus_per_node: int = 2, gpu_type: str | tuple = "fake-gpu",
                  nodes_per_rack: int = 2):
    """Head + `nodes` virtual GPU nodes, every process listening on 127.0.0.1 only. Each node
    declares a slot per GPU (`dlsched_gpu_<i>`: GPU sharing, dlsched.runtime.shares). Auth follows
    RAY_AUTH_MODE of this process (the keeper sets token; the test fixtures run it disabled).
    Sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 in this process's environment, so that the clients it
    starts (e.g. a `dlsched server --ray-address 127.0.0.1:...`) inherit it. `gpu_type`: every
    node's, or a tuple of types taken in turn (node i gets gpu_type[i % len]: a cluster of
    several GPU types)."""
    os.environ[LOCAL_ONLY_ENV] = "0"     # for this process and its children: clients stay on loopback
    for attempt in range(START_TRIES):
        try:
            return _start_once(nodes, gpus_per_node, cpus_per_node, gpu_type, nodes_per_rack)
        except Exception as e:           # (Ray raises a bare Exception for it)
            if attempt + 1 == START_TRIES or SLOW_START not in str(e):
                raise
            log.warning("a Ray node %s; the embedded cluster starts again", SLOW_START)


def _start_once(nodes: int, gpus_per_node: int, cpus_per_node: int, gpu_type, nodes_per_rack: int):
    """One try of start_cluster; a node that does not start shuts down the nodes started before."""
    from ray.cluster_utils import Cluster

    from dlsched.runtime.shares import gpu_slot_resources
    # node_ip_address=127.0.0.1 is what Ray 2.60 keys loopback binding on: the C++ gRPC servers
    # (GCS, node manager, object manager, core workers) listen on 127.0.0.1 instead of [::], the
    # Python agents and metrics servers on 127.0.0.1 instead of 0.0.0.0 or the outward address.
    # The rank workers get COLLECTIVES_ON_LOOPBACK from their raylet's environment (env_vars).
    c = Cluster(initialize_head=True, head_node_args=dict(
        node_ip_address=LOOPBACK, dashboard_host=LOOPBACK, include_dashboard=False,
        env_vars=dict(COLLECTIVES_ON_LOOPBACK),
        num_cpus=0, object_store_memory=OBJECT_STORE, _system_config=FAST_HEALTH))
    try:
        for i in range(nodes):
            c.add_node(node_ip_address=LOOPBACK, env_vars=dict(COLLECTIVES_ON_LOOPBACK), num_cpus=cpus_per_node,
                       num_gpus=gpus_per_node, resources=gpu_slot_resources(gpus_per_node),
                       object_store_memory=OBJECT_STORE,
                       labels=node_labels(i, nodes_per_rack, gpu_type if isinstance(gpu_type, str) else gpu_type[i % len(gpu_type)]))
    except BaseException:
        c.shutdown()
        raise
    return c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="keep an embedded Ray cluster of virtual GPU nodes up")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=2)
    ap.add_argument("--cpus-per-node", type=int, default=2)
    ap.add_argument("--gpu-type", default="fake-gpu")
    ap.add_argument("--nodes-per-rack", type=int, default=2)
    ap.add_argument("--info", required=True, help="JSON file to write the address to")
    ap.add_argument("--no-auth", action="store_true", help="leave Ray's token auth off (loopback only still)")
    a = ap.parse_args(argv)
    info = Path(a.info)
    tmp = isolate_ray_tmp()
    token_file = None if a.no_auth else enable_token_auth(info.parent / "ray_token")
    stop = threading.Event()
    c = start_cluster(a.nodes, a.gpus_per_node, cpus_per_node=a.cpus_per_node, gpu_type=a.gpu_type,
                      nodes_per_rack=a.nodes_per_rack)
    # after the cluster: Ray's head node installs its own SIGTERM handler (30 s of draining)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    t = info.with_suffix(".tmp")
    t.write_text(json.dumps({"address": c.address, "pid": os.getpid(), "ray_tmpdir": tmp,
                             "nodes": a.nodes, "gpus_per_node": a.gpus_per_node,
                             "ray_token_file": str(token_file) if token_file else None}))
    t.replace(info)
    while not stop.wait(1.0):
        pass
    try:
        t0 = time.monotonic()
        for n in list(c.worker_nodes):       # the jobs' state is in checkpoints: no grace needed
            c.remove_node(n, allow_graceful=False)
        print(f"worker nodes removed in {time.monotonic() - t0:.1f} s", flush=True)
        c.remove_node(c.head_node, allow_graceful=False)
        print(f"cluster down in {time.monotonic() - t0:.1f} s", flush=True)
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
        if token_file is not None:             # a new cluster gets a new token
            token_file.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


class LocalRay:
    """A local cluster of virtual GPU nodes (`start_cluster`) in a private Ray temp dir, as a
    context manager: on exit the cluster is shut down, the temp dir removed and the Ray
    environment variables this process had are put back (tests, experiments)."""
    _ENV = ("RAY_TMPDIR", "RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED", LOCAL_ONLY_ENV)

    def __init__(self, nodes: int, gpus_per_node: int, **kw) -> None:
        self.args, self.kw = (nodes, gpus_per_node), kw

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self._ENV}
        self.tmp = isolate_ray_tmp()
        self.cluster = start_cluster(*self.args, **self.kw)
        self.address = self.cluster.address
        return self

    def __exit__(self, *exc) -> None:
        import shutil
        try:
            self.cluster.shutdown()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
            for k, v in self.saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

