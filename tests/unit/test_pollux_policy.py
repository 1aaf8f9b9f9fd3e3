"""The `pollux` policy: its objective on hand-worked cases, the repair rules, the genetic search
against exhaustive search, determinism, a small run against optimus / fifo, and rigid jobs."""
import itertools

import numpy as np
import pytest

from dlsched.policies.allocate import pollux_ga
from dlsched.policies.allocate.pollux_ga import Problem, restart_factor, search

CFG = {"policies": {"pollux": {"params": {"pollux": {"pop_size": 16, "generations": 6}}}}}


def _table(jobs, width, fn):
    t = np.zeros((jobs, pollux_ga.MAX_NODES + 1, width + 1))
    for j in range(jobs):
        for n in range(1, width + 1):
            for k in range(1, min(n, pollux_ga.MAX_NODES) + 1):
                t[j, k, n] = fn(j, k, n)
    return t


def test_restart_factor_by_hand():
    assert restart_factor(100.0, 1) == pytest.approx(70 / 130)
    assert restart_factor(10.0, 2) == 0.0
    assert restart_factor(0.0, 0) == 0.0


def test_objective_is_the_harmonic_mean_of_scaled_speedups():
    speed = _table(2, 4, lambda j, k, n: [1.0, 2.0][j] * n ** 0.5)
    base = np.array([[2], [1]])
    pr = Problem(speed, [4], base, [4, 4], [0.5, 0.5], scale=0.25)
    x0, x1 = 2 ** 0.5 * 0.25, 2.0 * 0.25
    want = 2 / (1 / (x0 + 1e-3) + 1 / (x1 + 1e-3))
    assert pr.evaluate(base[None])[0] == pytest.approx(want)
    # job 1 moved (1 -> 2 replicas): its speedup is scaled by its restart factor
    moved = np.array([[[2], [2]]])
    x1m = 2.0 * 2 ** 0.5 * 0.25 * 0.5
    assert pr.evaluate(moved)[0] == pytest.approx(2 / (1 / (x0 + 1e-3) + 1 / (x1m + 1e-3)))
    # a job with nothing contributes 1 / 1e-3: the harmonic mean punishes starving anyone
    starve = np.array([[[4], [0]]])
    assert pr.evaluate(starve)[0] < pr.evaluate(base[None])[0]


def test_mutation_grows_about_one_job_a_node_as_pollux():
    """Pollux's mutation step (3) normalises its growth odds over the jobs on each node (its
    pollux.py prob1, prob2: `sum(axis=1)` of (population, jobs, nodes)): on an empty cluster a
    node gains about one job's replicas, whatever the number of jobs. Over the nodes instead,
    each job grew onto about one node, and 8 jobs on 2 nodes made 4 a node."""
    jobs, nodes, cap = 8, 2, 4
    speed = _table(jobs, 40, lambda j, k, n: n)
    pr = Problem(speed, [cap] * nodes, np.zeros((jobs, nodes), dtype=int), [40] * jobs, [1] * jobs, scale=0.25)
    out = pr.mutate(np.zeros((4000, jobs, nodes), dtype=int), np.random.default_rng(0))
    per_node = np.count_nonzero(out, axis=1).mean()
    # a grown element is uniform in 0..cap: about cap / (cap + 1) = 0.8 non-zero a node
    assert 0.7 < per_node < 0.9, per_node


