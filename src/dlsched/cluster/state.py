"""ClusterState: the truth of what is free, in numpy arrays; Snapshot: what a round reads.

Contract
- `free` is (nodes x NRES) float64; `gpu_load` is (nodes x max_gpus) int32, the number of tasks
  using each GPU (more than 1 only when a policy over-subscribes GPUs, e.g. Gandiva packing).
- Only a Backend mutates a ClusterState (through `take` / `give`, when it applies a Plan or a
  node fails). Policies read a Snapshot, whose arrays are read-only copies; tentative changes
  go through a scheduler Transaction, never into these arrays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.cluster.topology import Cluster
from dlsched.core.types import GPU

_EPS = 1e-9


@dataclass(frozen=True)
class Snapshot:
    """Read-only view of the cluster's state at the start of a round."""
    cluster: Cluster
    free: np.ndarray        # (nodes x NRES)
    up: np.ndarray          # (nodes,) bool
    gpu_load: np.ndarray    # (nodes x max_gpus) int32; -1 marks GPU slots a node does not have
    now: float
    #: (nodes x max_gpus) float64: how much of each GPU its tasks hold (a fractional task its
    #: fraction, a task with k GPUs 1 on each); None when the backend does not say
    gpu_used: np.ndarray | None = None

    @property
    def capacity(self) -> np.ndarray:
        return self.cluster.capacity

    @property
    def num_nodes(self) -> int:
        return self.cluster.num_nodes


class ClusterState:
    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        # column-major, as a round's Transaction keeps it: a round that reserves nothing reads
        # this array itself (Transaction.free_view), with the same layout as the copy it makes
        self.free = np.array(cluster.capacity, dtype=np.float64, order="F")
        self.up = np.ones(cluster.num_nodes, dtype=bool)
        g = max(cluster.max_gpus_per_node, 1)
        self.gpu_load = np.zeros((cluster.num_nodes, g), dtype=np.int32)
        for n in cluster.nodes:
            self.gpu_load[n.node_id, n.gpus:] = -1
        self.gpu_used = np.zeros((cluster.num_nodes, g), dtype=np.float64)
        self._busy_gpus = 0   # GPUs with at least one task (kept by take/give)
        self._snap_fields: dict | None = None   # snapshot()'s read-only views of the arrays

    def snapshot(self, now: float) -> Snapshot:
        """Read-only views of the state, valid until the backend next changes it (the round that
        reads a snapshot ends before the backend applies its plan). A backend whose state may
        change concurrently (the real runtime) must pass copies instead."""
        fields = self._snap_fields
        if fields is None or fields["free"].base is not self.free or fields["up"].base is not self.up \
                or fields["gpu_load"].base is not self.gpu_load or fields["gpu_used"].base is not self.gpu_used:
            # the read-only views, made once: a view shows its array's current values
            free, up, load, used = self.free.view(), self.up.view(), self.gpu_load.view(), self.gpu_used.view()
            for a in (free, up, load, used):
                a.setflags(write=False)
            fields = self._snap_fields = {"cluster": self.cluster, "free": free, "up": up, "gpu_load": load,
                                          "gpu_used": used}
        # Snapshot(...) without the frozen dataclass's per-field object.__setattr__ (a snapshot
        # per round): the same fields
        snap = object.__new__(Snapshot)
        d = snap.__dict__
        d.update(fields)
        d["now"] = now
        return snap

    def take(self, node: int, demand: np.ndarray, gpu_ids: tuple[int, ...]) -> None:
        self.free[node] -= demand
        load = self.gpu_load[node]
        for g in gpu_ids:
            load[g] += 1
            if load[g] == 1:
                self._busy_gpus += 1
        if gpu_ids:
            share, used = demand[GPU] / len(gpu_ids), self.gpu_used[node]
            for g in gpu_ids:           # element by element: a fancy-indexed add costs 5x more
                used[g] += share

    def give(self, node: int, demand: np.ndarray, gpu_ids: tuple[int, ...]) -> None:
        self.free[node] += demand
        load = self.gpu_load[node]
        for g in gpu_ids:
            load[g] -= 1
            if load[g] == 0:
                self._busy_gpus -= 1
        if gpu_ids:
            share, used = demand[GPU] / len(gpu_ids), self.gpu_used[node]
            for g in gpu_ids:           # element by element: a fancy-indexed add costs 5x more
                used[g] -= share

    def allocated_gpus(self) -> float:
        """GPUs held (over-subscribed GPUs count once)."""
        return float(self._busy_gpus)

    def check(self) -> None:
        """Invariants: nothing over-allocated except GPUs that are explicitly shared."""
        cap = self.cluster.capacity
        over = self.free < -_EPS
        over[:, GPU] = False  # GPUs may be over-subscribed by packing; gpu_load tracks them
        if over.any():
            n = int(np.argwhere(over)[0][0])
            raise AssertionError(f"node {n} over-allocated: free {self.free[n]}")
        if (self.free > cap + 1e-6).any():
            raise AssertionError("free exceeds capacity")
        if self._busy_gpus != int((self.gpu_load > 0).sum()):
            raise AssertionError("busy GPU count out of step with gpu_load")
