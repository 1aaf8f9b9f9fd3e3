"""GPU sharing on Ray: how the runtime makes Ray admit exactly what dlsched's ledger holds, GPU id
by GPU id, so that two (or more) jobs can run on one GPU the policy chose, and no job is put on
a GPU that the ledger says is in use by another.

The problem. Ray's own `GPU` resource is counted per GPU *instance*, and Ray picks the instance:
a bundle `{"GPU": 1}` takes some whole GPU, `{"GPU": 0.5}` half of some GPU (best fit, Ray's
choice), and an amount above 1 must be whole. Two jobs the policy packed onto GPU 3 may be put on
two different instances by Ray, or refused because the first job's whole-GPU bundle holds the
instance; after a few packs and unpacks Ray's idea of which GPUs are free drifts from the
ledger's, and a placement the ledger allows is refused (or the reverse). And Ray never knows which
GPU a rank really uses: the runtime sets CUDA_VISIBLE_DEVICES itself from the policy's ids.

The scheme: per-GPU slots that mirror the ledger.
- Every node declares one custom resource per GPU, `dlsched_gpu_<i>` = 1 for i < its GPU count
  (`gpu_slot_resources`; the embedded cluster of `dlsched up` and the test fixtures do it; on a
  cluster started by hand: `ray start --num-gpus 4 --resources '{"dlsched_gpu_0": 1,
  "dlsched_gpu_1": 1, "dlsched_gpu_2": 1, "dlsched_gpu_3": 1}'`). Only dlsched asks for them.
- A rank placed on GPU ids G of node n reserves, in its bundle (pinned to n), for each g in G
  `dlsched_gpu_<g>: share(L)`, where L is the ledger's gpu_load of (n, g) (how many tasks use
  it, this one included) and share(L) = 1/L rounded down to Ray's precision (1e-4). The bundle
  also holds the rank's CPUs; it does not ask for Ray's `GPU` (the slots replace it).
- So a GPU in use is always full in Ray (L x share(L) <= 1, within 1e-4 of it): an exclusive
  rank (L = 1) holds its GPUs whole, and Ray admits nothing else on them; a GPU shared by L
  tasks is held 1/L by each. A rank with several GPUs names each of them (one amount per
  resource, never above 1), so Ray's rule that an amount above 1 be whole never applies, and a
  multi-GPU rank can share some of its GPUs and hold others alone.
- When the ledger's load of a GPU changes, the reservations of the other runs on it change with
  it (`_sync_shares`): before a run starts, the runs already on its GPUs shrink to their new,
  smaller share (then the new run's group fits); after a run stops (finish, suspend, migrate,
  resize, failure, cancel) the runs left on its GPUs grow back (a job alone again holds its GPU
  whole again). A change is a new placement group under the same name (remove, wait until Ray
  shows the resources free, create, wait: 0.05-0.1 s measured); the ranks keep running (they live in the pool's workers, not in the group:
  the group only books the resources). A run whose group could not be made again keeps running
  without one (logged, event `reservation_lost`) and is tried again at the next change.
- Ray's admission is then exactly the ledger's, by GPU id: the policy decides how many jobs share
  a GPU (Gandiva's max_jobs, max_load) and the runtime carries it out up to that number; packing
  beyond what the ledger holds, or an exclusive job onto a GPU in use, is refused by Ray as well
  (the placement group is not ready in pg_timeout_s, the start fails and the job is requeued).
- The packed flag of a decision does not change what is reserved: the ledger's load does. A
  non-packed over-subscription (gandiva-reactive) shares exactly as a packed Launch does.

Fallback. A node without the slots gets the old bundles (`GPU`: the task's demand, Ray's choice
of instance); a cluster whose GPU nodes do not all declare them at the server's start gets a
backend without the "gpu_sharing" capability (a profile that shares GPUs is refused at start,
with the `ray start --resources` to fix it). A node that comes back without its slots (restarted
by hand without `--resources`) is used with the old bundles, logged, event `no_gpu_slots`.

Not covered: Ray's own `GPU` resource is not booked by dlsched's groups any more when the slots
are there, so another Ray workload on the same cluster could ask Ray for a GPU that dlsched uses
(dlsched expects to own its cluster). Ray does no memory or compute isolation on a shared GPU:
the policy must pack only jobs that fit (Gandiva's memory and utilisation checks).

`SharesMixin` is a mixin of `RayBackend` (see there why): it reads the ledger (`state`), the runs
and the nodes, and (re)creates the runs' placement groups. Scheduler thread only.
"""
from __future__ import annotations

