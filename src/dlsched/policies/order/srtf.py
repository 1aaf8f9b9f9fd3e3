"""Shortest remaining time first (SRTF), preemptive with the `preempt` action.

Source: the size-aware baselines of Gu et al., "Tiresias: A GPU Cluster Manager for Distributed
Deep Learning", NSDI 2019 (its evaluation: SRTF and the two-dimensional SRSF, smallest
remaining service first), which - unlike Tiresias - know every job's size in advance. So do
these orders: they are ORACLES of job size, an upper reference for size-unaware policies
(Tiresias, LAS), not something a real cluster manager can run.

Total work of a job, in GPU-seconds (JobSpec fields only, never the backend's progress):

    duration_s known    : W = duration_s x G                      (a trace's run time, ideal
                                                                   placement)
    iterations + model  : W = iterations x t_iso x G              t_iso = SpeedModel(cluster)
                                                                   .isolated_iter_time on a
                                                                   packed placement (cached per job)
    iterations, no model: W = iterations x G                      (one second per iteration:
                                                                   nothing better to go on)
    bag of tasks        : W = sum over tasks of duration_s x GPUs of the task

with G = the job's GPUs. The scheduler does not know how far a job has got, so the remaining
work is estimated from the service it has received (JobRecord.attained, GPU-seconds, restart
delays included):

    R = max(W - attained(now), 0)
    key(job) = (R,)                  gpu_weighted = True (default): remaining GPU-service, the
                                     Tiresias paper's SRSF ("SRTF" weighted by GPUs)
    key(job) = (R / max(G, 1),)      gpu_weighted = False: remaining time

The framework appends (submit_time_s, job_id). A packed placement puts the workers on the nodes
with the most GPUs first (of the job's GPU type, if it asks for one), filling each node before the
next, parameter servers on the first node: what a trace's duration means by "ideal".
"""
from __future__ import annotations

import bisect
import math
from operator import attrgetter

from dlsched.core.types import GPU, Role, TaskPlacement
from dlsched.scheduler.framework import Order, ProfileSpec, register, register_profile
from dlsched.workload.models import get_model
from dlsched.workload.speed import SpeedModel


class WorkEstimate:
    """Total work of a job in GPU-seconds from its JobSpec (cached per job)."""

    def __init__(self) -> None:
        self._cluster = None
        self._speed: SpeedModel | None = None
        self._work: dict[str, float] = {}

    def total(self, rec, cluster) -> float:
        w = self._work.get(rec.job_id)
        if w is None:
            w = self._work[rec.job_id] = self.estimate(rec.spec, cluster)
        return w

    def estimate(self, spec, cluster) -> float:
        if spec.kind == "tasks":
            return float(sum((t.duration_s or 0.0) * t.demand[GPU] for t in spec.tasks))
        gpus = spec.gpus
        if spec.duration_s is not None:
            return float(spec.duration_s) * gpus
        if spec.iterations is None:
            return 0.0
        iter_s = 1.0
        if get_model(spec.model) is not None and cluster is not None:
            placements = packed_placement(spec, cluster)
            if placements is not None:
                if self._cluster is not cluster:
                    self._cluster, self._speed = cluster, SpeedModel(cluster)
                iter_s = self._speed.isolated_iter_time(spec, placements)
        return float(spec.iterations) * iter_s * gpus


_SORTED: dict = {}


def _sorted_nodes(cluster, gpu_type):
    """The cluster's nodes (of one GPU type) by GPUs, most first, lowest id among equals; cached
    per cluster object."""
    key = (id(cluster), gpu_type)
    hit = _SORTED.get(key)
    if hit is None or hit[0] is not cluster:
        nodes = [n for n in cluster.nodes if gpu_type is None or n.gpu_type == gpu_type]
        nodes.sort(key=lambda n: (-n.gpus, n.node_id))
        if len(_SORTED) > 64:
            _SORTED.clear()
        hit = _SORTED[key] = (cluster, nodes)
    return hit[1]


