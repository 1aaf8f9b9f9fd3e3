"""Switch-cost books: a restart is charged the time it actually held its resources without
progress. A restart cut short (the job stopped again before its restart_delay_s was over) is
charged what it spent, not the whole delay, so that per job

    GPU-seconds held = GPU-seconds of progress + switch_lost_gpu_s."""
import numpy as np
import pytest

import dlsched
from dlsched.cluster import load_cluster
from dlsched.core.types import Launch, Migrate, Plan, Resume, Suspend, TaskPlacement
from dlsched.scheduler import events as ev
from dlsched.sim import SimBackend
from dlsched.workload.schema import job_from_row

DELAY = 30.0


def _plan(*decisions):
    p = Plan()
    for d in decisions:
        p.add(d)
    return p


def _drive(b, t):
    b.wake_at(t)
    b.poll()
    assert b.now() == t


def _on(node, *gpus):
    return tuple(TaskPlacement(i, node, (g,)) for i, g in enumerate(gpus))


def _finish(b):
    while (out := b.poll()) is not None:
        if any(isinstance(e, ev.JobFinish) for e in out):
            return b.now()
    raise AssertionError("the job did not finish")


def _backend(**kw):
    job = job_from_row(dict(job_id="a", submit_time_s=0, workers=2, duration_s=100))
    b = SimBackend(load_cluster("seed002"), [job], restart_delay_s=DELAY, **kw)
    b.poll()
    b.apply(_plan(Launch("a", _on(0, 0, 1))))
    _drive(b, 40)
    b.apply(_plan(Suspend("a")))                   # 60 s of work left
    _drive(b, 50)
    b.apply(_plan(Resume("a", _on(0, 0, 1))))      # restarting until 80
    return b


def test_restart_cut_short_is_charged_the_time_it_spent():
    b = _backend()
    _drive(b, 60)
    b.apply(_plan(Suspend("a")))                   # 10 s into its 30 s restart
    st = b.job_stats("a")
    assert st["switch_lost_s"] == 10.0 and st["switch_lost_gpu_s"] == 20.0   # not 30 / 60
    _drive(b, 70)
    b.apply(_plan(Resume("a", _on(0, 2, 3))))      # a whole restart: 70..100, then 60 s of work
    assert _finish(b) == pytest.approx(160)
    st = b.job_stats("a")
    assert st["switch_lost_s"] == pytest.approx(10 + 30)
    assert st["switch_lost_gpu_s"] == pytest.approx(2 * (10 + 30))
    assert st["gpu_s"] == pytest.approx(2 * 100 + st["switch_lost_gpu_s"])   # held = work + lost


def test_restart_cut_by_a_node_failure_is_charged_the_time_it_spent():
    b = _backend(node_events=[(65.0, 0, False)])
    out = b.poll()                                 # node 0 fails 15 s into the restart
    assert b.now() == 65 and any(isinstance(e, ev.JobStopped) for e in out)
    st = b.job_stats("a")
    assert st["switch_lost_s"] == pytest.approx(15) and st["switch_lost_gpu_s"] == pytest.approx(30)
    b.apply(_plan(Resume("a", _on(1, 0, 1))))
    assert _finish(b) == pytest.approx(65 + 30 + 60)
    st = b.job_stats("a")
    assert st["switch_lost_gpu_s"] == pytest.approx(2 * (15 + 30))
    assert st["gpu_s"] == pytest.approx(2 * 100 + st["switch_lost_gpu_s"])


def test_stopping_a_stopped_job_again_takes_nothing_more_back():
    # A Migrate of a suspended job stops it again (nothing held): its cut-short restart was
    # settled at the Suspend and is not settled twice.
    b = _backend()
    _drive(b, 55)
    b.apply(_plan(Suspend("a")))                   # 5 s spent
    _drive(b, 56)
    b.apply(_plan(Migrate("a", _on(2, 0, 1))))     # its restart 56..86 runs whole
    assert b.job_stats("a")["switch_lost_s"] == pytest.approx(5 + 30)
    assert _finish(b) == pytest.approx(86 + 60)
    st = b.job_stats("a")
    assert st["switch_lost_s"] == pytest.approx(35) and st["switch_lost_gpu_s"] == pytest.approx(70)
    assert st["gpu_s"] == pytest.approx(2 * 100 + 70)


def _busy_jobs(n=200, span=2000.0, seed=1):
    """Jobs without a model (each runs at rate 1 wherever it is placed: its useful work is
    duration_s x its GPUs), arriving faster than the seed002 cluster runs them."""
    rng = np.random.default_rng(seed)
    return [job_from_row(dict(job_id=f"j{i:03d}", submit_time_s=float(rng.uniform(0, span)),
                              workers=int(rng.choice([1, 2, 4])), duration_s=float(rng.integers(20, 2000))))
            for i in range(n)]


def _cut_restarts(events, delay):
    """Stops that came less than `delay` after the job's re-take (a restart cut short)."""
    taken, stopped, n = {}, set(), 0
    for t, kind, jid, _ in events:
        if kind == "take" and jid in stopped:
            taken[jid] = t
        elif kind == "stop":
            stopped.add(jid)
            n += jid in taken and t < taken[jid] + delay
            taken.pop(jid, None)
    return n


@pytest.mark.parametrize("policy", ["srtf", "tiresias"])
def test_books_balance_per_job_under_preemption(policy):
    jobs = _busy_jobs()
    res = dlsched.simulate("seed002", jobs, policy, restart_delay_s=DELAY)
    if policy == "srtf":
        assert _cut_restarts(res.events, DELAY) > 10       # the case this guards
    t = res.jobs.set_index("job_id")
    assert (t.state == "done").all() and res.summary["partial_hold_gpu_s"] == 0
    assert (t.switch_lost_gpu_s > 0).any()
    useful = np.array([j.duration_s * j.gpus for j in jobs])
    t = t.loc[[j.job_id for j in jobs]]
    np.testing.assert_allclose(t.gpu_s.to_numpy(), useful + t.switch_lost_gpu_s.to_numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(t.switch_lost_gpu_s.to_numpy(), t.switch_lost_s.to_numpy() * t.gpus.to_numpy(),
                               rtol=1e-12, atol=1e-9)
    assert res.summary["gpu_s_held"] == pytest.approx(useful.sum() + res.summary["switch_lost_gpu_s"], rel=1e-12)
