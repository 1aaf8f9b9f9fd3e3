"""Pollux: every round, each adaptive job's replicas per node chosen to maximise the power mean
(p = -1) of fair-share-normalised goodput speedups; each job then picks its batch size.

Source: Qiao et al., OSDI 2021, and its simulator (petuum/adaptdl branch osdi21-artifact,
`simulator/pollux.py`, `simulator/simulator.py`); the code is ours. The search, its objective,
operators and repair are dlsched.policies.allocate.pollux_ga; the goodput model is
dlsched.workload.goodput; how the simulator charges a job that picks its own batch is
dlsched.sim.adaptive. docs/policies/pollux.md has the whole policy and its differences from
Pollux.

Per round (the profile runs one every 60 s):

1. jobs that cannot adapt (no goodput model: not a Pollux application, or ncf, whose batch Pollux
   fixes; a run time instead of iterations; parameter servers) keep their request: running ones
   keep their GPUs, waiting ones get their request in arrival order where it fits, packed on the
   nodes with the most GPUs left, before the adaptive jobs share the rest;
2. adaptive jobs (Pollux's order: least attained GPU-seconds first, then submission) get their
   replicas per node from the search. A job's speedup is its goodput model's best goodput at
   (nodes, replicas) over that at the fair share (goodput.fair_share_base over all active jobs);
   its model is the throughput fit of its application's placements.csv (the prior Pollux's
   simulated jobs converge to as they run: they refit on the measured placements they see) with
   the gradient statistics of the batch it trained with last, at its current epoch. Max replicas
   = min(max(2 x most replicas it has held, 1), 64, M_max / m_min), as Pollux's simulator;
3. a job whose row changes restarts (the backend's restart delay, 30 s in the Pollux setting);
   the placer `pollux_place` carries the rows out, each change a Resize carrying the job's
   `GoodputProgress` (its batch choice, dlsched.sim.adaptive).
"""
from __future__ import annotations

import functools
import json
import math

import numpy as np

from dlsched.core.types import GPU, Role
from dlsched.policies.allocate.optimus_greedy import job_tasks
from dlsched.policies.allocate import pollux_ga, pollux_nsga
from dlsched.scheduler.context import JobState
from dlsched.scheduler.framework import Allocate, register

NOTE = "pollux"           # ctx.notes key: {job_id: ((node, replicas), ...)} for the placer
FIXED_BATCH_APPS = ("ncf",)   # Pollux's simulator fixes ncf's batch (32768) and replicas (1)
REBATCH = 1.5   # a measured job keeping its GPUs restarts for a batch this far from its own


@functools.lru_cache(maxsize=None)
def app_model(app: str):
    """(throughput PerfParams fitted on the application's placements.csv, its AppLimits)."""
    from dlsched.workload.goodput import app_limits, fit_perf_params, placement_samples
    return fit_perf_params(placement_samples(app)).params, app_limits(app)


@functools.lru_cache(maxsize=4096)
def speedups(app: str, epoch: int, batch: int, base: tuple[int, int], cap: int) -> np.ndarray:
    """(MAX_NODES + 1, cap + 1) speedups of a job of `app` in `epoch` that trained with `batch`
    last, over the fair share `base` (jobs in the same state share it; read-only)."""
    from dlsched.workload.goodput import GoodputModel, app_grad_params
    perf, lim = app_model(app)
    model = GoodputModel(perf, app_grad_params(app, batch, epoch), lim.init_batch_size)
    return speed_rows(model, lim, base, cap)


def speed_rows(model, lim, base: tuple[int, int], cap: int, accumulation: bool = True) -> np.ndarray:
    """(MAX_NODES + 1, cap + 1) speedups of a goodput model over the fair share `base`."""
    from dlsched.workload.goodput import best_batch
    kk, nn = np.meshgrid(np.arange(1, pollux_ga.MAX_NODES + 1), np.arange(1, cap + 1), indexing="ij")
    ok = kk <= nn
    out = np.zeros((pollux_ga.MAX_NODES + 1, cap + 1))
    good = best_batch(model, kk[ok], nn[ok], lim, accumulation=accumulation).goodput
    b = best_batch(model, min(base[0], base[1]), base[1], lim, accumulation=accumulation).goodput
    out[kk[ok], nn[ok]] = np.asarray(good) / float(b)
    out.setflags(write=False)
    return out


