"""The seed001 workload generator (Optimus's parameter-server jobs) and cluster preset."""
import numpy as np

from dlsched.cluster.topology import load_cluster
from dlsched.workload.generators import SEED001_MODELS, _seed001_iter_s, generate


def test_seed001_is_deterministic_and_seed_dependent():
    a, b, c = generate("seed001", seed=4), generate("seed001", seed=4), generate("seed001", seed=5)
    assert a == b and a != c
    assert len(generate("seed001:jobs=7", seed=0)) == 7


def test_seed001_shape():
    jobs = generate("seed001", seed=1)
    assert len(jobs) == 30 and jobs[0].submit_time_s == 0.0
    submit = [j.submit_time_s for j in jobs]
    assert submit == sorted(submit) and 3000 < submit[-1] < 15000      # ~ 29 gaps of 240 s
    for j in jobs:
        assert j.comm == "ps" and j.kind == "dl" and j.model in SEED001_MODELS
        assert j.num_workers in (2, 4, 6, 8) and 1 <= j.num_ps <= min(4, j.num_workers)
        hours = j.iterations * _seed001_iter_s(j) / 3600.0
        assert 0.99 <= hours <= 4.01                          # 1-4 h alone at the requested size
    assert len({j.model for j in jobs}) >= 5


def test_seed001_cluster_preset():
    cl = load_cluster("seed001")
    assert cl.num_nodes == 16 and cl.total_gpus == 64
    assert np.all(cl.capacity[:, 1] == 32)
