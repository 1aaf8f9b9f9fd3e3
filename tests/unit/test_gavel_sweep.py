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


def test_the_figure8_example_is_every_point_of_gavels_figure():
    """Every policy of the experiment at every rate where Gavel's notebook has a figure: 67 of the
    8 x 9 points (the five it lacks are left out by the file's `exclude`)."""
    from dlsched.experiments.gavel_continuous import CHECKED, PUBLISHED, RATES
    s = load_sweep("examples/gavel-figure8.yaml")
    got = {(c.policy, float(c.workload.split("rate=")[1].split(",")[0])) for c in s.cells}
    want = {(PUBLISHED[label][0], r) for label in CHECKED for r, v in zip(RATES, PUBLISHED[label][1]) if v is not None}
    assert got == want and len(s.cells) == 67
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
