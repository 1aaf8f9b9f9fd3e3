"""A sweep under Gavel's round mechanism (`semantics: gavel` in a sweep file): its grid, its bad
input, and one cell run as a Ray task runs it (dlsched.sweep.cells.run_cell)."""
import pytest

from dlsched.core.errors import ConfigError
from dlsched.sweep.cells import run_cell
from dlsched.sweep.grid import load_sweep

BASE = """semantics: gavel
clusters: [gavel-4:4:4]
workloads: ["gavel:rate=0.5,jobs=400"]
policies: [gavel-fifo, gavel-gandiva]
seeds: [0]
"""


def test_the_figure8_example_is_every_policy_at_every_rate():
    s = load_sweep("examples/gavel-figure8.yaml")
    assert len(s.cells) == 8 * 9
    assert all(c.sim_options() == {"semantics": "gavel", "window": (4000, 5000)} for c in s.cells)


def test_a_gavel_cell_runs_and_reports_its_windows_mean_jct(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(BASE + "parameters:\n  window: [[20, 60]]\n")
    cells = load_sweep(f).cells
    assert [c.policy for c in cells] == ["gavel-fifo", "gavel-gandiva"]
    m = run_cell(cells[1])["metrics"]
    assert m["window_mean_jct_s"] > 0 and m["finished"] >= 40


@pytest.mark.parametrize("extra, field", [
    ("semantics: gavl\n", "semantics"),
    ("parameters:\n  window: [[60, 20]]\n", "parameters.window[0]"),
    ("parameters:\n  round_s: [60]\n", "parameters.round_s"),
])
def test_bad_gavel_sweeps_are_one_error_naming_the_field(tmp_path, extra, field):
    f = tmp_path / "s.yaml"
    f.write_text(BASE.replace("semantics: gavel\n", "") + ("" if "semantics" in extra else "semantics: gavel\n") + extra)
    with pytest.raises(ConfigError) as e:
        load_sweep(f)
    assert field in str(e.value)


def test_a_packing_policy_needs_gavels_semantics(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(BASE.replace("semantics: gavel\n", ""))
    with pytest.raises(ConfigError, match="unknown policy 'gavel-gandiva'"):
        load_sweep(f)
