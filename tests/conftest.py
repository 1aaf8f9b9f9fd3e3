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


def pytest_collection_modifyitems(session, config, items):
    last = [i for i in items if i.name in LAST]
    items[:] = [i for i in items if i.name not in LAST] + last
