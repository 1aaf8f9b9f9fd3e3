"""Gavel's policies on the real runtime, on an embedded cluster of two GPU types: a _perf policy
gives a type-sensitive job the faster type, and it finishes sooner than under the agnostic one.

Its own cluster (two nodes of one virtual GPU each, GPU types `fast` and `slow`, 2 CPUs; no
dashboard, small object store), so it runs in the ray-own scope (tests/conftest.py RAY_OWN).
The job is examples/timed_steps.py with a step of 0.1 s on `fast` and 0.5 s on `slow`; the
throughput table (CSV, given to the policy's `gavel_lease` through --policy-config) says the
same: 10 and 2 steps/s. `gavel-fifo-perf` puts a job on the type where it is fastest;
`gavel-fifo`, type-agnostic, on the last type with a free GPU by name (Gavel's code: `slow`).
The two runs' calibration (GET /report) then serves as a throughput table: the runtime measured
the job's step time on each type."""
from __future__ import annotations

import pytest

from conftest import EXAMPLES, ServerProc

TABLE = "# reference: fast\njob_type,gpus,gpu_type,steps_per_s\nsensitive,1,fast,10\nsensitive,1,slow,2\n"


@pytest.fixture(scope="module")
def two_types():
    from dlsched.runtime.cluster import LocalRay
    with LocalRay(2, 1, cpus_per_node=2, gpu_type=("fast", "slow")) as r:
        yield r.cluster


def test_a_perf_policy_gives_the_sensitive_job_the_faster_type_and_finishes_sooner(two_types, tmp_path):
    table = tmp_path / "speeds.csv"
    table.write_text(TABLE)
    cfg = tmp_path / "policy.yaml"
    cfg.write_text("policies:\n" + "".join(
        f"  {p}:\n    params:\n      gavel_lease:\n        throughputs: {table}\n" for p in ("gavel-fifo-perf", "gavel-fifo")))
    spec = {"name": "sensitive", "entry": str(EXAMPLES / "timed_steps.py"), "model": "sensitive",
            "args": {"step_s": {"fast": 0.1, "slow": 0.5}, "serial": 1.0, "seed": 0},
            "workers": 1, "gpus_per_worker": 1, "batch_size": 16, "iterations": 40, "checkpoint_every": 20}
    got, cals = {}, []
    for policy in ("gavel-fifo-perf", "gavel-fifo"):
        sd = tmp_path / policy
        sd.mkdir()
        s = ServerProc(two_types.address, sd, policy, "gavel", extra=["--policy-config", str(cfg), "--round-s", "2"])
        s.start()
        try:
            types = {n["name"]: n["gpu_type"] for n in s.get("/nodes")}
            assert sorted(types.values()) == ["fast", "slow"]
            jid = s.submit(spec)
            j = s.wait(jid, lambda j: j["state"] in ("running", "done") and j["allocation"], 120, "running")
            ran_on = {types[a["node"]] for a in j["allocation"]}
            j = s.wait_state(jid, "done", 180)
            # from its start: the first server of the test also warms the cluster's workers up
            got[policy] = (ran_on, j["finish_time"] - j["start_time"])
            cals.append(s.get("/report")["calibration"])
            assert "Traceback" not in s.log_tail(50000)
        finally:
            s.stop()
    assert got["gavel-fifo-perf"][0] == {"fast"} and got["gavel-fifo"][0] == {"slow"}, got
    # 40 steps: about 4 s on fast, 20 s on slow (plus the same start of the program)
    assert got["gavel-fifo-perf"][1] + 8 < got["gavel-fifo"][1], got
    # the runtime measured the job's step time on each type: its calibration, as a throughput
    # table, says fast runs it about 5x as fast (0.1 s against 0.5 s a step)
    import json

    from dlsched.runtime.calibration import merge_calibrations
    from dlsched.workload.throughputs import ThroughputTable
    f = tmp_path / "calibration.json"
    f.write_text(json.dumps(merge_calibrations(cals)))
    measured = ThroughputTable.load(str(f))
    ratio = measured.steps_per_s("sensitive", 1, "fast") / measured.steps_per_s("sensitive", 1, "slow")
    assert 3.5 < ratio < 6.0, ratio
