"""Hypothesis properties over random workloads and every registered profile: no node is ever
over-allocated, gangs are all or nothing, simulated time never goes back, GPU-seconds held by
jobs add up to the integral of allocated GPUs, and no thrash (no plan suspends a job and starts
it again, no job is suspended twice at one instant). 500 examples in `make test`, 10,000 in
`make property` (the Hypothesis profiles in tests/conftest.py)."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlsched.policies  # noqa: F401
from dlsched.cluster import load_cluster
from dlsched.core.types import Launch, Migrate, Resize, Resume, Suspend
from dlsched.metrics import build_result
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.scheduler.framework import REGISTRY
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

MODELS = [None, "resnet50", "bert", "ncf", "vgg16"]

job_rows = st.lists(st.fixed_dictionaries({
    "submit_time_s": st.floats(0, 500),
    "workers": st.integers(1, 8),
    "gpus_per_worker": st.sampled_from([0, 1, 2]),
    "cpus_per_worker": st.sampled_from([1, 4, 16]),
    "model": st.sampled_from(MODELS),
    "work": st.floats(1, 300),
    "kind": st.sampled_from(["dl", "dl", "tasks"]),
}), min_size=1, max_size=25)


def _jobs(rows):
    out = []
    for i, r in enumerate(rows):
        row = dict(job_id=f"j{i}", submit_time_s=r["submit_time_s"], workers=r["workers"], kind=r["kind"],
                   gpus_per_worker=r["gpus_per_worker"], cpus_per_worker=r["cpus_per_worker"])
        if r["kind"] == "dl" and r["model"]:
            row.update(model=r["model"], iterations=r["work"] * 10)
        else:
            row.update(duration_s=r["work"])
        out.append(job_from_row(row))
    return out


LIVELOCK_S = 1e6


class CheckedBackend(SimBackend):
    """SimBackend that checks invariants after every step."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.violations = []
        self.last_time = 0.0
        self.max_gpu_load = 0
        self.suspended_at: dict[str, float] = {}

    def poll(self):
        out = super().poll()
        if self._now < self.last_time:
            self.violations.append(f"time went back {self.last_time} -> {self._now}")
        self.last_time = self._now
        if self._now > LIVELOCK_S and out is not None:
            # at most 25 jobs of <= 300 s of work, submitted by t=500: a run this long is a job
            # that waits for ever (pollux once left one so, and the run never ended)
            self.violations.append(f"still running at t={self._now:.0f} s: a job that can never start?")
            return None
        return out

    def apply(self, plan):
        stopped = {d.job_id for d in plan.decisions if isinstance(d, Suspend)}
        started = {d.job_id for d in plan.decisions if isinstance(d, (Launch, Resume, Migrate, Resize))}
        if stopped & started:
            self.violations.append(f"thrash: {sorted(stopped & started)} suspended and started in one plan")
        for j in stopped:
            if self.suspended_at.get(j) == self._now:
                self.violations.append(f"thrash: {j} suspended twice at t={self._now}")
            self.suspended_at[j] = self._now
        for d in plan.decisions:
            if isinstance(d, (Launch, Resume)) and self.gang:
                r = self.runs[d.job_id]
                if r.spec.kind == "dl" and len(d.placements) + len(r.placements) != len(r.tasks):
                    self.violations.append(f"gang broken for {d.job_id}")
        super().apply(plan)
        self.max_gpu_load = max(self.max_gpu_load, int(self.state.gpu_load.max(initial=0)))
        try:
            self.state.check()
        except AssertionError as e:
            self.violations.append(str(e))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=job_rows, policy=st.sampled_from(REGISTRY.names("profile")))
def test_invariants_hold_for_every_profile(rows, policy):
    cl = load_cluster("seed002")
    jobs = _jobs(rows)
    profile = build_profile(policy)
    backend = CheckedBackend(cl, jobs, restart_delay_s=0)
    backend.gang = profile.gang
    sched = Scheduler(profile)
    sched.run(backend)
    assert backend.violations == []
    times = [e[0] for e in backend.log]
    assert times == sorted(times)
    res = build_result(sched, backend, policy=policy, cluster_name="seed002", workload_name="h")
    # Every job ends finished or rejected (nothing in these workloads can deadlock a gang profile).
    if profile.gang:
        assert res.summary["unfinished"] == 0
    # GPU-seconds held by jobs == integral of busy GPUs over the whole run when no GPU is shared;
    # with over-subscription (Gandiva) each busy GPU-second is held by 1..max_load jobs.
    tl = res.timeline
    t = tl.time_s.to_numpy()
    end = max(t[-1], backend.now())
    integral = float(np.sum(tl.allocated_gpus.to_numpy() * np.diff(np.append(t, end))))
    held = res.jobs.gpu_s.sum()
    tol = 1e-6 * max(1.0, integral)
    if backend.max_gpu_load <= 1:
        assert abs(held - integral) < tol
    else:
        assert integral - tol <= held <= backend.max_gpu_load * integral + tol
    # Nothing holds resources at the end.
    assert (backend.state.free[:, 1:] == cl.capacity[:, 1:]).all() or res.summary["unfinished"] > 0
