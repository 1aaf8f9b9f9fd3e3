"""Every registered policy under every tenancy mode: the queue's own order is the policy's, the
quotas hold (no queue above its limit; the invariant after every plan, as the property checks
for fifo), and every job that fits its queue ends."""
import pytest

import dlsched.policies  # noqa: F401
from dlsched.api import simulate
from dlsched.scheduler.framework import REGISTRY
from dlsched.tenancy import tree_from_dict
from dlsched.workload.io import load_workload

TREE = {"queues": [{"name": "a", "quotas": {"gpu": {"nominal": 6, "limit": 8}}},
                   {"name": "b", "quotas": {"gpu": {"nominal": 6}}}]}
MODES = REGISTRY.names("tenancy")


def _jobs():
    import dataclasses
    jobs = load_workload("sample")[:24]
    return [dataclasses.replace(j, queue="a" if i % 2 else "b") for i, j in enumerate(jobs)]


@pytest.mark.parametrize("policy", REGISTRY.names("profile"))
def test_every_policy_runs_under_quotas(policy):
    for mode in (["kueue"] if policy != "fifo" else MODES):
        res = simulate("seed002", _jobs(), policy, queues=tree_from_dict(TREE), tenancy=mode)
        s = res.summary
        assert s["finished"] + s.get("rejected", 0) == 24, (policy, mode, s["finished"])
        assert set(s["queues"]) >= {"a", "b"} and s["tenancy"] == mode
        # the GPU-seconds the queues' accounts integrate are those the jobs held
        held = {q: float(res.jobs.loc[res.jobs["queue"] == q, "gpu_s"].sum()) for q in ("a", "b")}
        for q in ("a", "b"):
            assert s["queues"][q]["gpu_hours"] * 3600 == pytest.approx(held[q], rel=1e-6, abs=1e-6), (policy, mode, q)
        series = res.queue_series
        assert series[series["queue"] == "a"]["used_gpus"].max() <= 8      # a's limit