def measured_limit(spec) -> int | None:
    """A runtime job's max_batch_size (kept in JobSpec.extra, dlsched.runtime.spec): Pollux
    adapts it with the goodput the runtime fits (dlsched.runtime.goodput); None otherwise."""
    if not spec.extra or "max_batch_size" not in spec.extra:
        return None
    try:
        v = json.loads(spec.extra).get("max_batch_size")
    except (ValueError, AttributeError):
        return None
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def adaptive(spec) -> bool:
    """Whether Pollux adapts this job's batch and replicas (see the module docstring, 1)."""
    from dlsched.workload.measured import POLLUX_APPS
    model = (spec.model or "").lower()
    return (spec.kind == "dl" and spec.iterations is not None and bool(spec.batch_size)
            and ((model in POLLUX_APPS and model not in FIXED_BATCH_APPS) or measured_limit(spec) is not None)
            and all(t.role is Role.WORKER and abs(t.demand[GPU] - 1.0) < 1e-9 for t in spec.tasks))


def measured(spec) -> bool:
    """An adaptive job whose model is fitted from the runtime's measurements, not an app's."""
    from dlsched.workload.measured import POLLUX_APPS
    return (spec.model or "").lower() not in POLLUX_APPS and measured_limit(spec) is not None


class BatchChoice:
    """What a measured job's Resize carries (Resize.adapt): the global batch its next run
    trains with (the runtime hands it to the program as ctx.batch_size)."""
    __slots__ = ("batch_size",)

    def __init__(self, batch_size: int) -> None:
        self.batch_size = int(batch_size)

    def __repr__(self) -> str:
        return f"BatchChoice({self.batch_size})"