import logging
import math
import time

from dlsched.core.types import GPU

log = logging.getLogger("dlsched.runtime")

SLOT_PREFIX = "dlsched_gpu_"
PRECISION = 10_000            # Ray's resource amounts are fixed point, 1e-4


def gpu_slot(g: int) -> str:
    """The custom resource of GPU `g` of a node."""
    return f"{SLOT_PREFIX}{int(g)}"


def gpu_slot_resources(gpus: int) -> dict[str, float]:
    """The resources a node with `gpus` GPUs declares (besides num_gpus) for GPU sharing."""
    return {gpu_slot(i): 1.0 for i in range(int(gpus))}


def has_gpu_slots(resources: dict, gpus: int) -> bool:
    """Does a node with these Ray resources declare a whole slot for each of its GPUs?"""
    return all(float(resources.get(gpu_slot(i), 0.0)) >= 1.0 - 1e-9 for i in range(int(gpus)))


def share(load: int) -> float:
    """What one of `load` tasks on a GPU reserves of its slot: 1/load, rounded down to Ray's
    precision (so `load` of them never exceed the slot)."""
    load = max(int(load), 1)
    return math.floor(PRECISION / load) / PRECISION


def bundle(task, gpu_ids, loads, *, slots: bool) -> dict[str, float]:
    """One rank's bundle: its CPUs, and for each of its GPUs the share the ledger's load
    (`loads[g]`) gives it (slots), or Ray's `GPU` for its demand (fallback)."""
    b: dict[str, float] = {}
    if slots:
        for g in gpu_ids:
            b[gpu_slot(g)] = share(loads[g])
    elif task.demand[GPU] > 0:
        b["GPU"] = float(task.demand[GPU])
    b["CPU"] = max(float(task.demand[1]), 0.01)
    return b


def _shrinks(old, new) -> bool:
    """Does `new` ask for no more of anything than `old` (so it fits where `old` was)?"""
    if old is None or len(old) != len(new):
        return False
    return all(all(v <= o.get(k, 0.0) + 1e-9 for k, v in n.items()) for o, n in zip(old, new))


