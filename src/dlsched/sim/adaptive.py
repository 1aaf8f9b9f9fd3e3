"""Goodput-charged progress: how the simulator runs a Pollux job whose batch size the job itself
picks at run time (Pollux's simulator semantics, petuum/adaptdl osdi21-artifact
`simulator/simulator.py` `Job.step` and `Job.update_local_bsz`; the code is ours).

The hook. A `Resize` may carry an `adapt` object (dlsched.core.types.Resize.adapt, None for
every other policy); the backend keeps it on the job's run (JobRun.adapt) and from then on asks
it, instead of the speed model, for the job's profile each time the job is re-rated
(sim/rates.py `_refresh`). A job without one runs as before, so no other policy's event log
changes.

What `GoodputProgress` charges. The job's work stays counted in iterations of the batch it was
submitted with (B_req, trained as `measured.trained_batch`): the workload reader sets
iterations = sum over epochs e < E of (P(e+1) - P(e)) / gain(B_req, e), P the application's
progress curve (`workload/efficiency.py`). Those iterations are cut at the epoch boundaries
c_0 = 0 < c_1 < ... < c_E = iterations. In epoch e a job on placement (GPUs per node) that
trains with global batch M = N x m x (s + 1):

    progress per second   = gain(M, e) / T,   T = step(m) + s x (step(m) - sync(m))
                            (measured step and sync times at atomic batch m, as Pollux's Job.step)
    request iterations /s = gain(M, e) / T / (gain(B_req, e) x scale)

where scale = iterations / (the unrounded sum), so that the request iterations of epoch e are
worth exactly its progress. The rate is constant within an epoch; the run pushes a re-rate at
the epoch's end (`boundary`), where the job picks its batch again, as Pollux's job does between
epochs. The batch is picked with the job's goodput model (`choose`: the best (m, s) of
`goodput.best_batch` at (nodes, replicas) with the gradient statistics of the batch it trained
last and the current epoch, the atomic batch then clamped to floor(M_max / (N (s + 1)))).

Interference (Pollux's `--interference x`, `simulator.py` `Simulator.step`): where `interference`
is set (the allocator's parameter of that name), a job on more than one node that shares a node
with another job on more than one node runs at (1 - x) of its goodput. Which jobs are slowed is
decided after each round's decisions (`interfered`), from the allocations then, as Pollux decides
it once per interval; a job whose state changes is re-rated.
"""
from __future__ import annotations

import functools

import numpy as np

from dlsched.core.types import GPU, Role


