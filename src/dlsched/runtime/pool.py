"""The warm rank-worker pool (seed 003's pre-scheduling).

Ranks run in detached, named `RankWorker` actors (`w-<node>-<n>`, `num_cpus=0`, pinned by node
label) that outlive jobs: a finished, suspended or migrated job hands its workers back to its
node's pool, and each live node keeps `target[node]` idle workers, refilled in the background, so
a start does not wait for a new process and a torch import. A restarted server adopts the workers
of its namespace by name.

`WorkerPool` owns every worker handle this backend knows (`handles`: idle ones and those running
a rank) and the idle lists (`idle`: node -> names); the backend exposes both as `handles` and
`pool`. It reads the backend's `nodes`, `state.up` and `suspect_until` (never rebound) to know
which nodes are live. Scheduler thread only.
"""
from __future__ import annotations

import time

import numpy as np

from dlsched.cluster.state import ClusterState
from dlsched.runtime.nodes import NODE_ID_LABEL, NodeInfo

# Modules a new rank worker imports before its first job (torch always): the examples' needs.
WARM_IMPORTS = ("torch.nn.parallel", "torch.optim", "sklearn.datasets")


class WorkerPool:
    def __init__(self, ray, namespace: str, nodes: list[NodeInfo], node_idx: dict[str, int],
                 state: ClusterState, suspect_until: np.ndarray, warm_imports: tuple[str, ...],
                 target: dict[int, int]):
        self.ray, self.namespace = ray, namespace
        self.nodes, self.node_idx = nodes, node_idx
        self.state, self.suspect_until = state, suspect_until
        self.warm_imports = tuple(warm_imports)
        self.target = target                    # node -> idle workers to keep
        self.handles: dict[str, object] = {}
        self.idle: dict[int, list[str]] = {i: [] for i in range(len(nodes))}
        self._ping: dict[str, object] = {}     # worker -> its first ping (ready when it is up)
        self.programs: dict[str, set[str]] = {}  # worker -> programs loaded in it (sdk.program_key)
        self._seq = 0

    def _remote_cls(self):
        from dlsched.runtime.worker import RankWorker
        return self.ray.remote(RankWorker)

    def new(self, node: int) -> str:
        n = self.nodes[node]
        for _ in range(1000):
            self._seq += 1
            name = f"w-{n.name}-{self._seq}"
            if name in self.handles:
                continue
            try:
                h = self._remote_cls().options(
                    name=name, namespace=self.namespace, lifetime="detached", num_cpus=0, max_concurrency=16,
                    label_selector={NODE_ID_LABEL: n.ray_id}).remote(n.name, self.warm_imports)
                break
            except ValueError as e:      # the name is taken (another server of this namespace)
                if "already taken" not in str(e):
                    raise
        else:
            raise RuntimeError(f"no free rank worker name on {n.name} in namespace {self.namespace}")
        self.handles[name] = h
        self._ping[name] = h.ping.remote()
        return name

    def refill(self) -> None:
        """Keep `target` idle workers per live node (a killed or retired worker is replaced
        in the background, so the next start does not wait for a new process)."""
        now = time.time()
        for i in range(len(self.nodes)):
            if self.state.up[i] and self.suspect_until[i] <= now:
                while len(self.idle[i]) < self.target[i]:
                    self.idle[i].append(self.new(i))

    def take(self, node: int, program: str | None = None) -> str:
        """An idle worker of `node`: one that has `program` loaded (sdk.program_key; pre-scheduled,
        or it ran it before) first, then one whose process is up; a new one if none is idle."""
        lst = self.idle[node]
        if not lst:
            w = self.new(node)
        else:
            pings = {self._ping[w]: w for w in lst if w in self._ping}
            up = [w for w in lst if w not in self._ping]
            if pings:
                ready, _ = self.ray.wait(list(pings), num_returns=len(pings), timeout=0)
                up += [pings[r] for r in ready]
            warm = [w for w in up if program in self.programs.get(w, ())]
            w = (warm or up or lst)[0]
            lst.remove(w)
        if program is not None:
            self.programs.setdefault(w, set()).add(program)
        return w

    def preload(self, node: int, entry: str, args: dict, n: int, saving: list[str] = ()) -> list[str]:
        """Have `n` workers of `node` with `entry` loaded: its imports and its `prepare(args)`
        (dataset); seed 003's pre-scheduling, the next job's launch while the GPUs it will get
        are still saving. `saving`: the workers of that node whose run is saving (they return to
        the pool when it ends, so they are asked first: a worker loads in a thread of its own,
        beside the checkpoint), then idle ones. No worker is started for it: a new process would
        be up later than the save ends. Returns the workers asked."""
        from dlsched.runtime.sdk import program_key
        key = program_key(entry, args)
        cands = [w for w in (*saving, *self.idle[node]) if w in self.handles]
        have = sum(1 for w in cands if key in self.programs.get(w, ()))
        out = [w for w in cands if key not in self.programs.get(w, ())][:max(n - have, 0)]
        for w in out:
            self.handles[w].preload.remote(entry, args)
            self.programs.setdefault(w, set()).add(key)
        return out

    def ready(self, node: int) -> int:
        """Pool workers of `node` whose process is up (torch imported)."""
        refs = [self._ping[w] for w in self.idle[node] if w in self._ping]
        adopted = sum(1 for w in self.idle[node] if w not in self._ping)   # answered when adopted
        if not refs:
            return adopted
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        return len(ready) + adopted

    def adopt(self) -> None:
        """Find the workers a previous server left (by name); idle ones join the pool."""
        ray = self.ray
        names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if a.get("namespace") == self.namespace and a["name"].startswith("w-")]
        for name in names:
            seq = name.rsplit("-", 1)[-1]
            if seq.isdigit():           # never reuse a name, even of a worker not adopted
                self._seq = max(self._seq, int(seq))
            try:
                h = ray.get_actor(name, namespace=self.namespace)
                ping = h.ping.remote()
                info = ray.get(ping, timeout=5)
            except ray.exceptions.GetTimeoutError:
                # still starting (its constructor imports torch): idle, and ready when its
                # ping answers; its node is in its name
                node = self.node_idx.get(name[2:].rsplit("-", 1)[0])
                if node is not None:
                    self.handles[name], self._ping[name] = h, ping
                    self.idle[node].append(name)
                continue
            except Exception:
                continue
            node = self.node_idx.get(info["node"])
            if node is None:
                continue
            self.handles[name] = h
            try:
                st = ray.get(h.status.remote(), timeout=5)
            except Exception:
                continue
            if st["state"] == "idle":
                self.idle[node].append(name)

    def release(self, name: str, node: int, reusable: bool) -> None:
        h = self.handles.get(name)
        if h is None:
            return
        if reusable and self.state.up[node]:
            h.release.remote()
            self.idle[node].append(name)
        else:
            self.kill(name)

    def kill(self, name: str) -> None:
        h = self.handles.pop(name, None)
        self._ping.pop(name, None)
        self.programs.pop(name, None)
        if h is not None:
            try:
                self.ray.kill(h, no_restart=True)
            except Exception:
                pass
        for lst in self.idle.values():
            if name in lst:
                lst.remove(name)