def test_repair_rules():
    rng = np.random.default_rng(0)
    speed = _table(3, 40, lambda j, k, n: n)
    pr = Problem(speed, [4] * 20, np.zeros((3, 20), dtype=int), [40, 3, 40], [1, 1, 1], scale=0.25)
    s = np.zeros((1, 3, 20), dtype=int)
    s[0, 0, :2] = 2          # distributed job 0 on nodes 0, 1
    s[0, 1, 0] = 1           # job 1 also on node 0 (alone it is not distributed)
    s[0, 1, 5] = 4           # ... and 4 on node 5: distributed, over max_replicas 3
    s[0, 2, :] = 2           # job 2 on all 20 nodes: distributed, > 16 nodes; collides on 0, 1, 5
    out = pr.repair(s, rng)[0]
    dist = np.count_nonzero(out, axis=1) > 1
    assert (np.count_nonzero(out[dist], axis=0) <= 1).all()        # <= 1 distributed job a node
    assert out[0, 0] == 2 and out[0, 1] == 2                       # the first in job order keeps
    assert out[1].sum() <= 3                                       # max replicas
    assert np.count_nonzero(out[2]) <= 16                          # <= 16 nodes
    assert (out.sum(axis=0) <= 4).all()                            # capacity
    over = np.zeros((1, 3, 20), dtype=int)
    over[0, :, 3] = 3                                              # 9 replicas on a 4-GPU node
    cap = pr.repair(over, rng)[0]
    assert cap[:, 3].tolist() == [3, 1, 0]                         # jobs in order take what is left


def _exhaustive(pr):
    best = -np.inf
    jobs, nodes = pr.base.shape
    for cells in itertools.product(range(int(pr.capacity.max()) + 1), repeat=jobs * nodes):
        s = np.array(cells).reshape(1, jobs, nodes)
        if (s.sum(axis=1)[0] > pr.capacity).any() or (s.sum(axis=2)[0] > pr.max_rep).any():
            continue
        dist = np.count_nonzero(s[0], axis=1) > 1
        if (np.count_nonzero(s[0][dist], axis=0) > 1).any():
            continue
        best = max(best, pr.evaluate(s)[0])
    return best


