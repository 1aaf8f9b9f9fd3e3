"""A sweep over queue trees and tenancy modes: `queues` and `tenancy` are grid axes (a bundled
tree or a file, whose content is part of the cell's key), checked before any cell runs, and a
cell runs under its tree and mode (its per-queue metrics in its record)."""
import pytest
import yaml

from dlsched.core.errors import ConfigError
from dlsched.sweep.cells import run_cell
from dlsched.sweep.grid import load_sweep

QUEUES = {"queues": [{"name": "a", "quotas": {"gpu": {"nominal": 4, "borrowing_limit": 0}}},
                     {"name": "b", "quotas": {"gpu": {"nominal": 4}}}]}


def _sweep(tmp_path, params):
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(QUEUES))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"clusters": ["seed002"], "workloads": ["sample"],
                                                     "policies": ["fifo"], "parameters": params}))
    return tmp_path / "s.yaml"


def test_queues_and_modes_are_grid_axes(tmp_path):
    sw = load_sweep(_sweep(tmp_path, {"queues": ["q.yaml", "philly-isolated"], "tenancy": ["kueue", "kai"]}))
    assert len(sw.cells) == 4
    mine = [c for c in sw.cells if c.sim_options()["queues"].endswith("q.yaml")]
    assert {c.sim_options()["tenancy"] for c in mine} == {"kueue", "kai"}
    assert all(any(p.endswith("q.yaml") for p, _ in c.inputs) for c in mine)
    before = mine[0].key()
    (tmp_path / "q.yaml").write_text(yaml.safe_dump({"queues": QUEUES["queues"][:1]}))
    again = [c for c in load_sweep(tmp_path / "s.yaml").cells if c.sim_options()["queues"].endswith("q.yaml")]
    assert before not in {c.key() for c in again}         # another tree: another cell


def test_a_cell_runs_under_its_queues(tmp_path):
    sw = load_sweep(_sweep(tmp_path, {"queues": ["q.yaml"], "tenancy": ["kueue-fair"]}))
    m = run_cell(sw.cells[0])["metrics"]
    assert m["finished"] > 0 and 0 < m["jain_index"] <= 1 and m["max_ftf_rho"] >= 1


@pytest.mark.parametrize("params, field, text", [
    ({"queues": ["nosuch.yaml"]}, "parameters.queues[0]", "neither a bundled queue tree"),
    ({"queues": [3]}, "parameters.queues[0]", "must be a name"),
    ({"tenancy": ["kuebe"]}, "parameters.tenancy[0]", "unknown mode 'kuebe'"),
])
def test_bad_queue_axes_name_the_field(tmp_path, params, field, text):
    with pytest.raises(ConfigError) as e:
        load_sweep(_sweep(tmp_path, params))
    assert e.value.path == field and text in e.value.detail and "s.yaml" in str(e.value)
