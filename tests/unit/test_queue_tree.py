"""The queue tree (dlsched.tenancy.tree): the least form the issue names loads as written, every
system's record maps onto one Quota, and each bad input is one line with file, line and field."""
from __future__ import annotations

import pytest

from dlsched.core.errors import ConfigError
from dlsched.tenancy import DEFAULT_QUEUE, default_tree, load_queues

LEAST = """\
queues:
  - name: team-a
    weight: 1
    quotas:
      gpu: {nominal: 4, borrowing_limit: 0}
  - name: team-b
    quotas:
      gpu: {nominal: 4}          # no borrowing_limit: may borrow what the cohort has idle
"""


def _write(tmp_path, text: str):
    p = tmp_path / "queues.yaml"
    p.write_text(text)
    return p


def test_the_least_form_loads_as_written(tmp_path):
    t = load_queues(_write(tmp_path, LEAST))
    assert t.leaves == ["team-a", "team-b"]
    a, b = t.nodes["team-a"].quota("gpu"), t.nodes["team-b"].quota("gpu")
    assert (a.nominal, a.borrowing_limit, a.lending_limit, a.limit) == (4.0, 0.0, None, None)
    assert (b.nominal, b.borrowing_limit) == (4.0, None)
    assert default_tree().leaves == [DEFAULT_QUEUE]


def test_a_tree_with_inner_nodes_types_and_every_field(tmp_path):
    t = load_queues(_write(tmp_path, """\
queues:
  - name: research
    quotas: {gpu: {nominal: 2, limit: 20}}
  - name: vision
    parent: research
    weight: 3
    priority: 2
    quotas:
      gpu: {nominal: 8, borrowing_limit: 4, lending_limit: 2, limit: 16}
      gpu:V100: 4
      cpu: {nominal: 64}
  - name: nlp
    parent: research
    quotas: {gpu: 8}
"""))
    assert t.leaves == ["vision", "nlp"] and not t.is_leaf("research") and t.ancestors("nlp") == ["research"]
    v = t.nodes["vision"]
    assert (v.weight, v.priority) == (3.0, 2) and v.quota("gpu:V100").nominal == 4.0
    assert v.quota("gpu").guaranteed == 6.0                     # nominal - lending_limit: never lent
    assert t.resources() == ["cpu", "gpu", "gpu:V100"]


@pytest.mark.parametrize("text, line, field, why", [
    ("queues:\n  - name: a\n    parent: b\n  - name: b\n    parent: a\n", 3, "queues[0].parent", "a cycle: a -> b -> a"),
    ("queues:\n  - name: p\n    quotas: {gpu: {limit: 4}}\n  - name: c1\n    parent: p\n    quotas: {gpu: 3}\n"
     "  - name: c2\n    parent: p\n    quotas:\n      gpu: 2\n", 10, "queues[2].quotas.gpu.nominal", "more than its limit of 4"),
    ("queues:\n  - name: a\n    quotas:\n      gpu: {nominal: -1}\n", 4, "queues[0].quotas.gpu.nominal", "must be >= 0"),
    ("queues:\n  - name: a\n    quotas:\n      gpu: {nominal: 2, lending_limit: 3}\n", 4,
     "queues[0].quotas.gpu.lending_limit", "at most the nominal quota (2)"),
    ("queues:\n  - name: a\n    parent: nowhere\n", 3, "queues[0].parent", "unknown queue 'nowhere'"),
    ("queues:\n  - name: a\n  - name: a\n", 3, "queues[1].name", "named twice"),
    ("queues:\n  - name: a\n    quotas:\n      tpu: 3\n", 4, "queues[0].quotas.tpu", "unknown resource"),
    ("queues:\n  - name: a\n    wieght: 2\n", 3, "queues[0].wieght", "unknown field"),
])
def test_bad_input_names_file_line_and_field(tmp_path, text, line, field, why):
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_queues(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}, line {line}: {field}: ") and why in msg, msg
