"""Shared pytest fixtures.

The public traces live outside the project, in ../shared/traces (relative to the project
root); tests that need them take the `shared_traces` fixture and are skipped without them."""
from __future__ import annotations

from pathlib import Path

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.fixture
def shared_traces() -> Path:
    """The ../shared/traces folder; skips the test when it is missing."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"{SHARED_TRACES} not available")
    return SHARED_TRACES
