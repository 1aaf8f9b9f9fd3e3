"""The scheduler-core additions the runtime needs (no Ray): an operator's hold keeps a job out of
rounds until it is released, and `Scheduler.execute` applies a plan made outside a round."""
from __future__ import annotations

from dlsched.cluster.state import ClusterState
from dlsched.core.types import Launch, Migrate, Plan, Resume, TaskPlacement
from dlsched.runtime.backend import NodeInfo, cluster_of
from dlsched.runtime.spec import RuntimeJobSpec
from dlsched.scheduler import events as ev
from dlsched.scheduler.core import JobState, Scheduler, build_profile


class LedgerBackend:
    """Only the ledger: what a plan takes and gives (the Ray side is tested elsewhere)."""

    def __init__(self):
        self.state = ClusterState(cluster_of([NodeInfo(f"n{i}", "x", "r0", "g", 2, 2.0, 8.0) for i in range(2)]))
        self.applied: list = []
        self.tasks: dict = {}

    def now(self):
        return 0.0

    def snapshot(self):
        return self.state.snapshot(0.0)

    def apply(self, plan):
        for d in plan.ordered():
            self.applied.append(d)
            for tp in getattr(d, "placements", ()):
                self.state.take(tp.node, self.tasks[d.job_id][tp.task].vector, tp.gpu_ids)


def test_hold_release_and_execute():
    import dlsched.policies  # noqa: F401
    b = LedgerBackend()
    s = Scheduler(build_profile("fifo-gang"))
    spec = RuntimeJobSpec(name="x", entry="m:f", workers=2, batch_size=64, iterations=5)
    js = spec.to_jobspec("j1", 0.0)
    b.tasks["j1"] = js.tasks
    s.handle(ev.JobArrival(0.0, js), b)
    s.execute(s.round(b.snapshot()), b)
    assert isinstance(b.applied[-1], Launch) and s.jobs["j1"].state is JobState.RUNNING
    b.state = LedgerBackend().state                          # the backend stopped it: all free
    s.handle(ev.JobHeld(1.0, "j1", "operator"), b)
    rec = s.jobs["j1"]
    assert rec.state is JobState.HELD and not rec.placed and rec not in s.queue and "j1" not in s.running
    assert len(s.round(b.snapshot())) == 0                  # a held job is not placed
    s.handle(ev.JobReleased(2.0, "j1"), b)
    assert rec.state is JobState.SUSPENDED and rec in s.queue
    plan = s.round(b.snapshot())
    assert [type(d) for d in plan.decisions] == [Resume]
    s.execute(plan, b)
    old = [rec.placed[i] for i in sorted(rec.placed)]
    new = tuple(TaskPlacement(tp.task, 1 - tp.node, tp.gpu_ids) for tp in old)
    s.execute(Plan([Migrate("j1", new)]), b)
    assert rec.migrations == 1 and {tp.node for tp in rec.placed.values()} == {1 - old[0].node}
    s.handle(ev.JobReleased(3.0, "j1"), b)                   # releasing a job that is not held: no-op
    assert rec.state is JobState.RUNNING


class TickingBackend(LedgerBackend):
    """The runtime's poll on a virtual clock: an item (a rank's report, a command) arrives
    0.5 ms before each periodic round is due, and handling it takes 2 ms, so the round comes due
    while the batch is handled. `old=True` takes wakes as the runtime did before runtime/wakes.py
    (due by the clock after handling, plus 1 ms, stamped with the batch's time)."""

    def __init__(self, old: bool, rounds: int):
        from dlsched.runtime.wakes import Wakes
        super().__init__()
        self.old, self.left, self.t = old, rounds, 0.0
        self.wakes = Wakes()

    def now(self):
        return self.t

    def snapshot(self):
        return self.state.snapshot(self.t)

    def wake_at(self, t):
        self.wakes.add(t)

    def usage(self):
        return self.state.allocated_gpus(), 0.0, 0.0

    def job_stats(self, job_id):
        return {}

    def poll(self):
        while self.left > 0:
            self.left -= 1
            nxt = self.wakes._heap[0] if len(self.wakes) else self.t + 1.0
            self.t = max(self.t, nxt - 0.0005)        # the item arrives just before the wake
            batch_t = self.t
            self.t += 0.002                           # handling it
            if self.old:
                n = 0
                while len(self.wakes) and self.wakes._heap[0] <= self.t + 1e-3:
                    self.wakes.due(self.wakes._heap[0])
                    n += 1
            else:
                n = self.wakes.due(batch_t)
            out = [ev.RoundTick(batch_t)] if n else []
            if out:
                return out
        return None


def test_a_wake_that_comes_due_during_a_batch_keeps_the_periodic_round():
    """The restarted server that ran no periodic round for 30 s: a wake taken while its batch
    was handled was stamped with the batch's earlier time, read as a component's wake, and the
    periodic tick was never armed again. Taken by the batch's own time (runtime/wakes.py), it
    fires every round_s."""
    import dlsched.policies  # noqa: F401
    spec = RuntimeJobSpec(name="x", entry="m:f", workers=4, batch_size=64, iterations=5)
    counts = {}
    for old in (True, False):
        b = TickingBackend(old, rounds=40)
        s = Scheduler(build_profile("fifo", {"round_s": 1.0}))
        for jid in ("a", "b"):                  # 4 GPUs each, 4 in the cluster: "b" waits
            js = spec.to_jobspec(jid, 0.0)
            b.tasks[jid] = js.tasks
            s.handle(ev.JobArrival(0.0, js), b)
        s.execute(s.round(b.snapshot()), b)
        assert s.jobs["a"].state is JobState.RUNNING and s.jobs["b"].queued
        b.wake_at(0.0)
        s.run(b)
        counts[old] = len(s.rounds)
    assert counts[True] <= 3, counts            # the old rule: the periodic round stops
    assert counts[False] >= 19, counts          # about one round per second of the virtual clock
