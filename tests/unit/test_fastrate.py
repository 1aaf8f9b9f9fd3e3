"""The compiled re-rate (sim/fastrate.py) gives the event log the Python re-rate gives: the same
events (rate records included), decisions and jobs, on busy multi-node workloads on a cluster
large enough for the compiled shares; with a policy that reads every running job's stats each
round (each read takes the job out of array mode), node failures, and a mid-flight start (jobs
pushed from outside the backend's list: no ranks, the Python path)."""
import pytest

import dlsched
from dlsched.sim import backend as sim_backend
from dlsched.sim import fastrate

pytestmark = pytest.mark.skipif(not fastrate.available(), reason="numba not installed")


@pytest.fixture
def kernel_calls(monkeypatch):
    """How many jobs the compiled re-rate re-rated (rows it took, not handed back)."""
    seen = {"rerated": 0, "calls": 0}
    orig = fastrate.FlowRuns.rerate

    def counting(self, n, slots, shares, *a):
        out = orig(self, n, slots, shares, *a)
        seen["calls"] += 1
        seen["rerated"] += n - out[0]
        return out
    monkeypatch.setattr(fastrate.FlowRuns, "rerate", counting)
    return seen


def _run(monkeypatch, compiled: bool, policy: str, **kw):
    monkeypatch.setattr(sim_backend.SimBackend, "compiled_rerate", compiled)
    return dlsched.simulate("v100-1500", "poisson:jobs=1500,rate=0.05", policy, seed=3, **kw)


@pytest.mark.parametrize("policy,rates", [("fifo", True), ("fifo", False), ("tiresias", True)])
def test_compiled_rerate_same_log(monkeypatch, kernel_calls, policy, rates):
    nodes = [(20_000.0, 3, False), (60_000.0, 3, True), (40_000.0, 700, False)]
    a = _run(monkeypatch, False, policy, record_rates=rates, node_events=nodes)
    assert kernel_calls["calls"] == 0
    b = _run(monkeypatch, True, policy, record_rates=rates, node_events=nodes)
    if policy == "fifo":
        assert kernel_calls["rerated"] > 1000      # the compiled path did the work
    # (tiresias reads every running job's stats each round: each read takes the job out of
    # array mode, so the kernel gets few; the log must be the same all the same)
    # equal values (the Python path may carry a measured profile's np.float64 where the arrays
    # give a float: equal, with another repr)
    assert list(a.events) == list(b.events)
    assert list(a.decisions) == list(b.decisions)
    assert a.jobs.equals(b.jobs)
    if rates:
        assert sum(1 for e in b.events if e[1] == "rate") > 3000


def test_jobs_from_outside_the_list_keep_the_python_path():
    """A backend fed an arrival it did not list (simulate_state pushes them) has no ranks for
    sequence numbers: it never turns the compiled re-rate on."""
    from dlsched.sim.engine import P_ARRIVAL, Arrive
    from dlsched.workload.io import load_workload
    jobs = load_workload("poisson:jobs=300,rate=0.05")
    from dlsched.cluster.topology import load_cluster
    b = sim_backend.SimBackend(load_cluster("v100-1500"), [])
    b.heap.push(0.0, P_ARRIVAL, Arrive(jobs[0]))
    b.poll()
    assert b._ranked is False and b._flows is None