def packed_placement(spec, cluster) -> tuple[TaskPlacement, ...] | None:
    """The job's workers on as few nodes as possible (most GPUs first, lowest id among equals),
    parameter servers and GPU-less workers on the first node used; None when it cannot fit."""
    nodes = _sorted_nodes(cluster, spec.gpu_type)
    if not nodes:
        return None
    out = []
    i, used = 0, 0          # node index, GPUs used on it
    for t in spec.tasks:
        g = int(round(t.demand[GPU]))
        if t.role is Role.PS or g <= 0:
            out.append(TaskPlacement(t.index, nodes[0].node_id, ()))
            continue
        while i < len(nodes) and nodes[i].gpus - used < g:
            i, used = i + 1, 0
        if i == len(nodes):
            return None
        out.append(TaskPlacement(t.index, nodes[i].node_id, tuple(range(used, used + g))))
        used += g
    return tuple(out)


class SizeOrder:
    """What SRTF and SJF share: the work estimate and the GPU-seconds / run-time choice."""
    static = False   # keys need the round's cluster (the speed model)
    # A waiting job that holds nothing attains nothing, so its key (SJF: its total work; SRTF:
    # total work - attained) stays while it waits: keyed once as it joins the queue
    # (dlsched.scheduler.kept_order; tests/unit/test_deep_queue.py compares the event logs).
    waiting_keys_kept = True
    # ... and a running job's key only falls (SRTF: its remaining work; SJF: it stays): preempt
    # skips its walk while every running job's key stays below the waiting head's (RoundContext)
    running_keys_fall = True

    def __init__(self, gpu_weighted: bool = True) -> None:
        self.gpu_weighted = bool(gpu_weighted)
        self.work = WorkEstimate()

    def scaled(self, job, gpu_seconds: float) -> tuple:
        """The key: GPU-seconds, or run time (GPU-seconds / GPUs) when not gpu_weighted."""
        return (gpu_seconds if self.gpu_weighted else gpu_seconds / max(job.spec.gpus, 1.0),)


