"""The admission walk answers the rest of a round at once when every shape left in its lanes is
known refused (dlsched.tenancy.view.Shapes): the same admissions, victims, refusals, reasons,
first refused job per queue and counts per queue, round for round, as asking every job."""
from __future__ import annotations

import dataclasses

import pytest

from dlsched import api
from dlsched.tenancy import engine
from dlsched.tenancy.engine import Tenancy
from dlsched.workload.io import load_workload

TREE = ("queues:\n  - {name: u0, quotas: {gpu: {nominal: 4}}}\n"
        "  - {name: u1, quotas: {gpu: {nominal: 4, borrowing_limit: 0}}}\n"
        "  - {name: u2, weight: 2, quotas: {gpu: {nominal: 6}}}\n  - {name: u3, quotas: {gpu: {nominal: 2}}}\n")


def _walks(monkeypatch, q, jobs, policy, mode) -> tuple[list, list]:
    seen: list = []
    admit = Tenancy.admit

    def recording(self, queue, ctx):
        out = admit(self, queue, ctx)
        lanes = getattr(self, "lanes", {})
        seen.append(([r.job_id for r in out], sorted(self.refused), dict(self.refused_in),
                     {r.job_id: r.why for lane in lanes.values() for r in lane if r.job_id in self.refused},
                     {leaf: r.job_id for leaf, r in self._view.pending.items()} if getattr(self, "_view", None) else {}))
        return out

    monkeypatch.setattr(Tenancy, "admit", recording)
    res = api.simulate("v100-2", jobs, policy, seed=1, queues=str(q), tenancy=mode)
    return seen, list(res.decisions)


@pytest.mark.parametrize("mode", ["kueue", "kueue-fair", "kai", "volcano-proportion", "volcano-capacity",
                                  "slurm-fairtree"])
@pytest.mark.parametrize("policy", ["fifo", "tiresias"])
def test_the_rest_answered_at_once_is_what_asking_each_job_gives(monkeypatch, tmp_path, mode, policy):
    q = tmp_path / "q.yaml"
    q.write_text(TREE)
    jobs = [dataclasses.replace(j, queue=j.user, priority=i % 3)
            for i, j in enumerate(load_workload("poisson:jobs=120,rate=0.02,users=4", seed=1))]
    with monkeypatch.context() as m:
        fast, fast_decisions = _walks(m, q, jobs, policy, mode)
    with monkeypatch.context() as m:
        m.setattr(engine, "Shapes", lambda: None)          # every job asked, one by one
        slow, slow_decisions = _walks(m, q, jobs, policy, mode)
    assert fast_decisions == slow_decisions
    assert len(fast) == len(slow)
    for i, (a, b) in enumerate(zip(fast, slow)):
        assert a == b, f"round {i}"
    assert any(r[1] for r in fast)          # the walks refused someone (deep enough to matter)
