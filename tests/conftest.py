"""Shared pytest fixtures.

The public traces live outside the project, in ../shared/traces (relative to the project
root); tests that need them take the `shared_traces` fixture and are skipped without them."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis: 500 examples per property in `make test`; `make property` runs 10,000
# (DLSCHED_HYPOTHESIS=property). Tests that set their own max_examples keep it.
_H = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=500, **_H)
settings.register_profile("property", max_examples=10_000, **_H)
settings.load_profile(os.environ.get("DLSCHED_HYPOTHESIS", "ci"))

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.fixture
def shared_traces() -> Path:
    """The ../shared/traces folder; skips the test when it is missing."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"{SHARED_TRACES} not available")
    return SHARED_TRACES


# Runs after every other test: it takes node n3 out of the runtime tests' shared Ray cluster for
# good, and later tests (the web view's, what-if's) need every GPU of it.
LAST = ("test_killed_node_job_resumes_elsewhere",)


# The tests that start Ray, in two xdist scopes (tests/conftest.py's scheduler; `make test` runs
# two workers): "ray", the tests of the runtime's shared cluster and server, one after another in
# one worker; and "ray-own", the tests that start a Ray of their own (the fidelity check's cluster,
# the sweep's local Ray, the GPU-sharing scenario's process, `dlsched up`'s embedded cluster, the
# chaos run's 3 nodes), one after another in the other. (The chaos run sat in "ray": a third
# cluster beside the shared one and another's, and `dlsched up`'s cluster once failed to start
# under that load.) So
# at most two Ray clusters run at once, never two in one process (Ray keeps per-process driver
# state; see test_gpu_sharing.py). Every other test is a scope of its own, spread over both.
# (xdist's `xdist_group` mark would do this, but not under pytest 9.2, whose node ids xdist 3.8
# can no longer rename.)
RAY_OWN = ("tests/integration/test_runtime_fidelity.py", "tests/integration/test_sweep_plan.py",
           "tests/runtime/test_gpu_sharing.py", "tests/runtime/test_up_down.py", "tests/runtime/test_ray_exposure.py",
           "tests/runtime/test_chaos.py", "tests/integration/test_benchmarks_smoke.py::test_ray_benchmark",
           "tests/runtime/test_gavel_runtime.py", "tests/runtime/test_pollux_runtime.py",
           "tests/integration/test_gavel_semantics.py::test_the_experiment_runs_its_policies_side_by_side_on_ray")
RAY_SHARED = ("tests/runtime/",)

try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:          # pytest without xdist: one process, the hook below is not defined
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:
    class _RayApart(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(RAY_OWN):
                return "ray-own"
            return "ray" if nodeid.startswith(RAY_SHARED) else nodeid

    def pytest_xdist_make_scheduler(config, log):
        return _RayApart(config, log)


def pytest_collection_modifyitems(session, config, items):
    last = [i for i in items if i.name in LAST]
    items[:] = [i for i in items if i.name not in LAST] + last
