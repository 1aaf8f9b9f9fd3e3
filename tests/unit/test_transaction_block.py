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
