"""The Ray nodes the runtime runs on: discovery at start, the cluster the scheduler sees, and the
node monitor thread that reports nodes going and coming back (Ray has no push API for membership).

The topology is read once, at start (`discover_nodes` -> `cluster_of`): nodes that join later are
not used. The monitor only watches the nodes found then, by name, and puts its changes on the
backend's queue; the scheduler thread applies them (`RayBackend._on_node`).
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

from dlsched.cluster.topology import Cluster
from dlsched.core.types import NodeSpec
from dlsched.runtime.shares import has_gpu_slots

NODE_ID_LABEL = "ray.io/node-id"


@dataclass
class NodeInfo:
    name: str
    ray_id: str
    rack: str
    gpu_type: str
    gpus: int
    cpus: float
    mem_gb: float
    gpu_slots: bool = False     # declares dlsched_gpu_<i> for each of its GPUs (shares.py)


def node_name(n: dict) -> str:
    """A Ray node's name: its `node_name` label, else its host name and the head of its id."""
    lab = n.get("Labels") or {}
    return lab.get("node_name") or f"{n.get('NodeManagerHostname', 'node')}-{n['NodeID'][:6]}"


def discover_nodes() -> list[NodeInfo]:
    """Alive Ray nodes that can run ranks (any CPU or GPU), by name. Names, racks and GPU types
    come from the node labels `node_name`, `rack`, `gpu_type` (set with `ray start --labels`);
    GPU sharing needs the per-GPU slots `dlsched_gpu_<i>` (`ray start --resources`, shares.py)."""
    import ray
    out: dict[str, NodeInfo] = {}
    for n in ray.nodes():
        res, lab = n.get("Resources", {}), n.get("Labels", {}) or {}
        if not n.get("Alive") or (res.get("GPU", 0) <= 0 and res.get("CPU", 0) <= 0):
            continue
        name = node_name(n)
        gpus = int(res.get("GPU", 0))
        out[name] = NodeInfo(name, n["NodeID"], lab.get("rack", "r0"),
                             lab.get("gpu_type", "gpu" if gpus else "none"), gpus,
                             float(res.get("CPU", 0)), float(res.get("memory", 0)) / 1e9,
                             has_gpu_slots(res, gpus))
    return [out[k] for k in sorted(out)]


def cluster_of(nodes: list[NodeInfo], name: str = "ray") -> Cluster:
    racks: dict[str, int] = {}
    specs = []
    for i, n in enumerate(nodes):
        rid = racks.setdefault(n.rack, len(racks))
        specs.append(NodeSpec(node_id=i, name=n.name, rack=rid, domain=0, gpus=n.gpus,
                              gpu_type=n.gpu_type, gpu_mem_gb=16.0 if n.gpus else 0.0, cpus=n.cpus,
                              mem_gb=n.mem_gb, disk_mbps=1000.0, nic_gbps=10.0, gpu_link_gbps=100.0))
    return Cluster(name=name, nodes=tuple(specs), rack_names=tuple(racks),
                   rack_domain=tuple(0 for _ in racks), rack_uplink_gbps=tuple(100.0 for _ in racks),
                   domain_names=("d0",))


class NodeMonitor:
    """The node monitor thread's loop: polls `ray.nodes()` every `poll_s` and queues
    `("node", (index, up, ray id), None, t)` for each change of a node in `nodes` (a node that
    came back under a new Ray id before it was seen gone is queued as down, then up). It reads
    `nodes` (the backend's list, whose `ray_id`s the scheduler thread updates) and writes only
    its own `reported`."""

    def __init__(self, ray, nodes: list[NodeInfo], q: queue.Queue, closing: threading.Event,
                 poll_s: float):
        self.ray, self.nodes, self.q, self.closing, self.poll_s = ray, nodes, q, closing, poll_s
        self.reported: dict[int, tuple] = {}    # node -> (up, ray id) the monitor last queued

    def run(self) -> None:
        while not self.closing.wait(self.poll_s):
            try:
                alive = {}
                for n in self.ray.nodes():
                    name = node_name(n)
                    if n.get("Alive"):
                        alive[name] = n["NodeID"]
            except Exception:
                continue
            for i, info in enumerate(self.nodes):
                up = info.name in alive
                now = (up, alive.get(info.name))
                # compared with what was last queued, not with the scheduler thread's view: a
                # thread busy for a while (a start waiting on a new worker) must not get the same
                # change queued at every poll
                last = self.reported.get(i, (True, info.ray_id))
                if now == last:
                    continue
                self.reported[i] = now
                if up and last[0]:
                    # the node came back under a new Ray id before we saw it go
                    self.q.put(("node", (i, False, None), None, time.perf_counter()))
                self.q.put(("node", (i, up, now[1]), None, time.perf_counter()))
