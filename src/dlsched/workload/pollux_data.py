"""Where the bundled Pollux data lives and what its applications train for.

The bottom of the Pollux modules: `readers` (the Pollux workload CSVs), `efficiency`
(statistical efficiency from the validation profiles) and `measured` (iteration times from the
placement profiles) all read the same folder and the same per-application epoch counts, so
both live here and this module imports nothing from dlsched. The dependency runs one way:
readers -> efficiency, measured -> pollux_data (tests/unit/test_import_graph.py checks there is
no cycle among the dlsched.workload modules).

Bundled data: `dlsched/data/pollux/` (workloads/, app-profiles/; see its README.md for sources
and licences).
"""
from __future__ import annotations

from pathlib import Path

# The Pollux simulator's applications (simulator/applications.py, branch osdi21-artifact):
# each is trained for max_epochs epochs.
POLLUX_MAX_EPOCHS: dict[str, int] = {
    "bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50,
}


def pollux_data_dir() -> Path:
    """The bundled Pollux data folder (`dlsched/data/pollux`: workloads/, app-profiles/)."""
    return Path(__file__).resolve().parent.parent / "data" / "pollux"
