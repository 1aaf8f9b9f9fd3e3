"""The sweep grid and the plan's pure parts (no Ray): cells, keys, targets, k-section points."""
from pathlib import Path

import pytest

from dlsched.core.errors import DlschedError
from dlsched.sweep.grid import load_sweep
from dlsched.sweep.plan import Search, Target, next_points, parse_target

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sweep.yaml"


def test_the_example_grid_applies_a_component_parameter_to_its_policy_only():
    sw = load_sweep(EXAMPLE)
    by_policy = {}
    for c in sw.cells:
        by_policy.setdefault(c.policy, []).append(c)
    # 2 seeds x 2 start delays; tiresias also x 2 thresholds
    assert {p: len(cs) for p, cs in by_policy.items()} == {"fifo": 4, "tiresias": 8, "sjf": 4}
    t = by_policy["tiresias"][0]
    assert t.policy_settings() == {"params": {"tiresias": {"thresholds": [57600]}}}
    assert set(t.sim_options()) == {"start_delay_s"}
    assert len({c.key() for c in sw.cells}) == len(sw.cells)


def test_a_cell_key_covers_its_own_files_only(tmp_path):
    (tmp_path / "a.csv").write_text("job_id,submit_time_s,workers,duration_s\nj1,0,1,60\n")
    (tmp_path / "b.csv").write_text("job_id,submit_time_s,workers,duration_s\nj1,0,1,60\n")
    f = tmp_path / "s.yaml"
    f.write_text("clusters: [seed000]\nworkloads: [a.csv, b.csv]\npolicies: [fifo]\n")
    before = {Path(c.workload).name: c.key() for c in load_sweep(f).cells}
    (tmp_path / "b.csv").write_text("job_id,submit_time_s,workers,duration_s\nj1,0,1,61\n")
    after = {Path(c.workload).name: c.key() for c in load_sweep(f).cells}
    assert before["a.csv"] == after["a.csv"] and before["b.csv"] != after["b.csv"]


GRID = """clusters: [seed000]
workloads: ["poisson:jobs=20,rate=0.01", sample]
policies: [fifo, sjf]
seeds: 2
parameters:
  start_delay_s: [0, 30]
"""


def test_exclude_leaves_out_the_cells_with_every_value_of_an_entry(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(GRID + "exclude:\n  - {policy: sjf, workload: sample}\n  - {seed: 1, start_delay_s: 30}\n")
    cells = load_sweep(f).cells
    assert not any(c.policy == "sjf" and c.workload == "sample" for c in cells)
    assert not any(c.seed == 1 and dict(c.params)["start_delay_s"] == 30 for c in cells)
    # 16 points; sjf on sample: 4; seed 1 with delay 30: 4, one of them counted in both
    assert len(cells) == 16 - 4 - 4 + 1


@pytest.mark.parametrize("entry,field", [
    ("{policy: sfj}", "exclude[0].policy"),                     # a typo matches nothing: an error
    ("{workload: smaple}", "exclude[0].workload"),
    ("{seed: 2}", "exclude[0].seed"),
    ("{start_delay_s: 31}", "exclude[0].start_delay_s"),
    ("{policy: fifo, polcy: sjf}", "exclude[0].polcy"),
    ("{}", "exclude[0]"),
    ("fifo", "exclude[0]"),
])
def test_a_bad_exclude_entry_is_one_error_naming_its_field(tmp_path, entry, field):
    f = tmp_path / "s.yaml"
    f.write_text(GRID + f"exclude:\n  - {entry}\n")
    with pytest.raises(DlschedError) as e:
        load_sweep(f)
    assert field in str(e.value) and "s.yaml" in str(e.value)


@pytest.mark.parametrize("text,want", [("p95_wait_s<=1h", Target("p95_wait_s", "<=", 3600.0)),
                                       ("mean_jct_s <= 2d", Target("mean_jct_s", "<=", 172800.0)),
                                       ("gpu_util>=0.75", Target("gpu_util", ">=", 0.75))])
def test_targets(text, want):
    assert parse_target(text) == want


def test_a_run_with_jobs_left_over_misses_any_target():
    t = parse_target("p95_wait_s<=1h")
    assert t.met({"p95_wait_s": 10.0, "rejected": 0, "unfinished": 0})
    assert not t.met({"p95_wait_s": 10.0, "rejected": 1, "unfinished": 0})
    assert not t.met({"p95_wait_s": 10.0, "rejected": 0, "unfinished": 3})


@pytest.mark.parametrize("bad", ["", "p95<=1", "p95_wait_s<1h", "p95_wait_s<=-1", "p95_wait_s<=inf"])
def test_bad_targets(bad):
    with pytest.raises(DlschedError):
        parse_target(bad)


def test_k_section_points_are_untried_and_inside_the_open_interval():
    s = Search("fifo", None, lo=3, hi=40, cap=100)
    pts = next_points(s, 3)
    assert len(pts) == 3 and all(3 < p < 40 for p in pts) and pts == sorted(pts)
    s.tried = {p: {} for p in pts}
    assert not set(next_points(s, 3)) & set(pts)
    assert next_points(Search("fifo", None, lo=5, hi=7, cap=100), 4) == [6]
    assert next_points(Search("fifo", None, lo=5, hi=6, cap=100), 4) == []