@functools.lru_cache(maxsize=65536)
def _choose(app, perf, limits, batch: int, epoch: int, nodes: int, replicas: int) -> tuple[int, int]:
    from dlsched.workload.goodput import GoodputModel, app_grad_params, best_batch
    model = GoodputModel(perf, app_grad_params(app, batch, epoch), limits.init_batch_size)
    best = best_batch(model, nodes, replicas, limits)
    m, s = int(best.atomic_bsz), int(best.accum_steps)
    return max(min(m, limits.max_batch_size // (replicas * (s + 1))), 1), s


class GoodputProgress:
    """One job's batch choice and goodput-charged rate (see the module docstring)."""

    def __init__(self, app: str, iterations: float, request_batch: int, perf, limits) -> None:
        from dlsched.workload.efficiency import _gains, _validation
        from dlsched.workload.pollux_data import POLLUX_MAX_EPOCHS
        self.app = app
        self.perf = perf
        self.limits = limits
        E = POLLUX_MAX_EPOCHS[app]
        progress = _validation(app)[1][:E + 1]
        g_req = _gains(app, request_batch)[:E]
        cum = np.concatenate([[0.0], np.cumsum(np.diff(progress) / g_req)])
        self.scale = float(iterations) / float(cum[-1])
        self.bounds = cum * self.scale                    # request iterations at each epoch's end
        self.g_req = g_req
        self.iterations = float(iterations)
        self.batch = int(limits.init_batch_size)          # the batch it trained with last
        self.choice: tuple[int, int, int] | None = None   # (epoch, atomic batch, accum steps)
        self._next = (-1, -1.0)                           # (version, time) of the pushed re-rate
        self._tol = 1e-9 * max(float(iterations), 1.0)
        self.interference = 0.0                           # x: the slowdown when interfered
        self.slowed = False                               # shares a node with another distributed job

    def epoch(self, done: float) -> int:
        """The epoch a job that ran `done` request iterations is in."""
        e = int(np.searchsorted(self.bounds, done + self._tol, side="right")) - 1
        return min(max(e, 0), len(self.g_req) - 1)

    def choose(self, nodes: int, replicas: int, epoch: int) -> tuple[int, int]:
        """(atomic batch, accumulation steps) the job picks at (nodes, replicas) in `epoch`."""
        return _choose(self.app, self.perf, self.limits, int(self.batch), epoch, nodes, replicas)

    def seconds_per_iteration(self, placement: tuple[int, ...], done: float) -> tuple[float, float]:
        """(seconds per request iteration on `placement` (GPUs per node), request iterations to
        the end of the current epoch). Picks the batch for this epoch and placement."""
        from dlsched.workload.efficiency import gain
        from dlsched.workload.measured import measured_throughput
        e = self.epoch(done)
        replicas = sum(placement)
        m, s = self.choose(len(placement), replicas, e)
        self.choice = (e, m, s)
        step, sync = measured_throughput(self.app, tuple(sorted(placement, reverse=True)), m)
        t = step + s * max(step - sync, 0.0)
        batch = replicas * m * (s + 1)
        self.batch = batch
        per_iter = t * float(self.g_req[e]) * self.scale / gain(self.app, batch, e)
        if self.slowed:
            per_iter /= 1.0 - self.interference
        return per_iter, float(self.bounds[e + 1]) - done

    def profile(self, r):
        """The JobComm of the run `r` (its progress brought up to now) on its placements."""
        from dlsched.workload.speed import JobComm
        per_node: dict[int, int] = {}
        for p in sorted(r.placements.values(), key=lambda p: p.task):
            if r.tasks[p.task].role is Role.WORKER:
                per_node[p.node] = per_node.get(p.node, 0) + max(int(round(r.tasks[p.task].demand[GPU])), 1)
        t, left = self.seconds_per_iteration(tuple(per_node.values()), self.iterations - r.remaining)
        self.left = left
        return JobComm(t, 0.0, {}, 0.0, t, 0.0, 0.0, iteration_based=True, measured=True)

    def boundary(self, r, now: float) -> float | None:
        """When the running job reaches the end of its epoch (None: it finishes first, or a
        re-rate for this version and time is already pushed)."""
        if r.rate <= 0 or self.left >= r.remaining - self._tol:
            return None
        t = now + max(self.left, 0.0) / r.rate
        if self._next == (r.version, t):
            return None
        self._next = (r.version, t)
        return t


def interfered(runs) -> list[str]:
    """Set `slowed` on every adaptive run from the allocations now (see the module docstring);
    the ids of the runs whose state changed (to be re-rated)."""
    live = {jid: r for jid, r in runs.items() if getattr(r, "adapt", None) is not None or
            getattr(r, "placements", None)}        # (a finished job's row holds neither)
    nodes_of = {}
    for jid, r in live.items():
        if r.placements and not r.finished:
            nodes = {p.node for p in r.placements.values()}
            if len(nodes) > 1:
                nodes_of[jid] = nodes
    count: dict[int, int] = {}
    for nodes in nodes_of.values():
        for n in nodes:
            count[n] = count.get(n, 0) + 1
    changed = []
    for jid, r in live.items():
        a = r.adapt
        if a is None or r.finished or not getattr(a, "interference", 0.0):
            continue
        slowed = jid in nodes_of and any(count[n] > 1 for n in nodes_of[jid])
        if slowed != a.slowed:
            a.slowed = slowed
            changed.append(jid)
    return changed