class SharesMixin:
    def _bundles(self, run) -> list[dict]:
        """The bundles `run` must hold now, in rank order (the ledger's loads as they are; Ray's
        GPU on a node without the slots)."""
        load = self.state.gpu_load
        return [bundle(run.tasks[tp.task], tp.gpu_ids, load[tp.node], slots=self.nodes[tp.node].gpu_slots)
                for tp in run.placements]

    def _check_slots(self, node: int) -> None:
        """A node came back (under a new Ray id): does it still declare its slots? One that does
        not (restarted without `--resources`) gets Ray's GPU in its bundles, as before the slots:
        its jobs run, but Ray cannot enforce GPU sharing there (logged, event `no_gpu_slots`)."""
        n = self.nodes[node]
        try:
            res = next(x.get("Resources", {}) for x in self.ray.nodes() if x.get("NodeID") == n.ray_id)
        except Exception:               # not listed (yet): keep what it had
            return
        had, n.gpu_slots = n.gpu_slots, has_gpu_slots(res, n.gpus)
        if had and not n.gpu_slots:
            log.warning("node %s came back without its per-GPU slots dlsched_gpu_<i>: its groups book "
                        "Ray's GPU instead, and GPU sharing on it is not enforced by Ray", n.name)
            self.store.event("", "no_gpu_slots", n.name)

    def _reserve(self, run) -> bool:
        """Create `run`'s placement group (`dlsched-pg-<job>`, one bundle per rank pinned to its
        node) with the bundles the ledger gives it now; True when Ray admitted it in
        pg_timeout_s, else nothing is left behind."""
        from ray.util.placement_group import placement_group, remove_placement_group

        from dlsched.runtime.nodes import NODE_ID_LABEL
        bundles = self._bundles(run)
        name = f"dlsched-pg-{run.job_id}"
        self._remove_pg_named(name)
        pg = placement_group(bundles, strategy="PACK", name=name, lifetime="detached",
                             bundle_label_selector=[{NODE_ID_LABEL: self.nodes[tp.node].ray_id}
                                                    for tp in run.placements])
        if not pg.wait(self.pg_timeout_s):
            try:
                remove_placement_group(pg)
            except Exception:
                pass
            run.pg, run.amounts = None, None
            return False
        run.pg, run.amounts = pg, bundles
        return True

    def _sync_shares(self, gpus, *, skip: str | None = None) -> None:
        """The ledger's load of `gpus` ((node, gpu id) pairs) changed: the runs on them (but
        `skip`) reserve their new shares, those that shrink first (they make room for the
        others). Runs on nodes that are down are left alone (they are being torn down)."""
        if not gpus or self._closing.is_set():
            return                     # (closing: kill_all tears every run down anyway)
        gpus = set(gpus)
        todo = []
        for run in list(self.runs.values()):
            if run.job_id == skip or not any((tp.node, g) in gpus for tp in run.placements for g in tp.gpu_ids):
                continue
            if not all(self.state.up[tp.node] for tp in run.placements):
                continue
            want = self._bundles(run)
            if want != run.amounts:
                todo.append((not _shrinks(run.amounts, want), run))
        for _, run in sorted(todo, key=lambda x: x[0]):
            self._rereserve(run)

    def _release(self, run, wait_s: float = 2.0) -> None:
        """Remove `run`'s group and wait (at most `wait_s`) until Ray shows its resources free
        again: a group created on them before that is retried by Ray only a second later
        (measured: 1.0 s instead of 0.1 s), and a time-slice switch or a re-booking creates one
        right away. No wait when a node of the run is down (its resources do not come back)."""
        from ray.util.placement_group import remove_placement_group
        pg, amounts = run.pg, run.amounts
        run.pg = run.amounts = None
        if pg is None:
            return
        ray = self.ray
        wait = amounts is not None and all(self.state.up[tp.node] for tp in run.placements)
        want: dict[str, float] = {}
        if wait:
            try:
                before = ray.available_resources()
            except Exception:
                wait, before = False, {}
            for b in amounts:
                for k, v in b.items():
                    want[k] = want.get(k, before.get(k, 0.0)) + v
        try:
            remove_placement_group(pg)
        except Exception:
            return
        t_end = time.monotonic() + wait_s
        while wait and time.monotonic() < t_end:
            try:
                now = ray.available_resources()
            except Exception:
                return
            if all(now.get(k, 0.0) >= v - 1e-6 for k, v in want.items()):
                return
            time.sleep(0.005)

    def _rereserve(self, run) -> None:
        old, t0 = run.amounts, time.perf_counter()
        self._release(run)
        if self._reserve(run):
            log.info("job %s: %s: GPU shares %s -> %s in %.3f s", run.job_id, run.run_id, _fmt(old),
                     _fmt(run.amounts), time.perf_counter() - t0)
            self.store.event(run.job_id, "gpu_shares", _fmt(run.amounts))
        else:
            log.warning("job %s: %s: its GPU shares could not be booked in Ray again (%s); it keeps "
                        "running without a reservation", run.job_id, run.run_id, _fmt(self._bundles(run)))
            self.store.event(run.job_id, "reservation_lost", _fmt(self._bundles(run)))

    def _run_gpus(self, placements) -> set:
        return {(tp.node, g) for tp in placements for g in tp.gpu_ids}


def _fmt(bundles) -> str:
    if not bundles:
        return "none"
    return "; ".join(", ".join(f"{k}={v:g}" for k, v in sorted(b.items()) if k != "CPU") or "no GPU"
                     for b in bundles)
