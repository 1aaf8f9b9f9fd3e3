"""Scenarios: nodes, jobs, expected placements (first fit = the first node that fits, in node
order, one worker at a time)."""
import dlsched
from dlsched.workload.schema import job_from_row


def _placements(result, job_id):
    for t, kind, jid, detail in result.events:
        if kind == "take" and jid == job_id:
            return [int(x.split("@")[1]) for x in detail.split(";")]
    return None


def test_first_fit_fills_nodes_in_order():
    # seed002: nodes 0, 1 have 4 GPUs, nodes 2, 3 have 2.
    jobs = [job_from_row(dict(job_id="a", submit_time_s=0, workers=3, duration_s=10)),
            job_from_row(dict(job_id="b", submit_time_s=1, workers=3, duration_s=10)),
            job_from_row(dict(job_id="c", submit_time_s=2, workers=1, gpus_per_worker=2, duration_s=10))]
    r = dlsched.simulate("seed002", jobs, "fifo")
    assert _placements(r, "a") == [0, 0, 0]
    assert _placements(r, "b") == [0, 1, 1]       # the one GPU left on node 0 first
    assert _placements(r, "c") == [1]             # node 1 still has 2 GPUs


def test_gpu_type_constraint():
    cl = {"node_groups": [
        {"count": 1, "gpus": 4, "gpu_type": "K80", "gpu_mem_gb": 12, "cpus": 8, "mem_gb": 32},
        {"count": 1, "gpus": 4, "gpu_type": "V100", "gpu_mem_gb": 32, "cpus": 8, "mem_gb": 32}]}
    from dlsched.cluster import cluster_from_dict
    jobs = [job_from_row(dict(job_id="v", submit_time_s=0, workers=2, gpu_type="V100", duration_s=10))]
    r = dlsched.simulate(cluster_from_dict(cl), jobs, "fifo")
    assert _placements(r, "v") == [1, 1]
