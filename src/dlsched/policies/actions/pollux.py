"""Pollux's placement: carries out the rows of the allocator `pollux`
(dlsched.policies.allocate.pollux, where the policy and its sources are described), and the
`pollux` profile.

The allocator names, for every job it places, its replicas per node (ctx.notes["pollux"]). A
running job whose row did not change keeps its GPUs; one given nothing is suspended; the others
release their GPUs first, then take exactly the nodes of their row. An adaptive job's new row
is a Resize that carries its `GoodputProgress` (dlsched.sim.adaptive: the job picks its own
batch), a restart at the backend's restart delay; a rigid job's start is a plain launch.
"""
from __future__ import annotations

import numpy as np

from dlsched.policies.allocate.pollux import NOTE, adaptive, per_node
from dlsched.scheduler.context import JobState
from dlsched.scheduler.framework import Place, ProfileSpec, Timeless, register, register_profile


_EPS = 1e-9


def _fits(txn, tasks, row) -> bool:
    """Whether the free resources of each node of `row` hold its tasks (every resource)."""
    i = 0
    for n, c in sorted(row.items()):
        need = np.sum([t.vector for t in tasks[i:i + c]], axis=0)
        if (txn.free[n] + _EPS < need).any():
            return False
        i += c
    return True


@register("place", "pollux_place", source="Qiao et al., OSDI 2021 (Pollux); petuum/adaptdl simulator/simulator.py")
class PolluxPlace(Timeless, Place):
    """Carry out the round's rows: keep, suspend, resize or launch each job, on its nodes."""
    carries_allocation = True
    needs = frozenset(('preemption', 'resize'))

    def __init__(self) -> None:
        pass

    def place(self, ctx) -> None:
        alloc = ctx.allocation
        if not alloc:
            return
        rows = (ctx.notes or {}).get(NOTE, {})
        rebatch = (ctx.notes or {}).get(NOTE + ".rebatch", ())   # measured jobs: a new batch
        txn = ctx.txn
        moving = []
        for jid in sorted(alloc, key=lambda j: (ctx.jobs[j].submit_time_s, j)):
            rec = ctx.jobs[jid]
            tasks = alloc[jid]
            txn.decided.add(jid)
            row = dict(rows.get(jid, ()))
            if rec.state is JobState.RUNNING:
                if (tasks and row == per_node(rec) and jid not in rebatch) or not rec.spec.preemptible:
                    continue               # keeps what it holds (a non-preemptible job always)
                old = tuple(rec.placed.values())
                demands = [rec.tasks[tp.task].vector for tp in old]
                if not tasks:
                    txn.release(jid, old, demands)         # suspended
                    continue
                txn.unhold(old, demands)
            elif not tasks:
                continue
            moving.append((rec, tasks, row))
        for rec, tasks, row in moving:
            if not _fits(txn, tasks, row):
                # the row counts GPUs alone: a job whose CPUs or memory (or GPUs another job of
                # this round took) are not there keeps what it held, or is suspended if that is
                # gone too; a waiting one waits
                if rec.state is JobState.RUNNING:
                    old = tuple(rec.placed.values())
                    txn.hold_or_release(rec.job_id, old, [rec.tasks[tp.task].vector for tp in old])
                continue
            i = 0
            for n, c in sorted(row.items()):
                txn.reserve_block(rec.job_id, tasks[i:i + c], n)
                i += c
            if adaptive(rec.spec):
                txn.commit_resize(rec.job_id, tasks, adapt=ctx.notes[NOTE + ".progress"][rec.job_id])
            else:
                txn.commit(rec.job_id, total_tasks=len(tasks), already_placed=0, gang=True,
                           resume=rec.state is JobState.SUSPENDED)


register_profile(ProfileSpec(
    name="pollux", source="Qiao et al., OSDI 2021 (Pollux); petuum/adaptdl simulator/pollux.py",
    description="Pollux: every 60 s, replicas per node of each adaptive job by a genetic search "
                "maximising the power mean (p = -1) of fair-share-normalised goodput speedups; "
                "each job picks its batch size; rigid jobs keep their request",
    order="fifo", allocate="pollux", filters=("fits",), scores=(("first_fit", 1.0),),
    placers=("pollux_place",), gang=True, blocking=False, round_s=60.0, event_rounds=False))