def _small_case(seed: int):
    """A random 3-job x 2-node problem and its current allocation."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=3)
    e = rng.uniform(0.4, 0.9, size=3)
    speed = _table(3, 4, lambda j, k, n: a[j] * n ** e[j] * (0.8 if k > 1 else 1.0))
    base = np.zeros((3, 2), dtype=int)
    base[0, 0] = 1
    return Problem(speed, [2, 2], base, [4, 3, 2], restart_factor([600, 90, 30], [1, 0, 0]), scale=0.5), base


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_search_finds_the_exhaustive_optimum_on_small_cases(seed):
    pr, base = _small_case(100 + seed)
    best, value, _ = search(pr, base[None], np.random.default_rng(seed), pop_size=100, generations=100)
    assert value == pytest.approx(_exhaustive(pr), rel=1e-12)
    assert pr.evaluate(best[None])[0] == pytest.approx(value)


def _run(policy, jobs, seed=0):
    from dlsched.api import simulate
    cfg = CFG if policy == "pollux" else None
    return simulate("pollux", jobs, policy, seed=seed, start_delay_s=30, restart_delay_s=30, policy_config=cfg)


@pytest.fixture(scope="module")
def subset():
    from dlsched.workload.io import load_workload
    return load_workload("pollux-1")[:24]


@pytest.fixture(scope="module")
def pollux_run(subset):
    return _run("pollux", subset)


def test_same_seed_same_event_log(subset, pollux_run):
    again = _run("pollux", subset)
    assert list(again.events) == list(pollux_run.events)
    assert [tuple(r)[:3] for r in again.decisions] == [tuple(r)[:3] for r in pollux_run.decisions]
    assert any(tuple(r)[1] == "resize" for r in pollux_run.decisions)     # it did adapt


def test_pollux_beats_optimus_and_fifo_on_a_subset(subset, pollux_run):
    ours = pollux_run.summary["mean_jct_s"]
    assert pollux_run.jobs["finish_time_s"].notna().all() if "finish_time_s" in pollux_run.jobs else len(pollux_run.jobs)
    for other in ("optimus", "fifo"):
        assert ours < _run(other, subset).summary["mean_jct_s"]


def test_rigid_jobs_keep_their_request(subset, pollux_run):
    from dlsched.policies.allocate.pollux import adaptive
    rigid = {j.job_id: j for j in subset if not adaptive(j)}
    assert rigid, "the subset has ncf jobs (fixed batch)"
    seen = set()
    for rec in pollux_run.decisions:
        kind, jid = rec[1], rec[2]
        if jid in rigid:
            assert kind != "resize"
            if kind == "launch":
                seen.add(jid)
                assert len(rec[4]) == rigid[jid].num_workers
    assert seen == set(rigid)


def test_a_rigid_job_of_cpu_heavy_workers_gets_a_row_it_can_run():
    """Six 1-GPU workers of 16 cores on seed002 (40 cores a node): by GPUs alone the allocator
    once put four on one node, which the placer could never carry out; the job waited for ever
    and the simulation never ended (found by the property test under another Hypothesis seed)."""
    from dlsched.api import simulate
    from dlsched.policies.allocate.pollux import rigid_rows
    from dlsched.workload.schema import job_from_row
    jobs = [job_from_row(dict(job_id="wide", submit_time_s=0.0, workers=6, gpus_per_worker=1, cpus_per_worker=16,
                              model="vgg16", iterations=500)),
            job_from_row(dict(job_id="small", submit_time_s=5.0, workers=1, gpus_per_worker=1, duration_s=100))]
    res = simulate("seed002", jobs, "pollux", seed=0)
    assert res.summary["unfinished"] == 0 and res.summary["finished"] == 2
    # the rows: at most two such workers a node, and None where they cannot all fit
    from dlsched.cluster import load_cluster
    cl = load_cluster("seed002")
    free = np.array(cl.capacity, dtype=float)
    left = np.floor(cl.capacity[:, 0]).astype(np.int64)
    rows = rigid_rows(jobs[0].tasks, free, left)
    assert rows is not None and sum(c for _, c in rows) == 6 and max(c for _, c in rows) <= 2
    assert rigid_rows(jobs[0].tasks + jobs[0].tasks, np.array(cl.capacity, dtype=float), left) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nsga2_finds_the_exhaustive_optimum_on_small_cases(seed):
    """Pollux's own search (NSGA-II as pymoo runs it, on the power mean and cluster utility,
    pollux_nsga; tests/unit/test_pollux_moo.py checks it against pymoo's own, step by step):
    its pick, the final front's best on the power mean, is the exhaustive optimum here, a state
    the repair accepts, and the same for the same seed."""
    from dlsched.policies.allocate import pollux_nsga
    pr, base = _small_case(200 + seed)
    best, value, front = pollux_nsga.search(pr, base[None], np.random.default_rng(seed), pop_size=100, generations=100)
    assert value == pytest.approx(_exhaustive(pr), rel=1e-12)
    assert pr.evaluate(best[None])[0] == pytest.approx(value)
    assert (pr.repair(front, np.random.default_rng(0)) == front).all()          # every member valid
    again = pollux_nsga.search(pr, base[None], np.random.default_rng(seed), pop_size=100, generations=100)
    assert (again[0] == best).all() and again[1] == value


def test_cluster_utility_by_hand():
    """Pollux's second objective: sum over jobs of speedup / replicas x replicas / GPUs in use."""
    from dlsched.policies.allocate import pollux_nsga
    speed = _table(2, 4, lambda j, k, n: [1.0, 0.5][j] * n)
    pr = Problem(speed, [4, 4], np.zeros((2, 2), dtype=int), [4, 4], np.ones(2), scale=0.5)
    s = np.array([[[2, 0], [0, 1]]])          # job 0: 2 on node 0 (speedup 2), job 1: 1 on node 1 (0.5)
    assert pollux_nsga.utility(pr, s)[0] == pytest.approx((2 / 2) * (2 / 8) + (0.5 / 1) * (1 / 8))


def test_search_option_is_checked():
    from dlsched.policies.allocate.pollux import PolluxAllocate
    with pytest.raises(ValueError, match="search must be ga"):
        PolluxAllocate(search="nsga3")
