"""A tenancy whose parts do not change with time is quiet after a round that decided nothing
(Tenancy.quiet_until): its periodic rounds are skipped until an event, with the same decisions,
events and metrics as running every one; and a queue it can never admit no longer ticks for
ever (docs/tenancy.md, "Quiet rounds")."""
from __future__ import annotations

import dataclasses
import math
import signal

import pytest

from dlsched import api
from dlsched.tenancy.engine import Tenancy
from dlsched.workload.io import load_workload

TREE = ("queues:\n  - {name: u0, quotas: {gpu: {nominal: 4}}}\n"
        "  - {name: u1, quotas: {gpu: {nominal: 4, borrowing_limit: 0}}}\n"
        "  - {name: u2, weight: 2, quotas: {gpu: {nominal: 6}}}\n  - {name: u3, quotas: {gpu: {nominal: 2}}}\n")


def _jobs(spec: str):
    return [dataclasses.replace(j, queue=j.user) for j in load_workload(spec, seed=1)]


def _flat(d: dict, pre: str = "") -> dict:
    skip = ("sched_time_s", "sched_rounds", "sched_round_mean_ms", "sched_round_max_ms", "provenance")
    out = {}
    for k, v in d.items():
        if k in skip:
            continue
        if isinstance(v, dict):
            out.update(_flat(v, f"{pre}{k}."))
        else:
            out[f"{pre}{k}"] = v
    return out


def _within(seconds: int):
    """Fail instead of hanging (a simulation that ticks for ever)."""
    def stop(*_):
        raise TimeoutError(f"the simulation did not end within {seconds} s")
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)


@pytest.mark.parametrize("mode", ["kueue", "kueue-fair", "kai", "volcano-proportion", "volcano-capacity",
                                  "slurm-fairtree"])
@pytest.mark.parametrize("policy", ["tiresias", "gandiva"])
def test_quiet_rounds_skipped_change_nothing(monkeypatch, tmp_path, mode, policy):
    q = tmp_path / "q.yaml"
    q.write_text(TREE)
    jobs = _jobs("poisson:jobs=60,rate=0.01,users=4")
    quiet = api.simulate("v100-2", jobs, policy, seed=1, queues=str(q), tenancy=mode)
    monkeypatch.setattr(Tenancy, "quiet_until", lambda self, now, running: now)   # never quiet
    every = api.simulate("v100-2", jobs, policy, seed=1, queues=str(q), tenancy=mode)
    assert list(quiet.decisions) == list(every.decisions)
    assert list(quiet.events) == list(every.events)
    # the same metrics, to rounding: the queues' GPU-hours are integrated from round to round,
    # in fewer steps when rounds are skipped
    a, b = _flat(quiet.summary), _flat(every.summary)
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], float) and isinstance(b[k], float):
            assert a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-9, nan_ok=True), k
        else:
            assert a[k] == b[k], k
    assert quiet.summary["mean_wait_s"] > 3600          # a deep queue: quota held jobs back
    if mode in ("kai", "slurm-fairtree"):                # decayed usage: its order moves with time
        assert quiet.summary["sched_rounds"] == every.summary["sched_rounds"]
    else:
        assert quiet.summary["sched_rounds"] * 10 < every.summary["sched_rounds"]


def test_a_queue_never_admitted_ends_the_simulation(tmp_path):
    """volcano-proportion: three queues each wait with an 8-GPU gang and each deserves 16/3
    GPUs, so none is ever admitted (Volcano's rule, as Volcano has it). The simulation ends
    when no event is left, with those jobs queued; it used to tick every round_s for ever."""
    q = tmp_path / "q.yaml"
    q.write_text("queues:\n" + "".join(f"  - {{name: u{i}, quotas: {{gpu: {{nominal: 4}}}}}}\n" for i in range(4)))
    _within(120)
    try:
        res = api.simulate("v100-2", _jobs("poisson:jobs=80,rate=0.02,users=4"), "tiresias", seed=1,
                           queues=str(q), tenancy="volcano-proportion")
    finally:
        signal.alarm(0)
    left = res.jobs[res.jobs["state"] != "done"]
    assert res.summary["unfinished"] == len(left) > 0
    assert set(left["state"]) == {"queued"} and set(left["gpus"]) == {8.0}
    assert left["queue"].nunique() >= 2                 # each waits on another's demand
    assert math.isfinite(res.summary["makespan_s"])
