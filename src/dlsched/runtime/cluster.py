"""The embedded Ray cluster of `dlsched up`: one head (no CPUs, no dashboard) and N virtual GPU
nodes labelled `node_name`, `rack`, `gpu_type`, kept by a small process (`python -m
dlsched.runtime.cluster`) so that the server can be stopped, killed and restarted while the
cluster and the jobs' rank workers live on. `dlsched down` stops that process, which shuts the
cluster down; its process group is killed afterwards so nothing is left behind.

Settings from the notes: Ray's temp dir short and private (RAY_TMPDIR; the AF_UNIX path limit, and
no stale `ray_current_cluster` shared with other clusters), token auth off, small object stores,
fast health checks (a dead node is noticed in ~3 s, not 13-63 s).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

FAST_HEALTH = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000,
               "health_check_failure_threshold": 3}
OBJECT_STORE = 100 * 1024 ** 2


def isolate_ray_tmp() -> str:
    """A short private Ray temp dir for this process and its children."""
    d = tempfile.mkdtemp(prefix="rdl", dir="/tmp")
    os.makedirs(os.path.join(d, "ray"), exist_ok=True)
    os.environ["RAY_TMPDIR"] = d
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return d


def node_labels(i: int, nodes_per_rack: int, gpu_type: str) -> dict:
    return {"node_name": f"n{i}", "rack": f"r{i // max(nodes_per_rack, 1)}", "gpu_type": gpu_type}


def start_cluster(nodes: int, gpus_per_node: int, *, cpus_per_node: int = 2, gpu_type: str = "fake-gpu",
                  nodes_per_rack: int = 2):
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=0, include_dashboard=False, object_store_memory=OBJECT_STORE, _system_config=FAST_HEALTH))
    for i in range(nodes):
        c.add_node(num_cpus=cpus_per_node, num_gpus=gpus_per_node, object_store_memory=OBJECT_STORE,
                   labels=node_labels(i, nodes_per_rack, gpu_type))
    return c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="keep an embedded Ray cluster of virtual GPU nodes up")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=2)
    ap.add_argument("--cpus-per-node", type=int, default=2)
    ap.add_argument("--gpu-type", default="fake-gpu")
    ap.add_argument("--nodes-per-rack", type=int, default=2)
    ap.add_argument("--info", required=True, help="JSON file to write the address to")
    a = ap.parse_args(argv)
    tmp = isolate_ray_tmp()
    stop = threading.Event()
    c = start_cluster(a.nodes, a.gpus_per_node, cpus_per_node=a.cpus_per_node, gpu_type=a.gpu_type,
                      nodes_per_rack=a.nodes_per_rack)
    # after the cluster: Ray's head node installs its own SIGTERM handler (30 s of draining)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    info = Path(a.info)
    t = info.with_suffix(".tmp")
    t.write_text(json.dumps({"address": c.address, "pid": os.getpid(), "ray_tmpdir": tmp,
                             "nodes": a.nodes, "gpus_per_node": a.gpus_per_node}))
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
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
