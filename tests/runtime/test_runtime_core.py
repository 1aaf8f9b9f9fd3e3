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