@register("order", "srtf", source="Gu et al., NSDI 2019 (Tiresias's SRTF / SRSF baselines; size oracle)")
class SrtfOrder(SizeOrder, Order):
    """Shortest remaining time first (job sizes known: an oracle): remaining = total work - attained service."""

    def __init__(self, gpu_weighted: bool = True) -> None:
        super().__init__(gpu_weighted)
        self._ctx = None     # the last round's context (its sorted queue), for quiet_until
        # (time, {job: key at that time}): a job's key at one time is the same however often it
        # is asked (its attained service at `now` does not change when a plan applied at `now`
        # settles it), and the rounds at one time ask it of every running job twice or more
        # (preempt's walk, quiet_until); deep-queue run (bench_policies.py --deep) 26 -> 13 s
        self._memo: tuple[float, dict] = (math.nan, {})

    def key(self, job, ctx) -> tuple:
        if ctx is None:
            return self.scaled(job, max(self.work.total(job, None) - job.attained(0.0), 0.0))
        self._ctx = ctx
        return self._key_at(job, ctx.cluster, ctx.now)

    def note_round(self, ctx) -> None:
        """The round's context, from the kept queue (scheduler/kept_order.py), where the round
        keys nobody: quiet_until must not read an earlier round's queue at the same time (a job
        it started may have finished since, at that time)."""
        self._ctx = ctx

    def keys(self, jobs: list, ctx) -> list[tuple]:
        """`key` of each job (preempt's walk keys every running job each round)."""
        if ctx is None:
            return [self.key(j, None) for j in jobs]
        self._ctx = ctx
        now, cluster = ctx.now, ctx.cluster
        return [self._key_at(j, cluster, now) for j in jobs]

    def _key_at(self, job, cluster, now: float) -> tuple:
        at, memo = self._memo
        if at != now:
            memo = {}
            self._memo = (now, memo)
        k = memo.get(job.job_id)
        if k is None:
            k = memo[job.job_id] = self.scaled(job, max(self.work.total(job, cluster) - job.attained(now), 0.0))
        return k

    def quiet_until(self, now: float, running) -> float:
        """With no event the keys move only with time: a waiting job's key stays (it attains
        nothing), a job that holds GPUs falls at its GPUs' rate (per GPU without gpu_weighted)
        until it reaches 0. The round's decisions (the queue's order, preempt's walk over
        running and waiting jobs) depend on time only through the order of those keys, which
        first changes when two neighbours in it meet (or a falling key reaches 0, where ties
        go by submission). So: quiet until the first such meeting, a little early (keys within
        1e-9 relative of each other count as met, so float noise in a later round's keys cannot
        flip an order this one did not see flip)."""
        ctx = self._ctx
        # key() keeps the round's context; ctx.queue is then the round's sorted queue. A round
        # over an empty queue keys nobody: its context is an older round's.
        waiting = ctx.queue if ctx is not None and ctx.now == now else ()
        if not waiting:
            return math.inf        # nobody to place, nobody to preempt for
        cluster = ctx.cluster
        weighted = self.gpu_weighted

        def row(r) -> tuple:
            k = self._key_at(r, cluster, now)[0]
            rate = 0.0
            if k > 0 and r._service_since is not None:
                rate = r.held_gpus()
                if not weighted:
                    rate /= max(r.spec.gpus, 1.0)
            return (k, r.submit_time_s, r.job_id, rate)

        # Only a falling key (rate > 0) can meet the key before it in the order, or reach 0.
        # The waiting jobs that hold nothing keep their keys (`waiting_keys_kept`): the round
        # keyed them (r.key, in ctx.queue's order) and no time moves them. So only the jobs that
        # hold GPUs are rowed here: the running ones (when preempt's walk reads them: it runs
        # only when the waiting jobs need more GPUs than are free, which no time changes) and
        # a gang placed in part; each falling one meets the nearer of the still waiting job
        # before it (a bisection of the queue) and the holding job before it.
        # Under tenancy the admitted queue is in the admission walk's order, not the keys':
        # every waiting job is rowed then, as before the bisection.
        whole = not ctx.keyed
        held = list(waiting) if whole else [r for r in waiting if r._service_since is not None]
        if _walks(ctx):
            held.extend(running)
        seen, rows = set(), []
        for r in held:
            if r.job_id not in seen:
                seen.add(r.job_id)
                rows.append(row(r))
        rows.sort()
        t = math.inf
        prev = None
        for cur in rows:
            k, rate = cur[0], cur[3]
            if rate > 0:
                t = min(t, now + (k - 1e-9 * max(k, 1.0)) / rate)           # reaches 0
                before = prev if whole else max((x for x in (prev, _still_before(waiting, cur, seen))
                                                 if x is not None), default=None)
                if before is not None and rate > before[3]:    # catches up with the one before it
                    t = min(t, now + (k - before[0] - 1e-9 * max(k, 1.0)) / (rate - before[3]))
            prev = cur
        return t - 1e-6 if t < math.inf else t


def _still_before(waiting, cur, seen) -> tuple | None:
    """The row (key, submit, id, rate 0) of the waiting job that holds nothing just before `cur`
    in the queue's key order (`waiting`, sorted by r.key), or None."""
    i = bisect.bisect_left(waiting, cur[:3], key=_key3)       # (r.key: (key, submit, id))
    while i > 0 and waiting[i - 1].job_id in seen:
        i -= 1
    if i == 0:
        return None
    w = waiting[i - 1]
    return (w.key[0], w.submit_time_s, w.job_id, 0.0)


_key3 = attrgetter("key")      # a size order's r.key is (key, submit_time_s, job_id): in C


def _walks(ctx) -> bool:
    """Whether a round like the one of `ctx` walks over the running jobs: False only when the
    profile's `preempt` says it did not walk in that round (its test, that the waiting jobs need
    more GPUs than are free, reads no time); otherwise True, whatever may read running keys."""
    from dlsched.policies.actions.preempt import Preempt
    act = ctx.action(Preempt)
    return act is None or act.walked is None or act.walked[0] is not ctx.txn or act.walked[1]


register_profile(ProfileSpec(
    name="srtf", source="Gu et al., NSDI 2019 (SRTF / SRSF baseline; knows job sizes)",
    description="Shortest remaining GPU-service first (an oracle of job size), preemptive every "
                "60 s; gang, first fit; a job that does not fit does not block the others",
    order="srtf", filters=("fits",), scores=(("first_fit", 1.0),), actions=("preempt",),
    gang=True, blocking=False, round_s=60.0))