def measured_batch(fit, spec, nodes: int, replicas: int) -> int:
    """The global batch a measured job takes at (nodes, replicas): its fitted model's best
    (no accumulation), or, before a fit, its initial batch spread over the replicas; a multiple
    of `replicas`, at most max_batch_size."""
    from dlsched.workload.goodput import best_batch
    top = max(measured_limit(spec) // replicas, 1)
    if fit is None:
        local = -(-int(spec.batch_size) // replicas)
    else:
        local = int(best_batch(fit[0], nodes, replicas, fit[1], accumulation=False).atomic_bsz)
    return replicas * max(min(local, top), 1)


def per_node(rec) -> dict[int, int]:
    out: dict[int, int] = {}
    for tp in rec.placed.values():
        out[tp.node] = out.get(tp.node, 0) + 1
    return out


def rigid_rows(tasks, free: np.ndarray, left: np.ndarray) -> list[tuple[int, int]] | None:
    """(node, workers) rows of a rigid job on the nodes with the most GPUs left first, each
    worker where every resource of it fits (`free`, taken from on success), or None where they
    do not all fit. (Counting GPUs alone once gave a row of CPU-heavy workers that the placer
    could never carry out: the job waited for ever and the simulation never ended.)"""
    trial = free.copy()
    rows, i = [], 0
    for n in sorted(np.flatnonzero(left > 0).tolist(), key=lambda n: (-left[n], n)):
        c = 0
        while i < len(tasks) and c < left[n] and (trial[n] + 1e-9 >= tasks[i].vector).all():
            trial[n] -= tasks[i].vector
            i, c = i + 1, c + 1
        if c:
            rows.append((n, c))
        if i == len(tasks):
            free[:] = trial
            return rows
    return None


@register("allocate", "pollux", source="Qiao et al., OSDI 2021 (Pollux); petuum/adaptdl simulator/pollux.py")
class PolluxAllocate(Allocate):
    """Replicas per node of every adaptive job by Pollux's genetic search; rigid jobs keep their
    request. The placer `pollux_place` carries the rows out."""
    resizes = True
    needs = frozenset(('preemption', 'resize'))
    # what a round changes: restored when a round is run again before it is carried out (the
    # search's seed population, the replicas each job has held, its reallocations)
    round_state = ("_most", "_restarts", "_prev", "last_value", "_given")

    # Defaults: Pollux's own search (NSGA-II) at the size pollux-fidelity validates, 32 x 20
    # (decision 0056: as good as 100 x 60 there, and 4.6x cheaper than the GA at 100 x 100)
    def __init__(self, pop_size: int = 32, generations: int = 20, restart_s: float = 30.0,
                 max_replicas: int = 64, avoid_interference: bool = True, interference: float = 0.0,
                 search: str = "nsga2") -> None:
        if pop_size < 2 or generations < 0:
            raise ValueError("pop_size must be >= 2 and generations >= 0")
        if search not in ("ga", "nsga2"):
            raise ValueError(f"search must be ga (ours) or nsga2 (Pollux's, pymoo), got {search!r}")
        self.search = search
        if not 0.0 <= float(interference) < 1.0:
            raise ValueError("interference must be in [0, 1)")
        # Pollux's sensitivity knobs: repair rule (1) on or off (its pollux.py lines 387-390), and
        # in the simulator, the slowdown of distributed jobs sharing a node (dlsched.sim.adaptive)
        self.avoid_interference = bool(avoid_interference)
        self.interference = float(interference)
        self.pop_size, self.generations = int(pop_size), int(generations)
        self.restart_s = float(restart_s)
        self.max_replicas = int(max_replicas)
        self._adapt: dict[str, object] = {}       # job -> GoodputProgress
        self._most: dict[str, int] = {}           # job -> most replicas it has held
        self._restarts: dict[str, int] = {}       # job -> reallocations after its first
        self._prev: tuple[list, np.ndarray] | None = None   # (job ids, last population)
        self._given: dict[str, int] = {}          # measured job -> the batch its run trains with
        self.last_value: float | None = None

    def progress_of(self, rec):
        from dlsched.sim.adaptive import GoodputProgress
        from dlsched.workload.measured import trained_batch
        g = self._adapt.get(rec.job_id)
        if g is None:
            spec = rec.spec
            app = spec.model.lower()
            perf, lim = app_model(app)
            g = self._adapt[rec.job_id] = GoodputProgress(
                app, float(spec.iterations), trained_batch(app, spec.batch_size, spec.num_workers), perf, lim)
            g.interference = self.interference
        return g

    def speed_table(self, recs, ctx, base, width: int) -> np.ndarray:
        """speed[j, K, N]: speedup of job j at (K nodes, N replicas) over the fair share `base`."""
        table = np.zeros((len(recs), pollux_ga.MAX_NODES + 1, width + 1))
        for j, (rec, cap) in enumerate(recs):
            if measured(rec.spec):
                table[j, :, :cap + 1] = self.measured_row(rec, ctx, base, cap)
                continue
            g = self.progress_of(rec)
            st = ctx.stats(rec.job_id) if ctx.stats is not None else None
            left = st["remaining"] if st and st.get("remaining") is not None else rec.spec.iterations
            epoch = g.epoch(float(rec.spec.iterations) - float(left))
            row = speedups(g.app, epoch, int(g.batch), tuple(base), int(cap))
            table[j, :, :cap + 1] = row
        return table

    def measured_fit(self, rec, ctx):
        """A measured job's (GoodputModel, AppLimits) from the backend, or None (none yet)."""
        fit_of = getattr(ctx, "goodput", None)
        return None if fit_of is None else fit_of(rec.job_id, int(rec.spec.batch_size), measured_limit(rec.spec))

    def measured_row(self, rec, ctx, base, cap: int) -> np.ndarray:
        """Speedups of a measured job: its fitted model's, or before a fit Pollux's stand-in,
        linear in the replicas (over the fair share's)."""
        fit = self.measured_fit(rec, ctx)
        if fit is not None:
            return speed_rows(fit[0], fit[1], tuple(base), int(cap), accumulation=False)
        out = np.zeros((pollux_ga.MAX_NODES + 1, cap + 1))
        for k in range(1, pollux_ga.MAX_NODES + 1):
            out[k, k:] = np.arange(k, cap + 1) / float(base[1])
        return out

    def allocate(self, jobs, ctx) -> dict:
        txn, cluster = ctx.txn, ctx.cluster
        up = np.asarray(ctx.snap.up, dtype=bool)
        total = np.floor(cluster.capacity[:, GPU] + 1e-9).astype(np.int64) * up
        running = [r for r in ctx.running if r.spec.kind == "dl"]
        waiting = [r for r in jobs if r.spec.kind == "dl" and r.state in (JobState.PENDING, JobState.SUSPENDED)
                   and r.job_id not in txn.decided]
        active = sorted(running + waiting, key=lambda r: (r.submit_time_s, r.job_id))
        out: dict = {}
        notes: dict = {}
        if not active:
            self._prev = None
            return out
        left = total.copy()
        for r in running:
            if not adaptive(r.spec):
                for n, c in per_node(r).items():
                    left[n] -= c
        free = None
        for r in active:                       # 1. rigid jobs: their request, or nothing
            if adaptive(r.spec) or r.state is JobState.RUNNING:
                continue
            need = sum(1 for t in r.spec.tasks if t.role is Role.WORKER)
            if not all(abs(t.demand[GPU] - 1.0) < 1e-9 for t in r.spec.tasks) or left.sum() < need:
                continue
            if free is None:               # what rigid jobs may take: adaptive jobs' places too
                free = np.array(txn.free_view(), dtype=np.float64)
                for a in running:
                    if adaptive(a.spec):
                        for tp in a.placed.values():
                            free[tp.node] += a.tasks[tp.task].vector
            rows = rigid_rows(r.tasks, free, left)
            if rows is None:
                continue                       # its GPUs are there, but not its CPUs or memory
            for n, c in rows:
                left[n] -= c
            out[r.job_id] = r.tasks
            notes[r.job_id] = tuple(rows)
        adapt = [r for r in active if adaptive(r.spec)]
        if adapt:
            self._allocate_adaptive(adapt, ctx, left, total, len(active), out, notes)
        if ctx.notes is None:
            ctx.notes = {}
        ctx.notes[NOTE] = notes
        prog = ctx.notes[NOTE + ".progress"] = {}
        rebatch = ctx.notes[NOTE + ".rebatch"] = set()
        for r in active:
            if adaptive(r.spec) and not measured(r.spec):
                prog[r.job_id] = self.progress_of(r)
            elif measured(r.spec) and notes.get(r.job_id):
                row = notes[r.job_id]
                b = measured_batch(self.measured_fit(r, ctx), r.spec, len(row), sum(c for _, c in row))
                prog[r.job_id] = BatchChoice(b)
                cur = self._given.get(r.job_id, int(r.spec.batch_size))
                if r.state is JobState.RUNNING and dict(row) == per_node(r):
                    if max(b, cur) >= REBATCH * min(b, cur):
                        rebatch.add(r.job_id)      # same GPUs, a batch far from its own: restart
                    else:
                        continue
                self._given[r.job_id] = b
        return out

    def _allocate_adaptive(self, adapt, ctx, left, total, num_active, out, notes) -> None:
        from dlsched.workload.goodput import fair_share_base
        now = ctx.now
        for r in adapt:
            if r.state is JobState.RUNNING:
                self._most[r.job_id] = max(self._most.get(r.job_id, 0), len(r.placed))

        def attained(r):
            st = ctx.stats(r.job_id) if ctx.stats is not None else None
            return float(st["gpu_s"]) if st else 0.0
        adapt.sort(key=lambda r: (attained(r), r.submit_time_s, r.job_id))
        ids = [r.job_id for r in adapt]
        nodes = len(left)
        base = np.zeros((len(adapt), nodes), dtype=np.int64)
        for j, r in enumerate(adapt):
            if r.state is JobState.RUNNING:
                for n, c in per_node(r).items():
                    base[j, n] = c
        caps = []
        for r in adapt:
            if measured(r.spec):                # (a local batch of 1 sample at least)
                top = measured_limit(r.spec)
            else:
                lim = app_model(r.spec.model.lower())[1]
                top = lim.max_batch_size // lim.min_local_bsz
            caps.append(min(max(2 * self._most.get(r.job_id, 0), 1), self.max_replicas, top))
        gpus = int(total.sum())
        fair = fair_share_base(max(gpus, 1), max(int(np.count_nonzero(total)), 1), num_active)
        speed = self.speed_table(list(zip(adapt, caps)), ctx, fair, max(caps))
        age = np.array([max(now - r.submit_time_s, 0.0) for r in adapt])
        restarts = np.array([self._restarts.get(i, 0) for i in ids])
        problem = pollux_ga.Problem(speed, np.maximum(left, 0), base, caps,
                                    pollux_ga.restart_factor(age, restarts, self.restart_s),
                                    nodes / max(gpus, 1), avoid=self.avoid_interference)
        seeds = [base[None]]
        if self._prev is not None:
            prev_ids, prev_pop = self._prev
            where = {i: k for k, i in enumerate(prev_ids)}
            src = [where.get(i, -1) for i in ids]
            if prev_pop.shape[2] == nodes:
                seeded = np.zeros((prev_pop.shape[0], len(ids), nodes), dtype=np.int64)
                for j, k in enumerate(src):
                    if k >= 0:
                        seeded[:, j] = prev_pop[:, k]
                seeds.append(seeded)
        if self.search == "nsga2" and len(seeds) > 1:
            seeds = seeds[1:]         # Pollux seeds from the last round's front alone (_adapt_prev_states)
        run = pollux_ga.search if self.search == "ga" else pollux_nsga.search
        best, value, pop = run(problem, np.concatenate(seeds), ctx.rng, self.pop_size, self.generations)
        self._prev = (ids, pop)
        self.last_value = value
        for j, r in enumerate(adapt):
            row = best[j]
            n_rep = int(row.sum())
            if not np.array_equal(row, base[j]) and n_rep:
                if r.job_id in self._restarts:
                    self._restarts[r.job_id] = self._restarts.get(r.job_id, 0) + 1
                else:
                    self._restarts[r.job_id] = 0
            if n_rep == 0:
                out[r.job_id] = ()
                continue
            same = np.array_equal(row, base[j])
            out[r.job_id] = r.tasks if same else job_tasks(r.spec, n_rep, 0)
            notes[r.job_id] = tuple((int(n), int(row[n])) for n in np.flatnonzero(row))

    def quiet_until(self, now: float, running) -> float:
        return -math.inf
