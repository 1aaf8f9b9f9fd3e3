"""The backend conformance scenario: every registered profile runs one small contended workload
on both backends, the simulator and the real runtime (a `dlsched server` on the session's local
Ray cluster of 4 nodes x 2 virtual GPUs), and each backend carries out every decision the policy
makes. On the runtime that means: every job finishes with exactly its steps, the policy never
fails, and the runs the runtime started are exactly the starts the policy's log asked for
(launches that made a gang whole, resumes, migrations and resizes; none dropped, none made up).
A job that can never fit (co-location's one-server rule) is rejected on both: the simulator
rejects it at arrival, the runtime refuses it at submit (422, with the scheduler's reason). A profile that
needs what the runtime cannot do must be refused at start instead, naming both. Optimus must
resize no run before it has made a step (its settle rule: a CI run once restarted a ps job four
times in a row, each before its first step, until the test's 150 s ran out)."""
from __future__ import annotations

import pytest

from conftest import GPUS, NODES, digits_spec, ps_spec, resized_runs

import dlsched
import dlsched.policies  # noqa: F401
from dlsched.scheduler.eventlog import KINDS
from dlsched.scheduler.framework import REGISTRY

# 10 GPUs asked of 8: someone waits (or shares, or is resized); jobs span several rounds
SCENARIO = (digits_spec(name="c-a", iterations=60, checkpoint_every=10),
            ps_spec(name="c-b", iterations=40, checkpoint_every=10),
            digits_spec(name="c-c", workers=4, iterations=40, checkpoint_every=10),
            digits_spec(name="c-d", iterations=40, checkpoint_every=10))
_STARTS = ("launch", "resume", "migrate", "resize")
_ENDS = ("suspend", "stopped", "held", "finish")


def runs_asked(records: list[dict], ntasks: int) -> int:
    """How many runs the log's decisions ask the backend to start for one job: a launch or
    resume that makes the gang whole, and every migrate or resize."""
    placed: set[int] = set()
    n = 0
    for r in records:
        kind = r["kind"]
        tasks = {tp[0] for tp in r["placements"]}
        if kind in ("migrate", "resize"):
            placed, ntasks = tasks, len(tasks) if kind == "resize" else ntasks
            n += 1
        elif kind in ("launch", "resume"):
            before = len(placed) >= ntasks
            placed |= tasks
            n += int(not before and len(placed) >= ntasks)
        elif kind in _ENDS:
            placed = set()
    return n


def _sim(policy: str):
    from dlsched.cluster import cluster_from_dict
    from dlsched.runtime.spec import RuntimeJobSpec
    jobs = [RuntimeJobSpec(**{k: v for k, v in s.items() if k not in ("entry", "args", "name")}
                           | {"entry": "x.py", "name": s["name"]}).to_jobspec(f"s{i}", 0.0)
            for i, s in enumerate(SCENARIO)]
    cl = cluster_from_dict({"node_groups": [{"count": NODES, "gpus": GPUS, "gpu_mem_gb": 16, "cpus": 2,
                                              "mem_gb": 16}]})
    return dlsched.simulate(cl, jobs, policy, seed=0)


@pytest.fixture(scope="module")
def rt(runtime):
    """The session's runtime, given back with its usual policy after the module."""
    yield runtime
    runtime.restart(policy="fifo")


# Gavel's profiles are one action and one filter (policies/actions/gavel_lease.py) over Gavel's
# policies: an agnostic and a _perf one stand for all 13 here (each costs a server and a run);
# tests/runtime/test_gavel_runtime.py runs them on a cluster of two GPU types.
GAVEL_HERE = ("gavel-fifo", "gavel-max-min-fairness-perf")
PROFILES = [p for p in REGISTRY.names("profile") if not p.startswith("gavel-") or p in GAVEL_HERE]


@pytest.mark.parametrize("policy", PROFILES)
def test_every_profile_on_both_backends(rt, policy):
    sim = _sim(policy)
    sim_state = sim.jobs.set_index("job_id")["state"].to_dict()
    assert set(sim_state.values()) <= {"done", "rejected"}, sim_state    # rejected: can never fit
    assert {r[1] for r in sim.decisions} <= set(KINDS)
    try:
        s = rt.restart(policy=policy, extra=["--round-s", "3"])
    except AssertionError as e:                   # refused at start: only for a capability gap
        assert "needs what the real runtime cannot do" in str(e), str(e)[-2000:]
        return
    ids = []
    for i, spec in enumerate(SCENARIO):
        r = s.post("/jobs", {"spec": spec})
        if sim_state[f"s{i}"] == "rejected":       # the same verdict as simulated, said at submit
            assert r.status_code == 422, (policy, r.text)
            continue
        assert r.status_code == 201, (policy, r.text)
        ids.append((r.json()["job_id"], spec))
    for jid, spec in ids:
        j = s.wait(jid, lambda j: j["state"] in ("done", "failed", "held", "cancelled", "rejected"), 150, "an end")
        assert j["state"] == "done" and j["progress"]["step"] == spec["iterations"], (policy, j)
    log = s.get("/log")
    assert {r["kind"] for r in log} <= set(KINDS)
    for jid, spec in ids:
        mine = [r for r in log if r["job_id"] == jid]
        asked = runs_asked(mine, spec["workers"] + spec.get("ps", 0))
        assert s.get(f"/jobs/{jid}")["attempts"] == asked, (policy, jid, [r["kind"] for r in mine])
    assert "Traceback" not in s.log_tail(50000)
    if policy == "optimus":
        # Optimus sizes the jobs itself from the speeds the runtime measures, and resizes a run
        # only once it has shown its speed (settle; see test_runtime_policies for a resize)
        for jid, _ in ids:
            assert all(n > 0 for _, _, n in resized_runs(s, jid)), (jid, resized_runs(s, jid))
