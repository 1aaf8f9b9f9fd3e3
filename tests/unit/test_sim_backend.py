"""SimBackend applies every Plan decision: progress survives suspend / migrate / resize, and each
restart costs restart_delay_s."""
import pytest

from dlsched.cluster import load_cluster
from dlsched.core.types import Launch, Migrate, Plan, Resize, Resume, Suspend, TaskPlacement
from dlsched.scheduler import events as ev
from dlsched.sim import SimBackend
from dlsched.sim.engine import EventHeap
from dlsched.workload.schema import job_from_row


def _drive(backend, t):
    backend.wake_at(t)
    batch = backend.poll()
    assert backend.now() == t and any(isinstance(e, ev.RoundTick) for e in batch)


def _plan(*decisions):
    p = Plan()
    for d in decisions:
        p.add(d)
    return p


def test_suspend_resume_keeps_progress_and_charges_restart():
    job = job_from_row(dict(job_id="a", submit_time_s=0, workers=1, duration_s=100))
    b = SimBackend(load_cluster("seed002"), [job], restart_delay_s=30)
    assert isinstance(b.poll()[0], ev.JobArrival)
    b.apply(_plan(Launch("a", (TaskPlacement(0, 0, (0,)),))))
    _drive(b, 40)
    b.apply(_plan(Suspend("a")))
    assert b.usage()[0] == 0 and b.runs["a"].remaining == pytest.approx(60)
    _drive(b, 50)
    b.apply(_plan(Resume("a", (TaskPlacement(0, 1, (2,)),))))
    assert b.usage() == (1, 0, 0)          # holds its GPU while restoring, no progress
    out = b.poll()                         # t=80: restore done (internal), then the finish at 140
    assert [type(e) for e in out] == [ev.JobFinish] and b.now() == pytest.approx(140)
    assert b.job_stats("a")["gpu_s"] == pytest.approx(40 + 90)
    assert b.poll() is None


def test_migrate_and_resize():
    job = job_from_row(dict(job_id="m", submit_time_s=0, workers=2, model="resnet50", batch_size=128,
                            iterations=1000))
    cl = load_cluster("seed002")
    b = SimBackend(cl, [job], restart_delay_s=10)
    b.poll()
    b.apply(_plan(Launch("m", (TaskPlacement(0, 0, (0,)), TaskPlacement(1, 0, (1,))))))
    rate = b.runs["m"].rate
    _drive(b, 20)
    b.apply(_plan(Migrate("m", (TaskPlacement(0, 2, (0,)), TaskPlacement(1, 2, (1,))))))
    assert b.runs["m"].remaining == pytest.approx(1000 - 20 * rate)
    assert b.state.free[0, 0] == 4 and b.state.free[2, 0] == 0
    _drive(b, 40)                      # restored at 30: 10 s of progress since
    assert b.job_stats("m") is not None and b.runs["m"].remaining == pytest.approx(1000 - 30 * rate)
    bigger = job_from_row(dict(job_id="m", submit_time_s=0, workers=4, model="resnet50", batch_size=128,
                               iterations=1000)).tasks
    b.apply(_plan(Resize("m", bigger, tuple(TaskPlacement(i, 0, (i,)) for i in range(4)))))
    assert b.state.free[0, 0] == 0 and b.state.free[2, 0] == 2
    out = b.poll()
    while out is not None and not any(isinstance(e, ev.JobFinish) for e in out):
        out = b.poll()
    rates = [float(d) for _, k, jid, d in b.log if k == "rate" and jid == "m" and float(d) > 0]
    assert rates[-1] > rate            # 4 workers on one node beat 2
    kinds = [k for _, k, jid, _ in b.log if jid == "m"]
    assert kinds.count("stop") == 2 and kinds[-1] == "finish"


def test_event_heap_orders_by_time_priority_then_push_order():
    h = EventHeap()
    h.push(5.0, 3, "arrival-late")
    h.push(1.0, 3, "arrival")
    h.push(1.0, 1, "finish")
    h.push(1.0, 3, "arrival-2")
    assert [h.pop()[3] for _ in range(4)] == ["finish", "arrival", "arrival-2", "arrival-late"]


def test_jobs_sharing_a_gpu_slow_each_other():
    jobs = [job_from_row(dict(job_id=j, submit_time_s=0, model=m, batch_size=64, iterations=1000, mem_gb_per_worker=1))
            for j, m in (("x", "resnet50"), ("y", "vae"))]
    b = SimBackend(load_cluster("seed002"), jobs)
    b.poll()
    b.apply(_plan(Launch("x", (TaskPlacement(0, 0, (0,)),))))
    solo_x = b.runs["x"].rate
    # Over-subscribe GPU 0 of node 0 (a packing policy would do this; the state tracks the load).
    b.apply(_plan(Launch("y", (TaskPlacement(0, 0, (0,)),))))
    f = b.speed.params.factor
    assert b.state.gpu_load[0, 0] == 2 and b.usage()[0] == 1
    assert b.runs["x"].rate == pytest.approx(solo_x * f("resnet50", "vae"))
    solo_y = 1.0 / b.speed.isolated_iter_time(jobs[1], (TaskPlacement(0, 0, (0,)),))
    assert b.runs["y"].rate == pytest.approx(solo_y * f("vae", "resnet50"))


def test_deferred_finishes_give_the_same_event_log(monkeypatch):
    """Finishes that wait outside the heap (SimBackend._push_finish) pop where they would have
    popped had each been pushed at once: the same event log, rates included, and the same final
    clock, on a busy multi-node workload (many re-rates) with node failures."""
    import dlsched
    from dlsched.sim.backend import SimBackend
    events = [(5000.0 * k, 3 * k, False) for k in range(1, 8)] + [(5000.0 * k + 900, 3 * k, True) for k in range(1, 8)]
    runs = []
    for defer in (True, False):
        monkeypatch.setattr(SimBackend, "defer_finishes", defer)
        runs.append(dlsched.simulate("v100-150", "poisson:jobs=300,rate=0.02", "fifo", seed=4, node_events=events))
    a, b = runs
    assert sum(1 for e in a.events if e[1] == "rate") > 300
    assert a.events == b.events and a.decisions == b.decisions
