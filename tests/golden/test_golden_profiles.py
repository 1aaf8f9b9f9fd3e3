"""Golden runs of every registered profile on one tiny trace (tests/golden/profiles.json): each
job's start and finish, and the summary's JCT, makespan and preemptions. A change in any
policy's behaviour shows up here. The file was written by the code before the policy contract
was reworked (the rework had to keep every figure); after an intended change of behaviour,
rewrite it with `DLSCHED_UPDATE_GOLDEN=1 pytest tests/golden` and review its diff."""
import json
import os
from pathlib import Path

import pytest

import dlsched
import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.scheduler.framework import REGISTRY
from dlsched.workload.schema import job_from_row

GOLDEN = Path(__file__).with_name("profiles.json")
CLUSTER = {"node_groups": [{"count": 2, "gpus": 4, "cpus": 32, "mem_gb": 256, "gpu_type": "V100", "gpu_mem_gb": 32}]}
ROWS = [dict(job_id="a", submit_time_s=0, workers=2, model="resnet50", batch_size=64, iterations=3000),
        dict(job_id="b", submit_time_s=5, workers=4, model="bert", batch_size=32, iterations=800),
        dict(job_id="c", submit_time_s=10, workers=1, ps=1, comm="ps", model="vgg16", batch_size=64, iterations=2000),
        dict(job_id="d", submit_time_s=20, workers=8, duration_s=400),
        dict(job_id="e", submit_time_s=30, workers=1, model="ncf", batch_size=256, iterations=5000),
        dict(job_id="f", submit_time_s=40, kind="tasks", workers=3, cpus_per_worker=8, duration_s=120),
        dict(job_id="g", submit_time_s=300, workers=2, model="resnet50", batch_size=64, iterations=1500)]


def run(policy: str) -> dict:
    r = dlsched.simulate(cluster_from_dict(CLUSTER), [job_from_row(x) for x in ROWS], policy, seed=3)
    jobs = r.jobs.set_index("job_id")
    return {"jobs": {j: [round(float(jobs.loc[j, "first_start_s"]), 6) if jobs.loc[j, "first_start_s"] == jobs.loc[j, "first_start_s"] else None,
                         round(float(jobs.loc[j, "jct_s"]), 6) if jobs.loc[j, "jct_s"] == jobs.loc[j, "jct_s"] else None]
                     for j in sorted(jobs.index)},
            "summary": {k: round(float(r.summary[k]), 6) for k in ("mean_jct_s", "makespan_s", "finished", "preemptions")
                        if k in r.summary}}


@pytest.mark.parametrize("policy", REGISTRY.names("profile"))
def test_golden_profile(policy):
    got = run(policy)
    if os.environ.get("DLSCHED_UPDATE_GOLDEN"):
        data = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        data[policy] = got
        GOLDEN.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n")
        pytest.skip("golden rewritten")
    want = json.loads(GOLDEN.read_text())
    assert policy in want, f"no golden run of {policy}: add it with DLSCHED_UPDATE_GOLDEN=1"
    assert got == want[policy]
