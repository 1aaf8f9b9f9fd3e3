"""Transaction.reserve_block gives the same placements, GPU slots and free resources as reserving
the tasks one by one (it is the bulk path of Optimus's placement)."""
import numpy as np
import pytest

from dlsched.cluster import cluster_from_dict
from dlsched.core.types import Role, TaskSpec
from dlsched.scheduler.transaction import Transaction
from dlsched.sim.backend import SimBackend

CL = cluster_from_dict({"node_groups": [{"count": 2, "gpus": 8, "gpu_mem_gb": 32, "cpus": 64, "mem_gb": 512}]})


@pytest.mark.parametrize("gpus,count,preload", [(1, 5, None), (1, 11, None), (1, 6, [0, 2, 1, 0, 0, 3, 0, 1]),
                                                (2, 3, [1, 0, 0, 1, 0, 0, 2, 0]), (0, 4, None), (1, 9, [1] * 8)])
def test_block_equals_one_by_one(gpus, count, preload):
    tasks = [TaskSpec(i, Role.WORKER, (float(gpus), 2.0, 8.0, 0.0, 0.0)) for i in range(count)]
    txns = []
    for _ in range(2):
        txn = Transaction(SimBackend(CL, []).snapshot())
        if preload:
            txn.gpu_load[1, :8] = preload
        txns.append(txn)
    for t in tasks:
        txns[0].reserve("j", t, 1)
    txns[1].reserve_block("j", tasks, 1)
    assert txns[0].reserved("j") == txns[1].reserved("j")
    assert np.array_equal(txns[0].gpu_load, txns[1].gpu_load)
    assert np.allclose(txns[0].free, txns[1].free)
    assert np.array_equal(txns[0].gpu_used, txns[1].gpu_used)


def test_a_fraction_of_a_gpu_never_goes_onto_a_gpu_a_whole_task_holds():
    # node 0 of 2 GPUs: a whole-GPU task on GPU 0, a half on GPU 1; the next half goes to GPU 1
    # (best fit), not to GPU 0 (the lowest of the equally loaded); a third half fits nowhere:
    # the least loaded then (a policy over-subscribing). Discard gives everything back.
    cl = cluster_from_dict({"node_groups": [{"count": 1, "gpus": 2, "gpu_mem_gb": 16, "cpus": 8, "mem_gb": 64}]})
    txn = Transaction(SimBackend(cl, []).snapshot())
    whole = TaskSpec(0, Role.WORKER, (1.0, 1.0, 1.0, 0.0, 0.0))
    half = [TaskSpec(i, Role.WORKER, (0.5, 1.0, 1.0, 0.0, 0.0)) for i in range(3)]
    assert txn.reserve("a", whole, 0).gpu_ids == (0,)
    assert txn.reserve("b", half[0], 0).gpu_ids == (1,)
    assert txn.reserve("c", half[1], 0).gpu_ids == (1,)
    assert txn.gpu_used[0].tolist() == [1.0, 1.0]
    assert txn.reserve("d", half[2], 0).gpu_ids == (0,)
    txn.reserve_block("e", [TaskSpec(0, Role.WORKER, (0.5, 1.0, 1.0, 0.0, 0.0))], 0)
    for j in "abcde":
        txn.discard(j)
    assert txn.gpu_used[0].tolist() == [0.0, 0.0] and txn.gpu_load[0].tolist() == [0, 0]
