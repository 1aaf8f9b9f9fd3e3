"""Transaction's copy on write: a transaction that copies the snapshot's arrays only when first
asked for them behaves exactly as one that copied them at once (the first version), on random
sequences of every operation; the snapshot is never written; and a round that reserves nothing
copies nothing."""
import numpy as np
import pytest

from dlsched.cluster import cluster_from_dict
from dlsched.cluster.state import ClusterState
from dlsched.core.types import Role, TaskSpec
from dlsched.scheduler.transaction import Transaction

CL = cluster_from_dict({"node_groups": [
    {"count": 3, "gpus": 8, "gpu_mem_gb": 32, "cpus": 64, "mem_gb": 512},
    {"count": 2, "gpus": 2, "gpu_mem_gb": 16, "cpus": 16, "mem_gb": 128},
    {"count": 1, "gpus": 0, "cpus": 32, "mem_gb": 256}]})


def _eager(snap) -> Transaction:
    t = Transaction(snap)
    t.free, t.gpu_load, t.gpu_used       # noqa: B018 - touching each attribute copies it
    return t


def _pick_gpus_reference(txn, node, gpus):
    """pick_gpus as the numpy version computed it."""
    k = int(np.ceil(gpus - 1e-9))
    if k <= 0:
        return ()
    load = txn.gpu_load[node]
    n = CL.nodes[node].gpus
    if k == 1 and gpus < 1 - 1e-9 and txn.gpu_used is not None:
        used = txn.gpu_used[node, :n]
        room = used + gpus <= 1 + 1e-9
        if room.any():
            return (int(np.argmax(np.where(room, used, -1.0))),)
    if k == 1:
        return (int(np.argmin(load[:n])),)
    return tuple(int(i) for i in np.argsort(load[:n], kind="stable")[:k])


def _state(seed):
    """A cluster state with some tasks on it (so the snapshot is not empty)."""
    rng = np.random.default_rng(seed)
    st = ClusterState(CL)
    for _ in range(6):
        node = int(rng.integers(0, 3))
        ids = tuple(int(g) for g in rng.choice(8, size=int(rng.integers(1, 3)), replace=False))
        st.take(node, np.array([float(len(ids)), 2.0, 8.0, 0.0, 0.0]), ids)
    return st


def _same(a: Transaction, b: Transaction) -> None:
    assert np.array_equal(a.free, b.free)
    assert np.array_equal(a.gpu_load, b.gpu_load)
    assert np.array_equal(a.gpu_used, b.gpu_used)
    assert a.plan.decisions == b.plan.decisions
    assert a.decided == b.decided and a.released == b.released
    assert {j: a.reserved(j) for j in "abcdef"} == {j: b.reserved(j) for j in "abcdef"}


@pytest.mark.parametrize("seed", range(12))
def test_lazy_copy_equals_eager_copy(seed):
    rng = np.random.default_rng(seed)
    st = _state(seed)
    snap = st.snapshot(0.0)
    before = (snap.free.copy(), snap.gpu_load.copy(), snap.gpu_used.copy())
    lazy, eager = Transaction(snap), _eager(snap)
    forks = []
    for step in range(60):
        op = rng.choice(["view", "reserve", "block", "discard", "commit", "release", "fork", "pick"])
        job = "abcdef"[int(rng.integers(0, 6))]
        node = int(rng.integers(0, CL.num_nodes))
        g = float(rng.choice([0.0, 0.5, 1.0, 2.0]))
        task = TaskSpec(int(rng.integers(0, 4)), Role.WORKER, (g, 1.0, 4.0, 0.0, 0.0))
        if g > CL.nodes[node].gpus:
            op = "view"
        block = [task] * int(rng.integers(1, 3))
        for t in (lazy, eager):
            if op == "view":
                assert np.array_equal(t.free_view(), eager.free)
            elif op == "reserve":
                t.reserve(job, task, node)
            elif op == "block":
                t.reserve_block(job, block, node)
            elif op == "discard":
                t.discard(job)
            elif op == "commit":
                t.commit(job, total_tasks=4, already_placed=0, gang=bool(step % 2))
            elif op == "release":
                tps = t.reserved(job)
                t.discard(job)
                t.release(job, tps, [np.array(task.demand)] * len(tps))
            elif op == "fork":
                forks.append(t.fork())
            elif op == "pick":
                assert t.pick_gpus(node, g) == _pick_gpus_reference(t, node, g)
        _same(lazy, eager)
    # forks are independent of their parent and equal pairwise
    for a, b in zip(forks[0::2], forks[1::2]):
        _same(a, b)
    # the snapshot (the cluster's truth) was never written
    assert np.array_equal(snap.free, before[0]) and np.array_equal(snap.gpu_load, before[1])
    assert np.array_equal(snap.gpu_used, before[2])


def test_a_round_that_reserves_nothing_copies_nothing():
    snap = _state(0).snapshot(0.0)
    txn = Transaction(snap)
    assert snap.free.flags.f_contiguous          # the layout of the transaction's own copy
    assert txn.free_view() is snap.free
    fork = txn.fork()
    assert fork.free_view() is snap.free
    txn.reserve("a", TaskSpec(0, Role.WORKER, (1.0, 1.0, 1.0, 0.0, 0.0)), 0)
    assert txn.free_view() is txn.free and txn.free is not snap.free and txn.free.flags.f_contiguous
    assert fork.free_view() is snap.free and txn.free[0, 0] == snap.free[0, 0] - 1


def test_a_snapshot_of_another_layout_is_copied_before_it_is_read():
    st = _state(1)
    snap = st.snapshot(0.0)
    c = np.ascontiguousarray(snap.free)
    c.setflags(write=False)
    from dataclasses import replace
    txn = Transaction(replace(snap, free=c))
    v = txn.free_view()
    assert v is txn.free and v.flags.f_contiguous and np.array_equal(v, c)
