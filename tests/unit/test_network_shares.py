"""The max-min solver (heap-based progressive filling) against the first version's linear scan,
and the incremental NetShares (re-sharing only the touched components) against a full solve."""
import numpy as np
import pytest

from dlsched.sim import network
from dlsched.sim.network import NetShares
from dlsched.workload.speed import max_min_shares


def reference_max_min(flows, capacity):
    """The first version of max_min_shares, kept here as the reference: at every step, scan every
    link for the least remaining capacity per unfrozen flow and freeze its flows."""
    remaining, users = {}, {}
    for f, links in flows.items():
        for link in links:
            users.setdefault(link, []).append(f)
            remaining[link] = float(capacity[link])
    rate = {}
    active = {f for f, links in flows.items() if links}
    while active:
        best_link, best_share = None, float("inf")
        for link, fs in users.items():
            n = sum(1 for f in fs if f in active)
            if n and remaining[link] / n < best_share:
                best_link, best_share = link, remaining[link] / n
        if best_link is None:
            break
        for f in [f for f in users[best_link] if f in active]:
            rate[f] = best_share
            active.discard(f)
            for link in flows[f]:
                remaining[link] = max(remaining[link] - best_share, 0.0)
    return rate


def random_instance(rng, n_flows, n_links, max_span=5, ties=False):
    if ties:   # equal capacities: many equal shares, the tie-breaking case
        capacity = rng.choice([10.0, 40.0], size=n_links)
    else:
        capacity = rng.uniform(1.0, 100.0, size=n_links)
    flows = {}
    for i in range(n_flows):
        k = int(rng.integers(1, max_span + 1))
        flows[f"f{i}"] = tuple(int(x) for x in rng.choice(n_links, size=min(k, n_links), replace=False))
    return flows, capacity


def assert_same(got, want):
    assert set(got) == set(want)
    for f in want:
        assert got[f] == pytest.approx(want[f], rel=1e-9, abs=1e-12), f


@pytest.mark.parametrize("seed", range(40))
def test_heap_solver_equals_the_reference(seed):
    rng = np.random.default_rng(seed)
    flows, capacity = random_instance(rng, int(rng.integers(1, 120)), int(rng.integers(1, 40)),
                                      ties=seed % 2 == 0)
    assert_same(max_min_shares(flows, capacity), reference_max_min(flows, capacity))


def test_solution_is_max_min_fair():
    """Every flow has a bottleneck: a full link on which no flow gets more than it."""
    rng = np.random.default_rng(7)
    flows, capacity = random_instance(rng, 300, 60)
    rate = max_min_shares(flows, capacity)
    load = {}
    for f, links in flows.items():
        for link in links:
            load[link] = load.get(link, 0.0) + rate[f]
    for link, used in load.items():
        assert used <= capacity[link] * (1 + 1e-9)
    for f, links in flows.items():
        assert any(load[link] >= capacity[link] * (1 - 1e-9)
                   and all(rate[g] <= rate[f] * (1 + 1e-9) for g in flows if link in flows[g])
                   for link in links), f


@pytest.mark.parametrize("whole_min", [None, 8])
@pytest.mark.parametrize("seed", range(10))
def test_incremental_shares_equal_a_full_solve(seed, whole_min, monkeypatch):
    """Flows come, go and move at random; after every update the kept rates are what a full
    solve of the current flows gives, and `update` reports every rate that moved. With whole_min,
    whole solves (network.WHOLE_SHARE) from 8 live flows on: the same rates."""
    if whole_min is not None:
        monkeypatch.setattr(network, "WHOLE_MIN_FLOWS", whole_min)
    rng = np.random.default_rng(100 + seed)
    n_links = 30
    capacity = rng.choice([10.0, 25.0, 40.0], size=n_links)
    net = NetShares(capacity)
    live: dict[str, tuple[int, ...]] = {}
    before: dict[str, float] = {}
    for step in range(120):
        changes = {}
        for _ in range(int(rng.integers(1, 4))):
            f = f"f{int(rng.integers(0, 60))}"
            if f in live and rng.random() < 0.5:
                changes[f] = None
                live.pop(f)
            else:   # a new flow, or one that moves (new links)
                links = tuple(int(x) for x in rng.choice(n_links, size=int(rng.integers(1, 4)), replace=False))
                changes[f] = links
                live[f] = links
        changed = net.update(changes)
        want = reference_max_min(live, capacity)
        assert_same(net.rate, want)
        for f, r in want.items():
            if f not in before or abs(before[f] - r) > 1e-9 * r:
                assert f in changed, (step, f)
        before = dict(net.rate)


def test_components_apart_are_not_re_shared():
    """Two flows on disjoint links: changing one leaves the other's rate unreported."""
    net = NetShares(np.array([10.0, 10.0, 10.0]))
    assert net.update({"a": (0,), "b": (1, 2)}) == {"a": 10.0, "b": 10.0}
    assert net.update({"c": (0,)}) == {"a": 5.0, "c": 5.0}
    assert net.update({"a": None}) == {"c": 10.0}
    assert net.flows == {"b": (1, 2), "c": (0,)}


# -- the compiled NetShares (sim/netfast.py): the same numbers, bit for bit ------------------------
def _fast_or_skip(capacity):
    from dlsched.sim import netfast
    if not netfast.available():
        pytest.skip("numba not installed")
    return netfast.FastNetShares(capacity)


def assert_index_whole(fast):
    """The compiled keeper's bottleneck index (per link, the flows whose last bottleneck it is; a
    last list for those without one) holds every flow once, in its bottleneck's list, linked
    both ways, and nothing else."""
    L = len(fast.capacity)
    seen = {}
    for head in range(L + 1):
        prev, g = -1, int(fast._bhead[head])
        while g >= 0:
            assert g not in seen, (g, head)
            assert int(fast._bprev[g]) == prev
            seen[g] = head
            prev, g = g, int(fast._bnext[g])
    live = {s: (int(fast._bneck[s]) if fast._bneck[s] >= 0 else L) for s in fast._slot.values()}
    assert seen == live


@pytest.mark.parametrize("whole_min", [None, 16])
@pytest.mark.parametrize("seed", range(12))
def test_compiled_shares_equal_netshares_bit_for_bit(seed, whole_min, monkeypatch):
    """Random add / remove / move sequences over equal (ties) or random capacities: after every
    update the compiled keeper reports the same changes, holds the same rates (==, not approx)
    and remembers the same bottlenecks as NetShares, including when its arrays must grow
    (more flows, longer link lists, more users per link than it started with). With whole_min,
    both make whole solves (network.WHOLE_SHARE) from 16 live flows on: still the same."""
    if whole_min is not None:
        monkeypatch.setattr(network, "WHOLE_MIN_FLOWS", whole_min)
    rng = np.random.default_rng(500 + seed)
    n_links = int(rng.integers(5, 50))
    capacity = (rng.choice([10.0, 25.0, 40.0], size=n_links) if seed % 2
                else rng.uniform(1.0, 100.0, size=n_links))
    ref, fast = NetShares(capacity), _fast_or_skip(capacity)
    n_flows = 400 if seed < 3 else 120      # past the 256 slots the keeper starts with
    for step in range(250):
        changes = {}
        for _ in range(int(rng.integers(1, 6))):
            f = f"f{int(rng.integers(0, n_flows))}"
            if f in ref.flows and rng.random() < 0.4:
                changes[f] = None
            else:
                k = int(rng.integers(1, min(14, n_links)))
                changes[f] = tuple(int(x) for x in rng.choice(n_links, size=k, replace=False))
        assert fast.update(changes) == ref.update(changes), step
        assert fast.rate == ref.rate, step
        assert fast.bneck == ref.bneck, step
        assert fast.flows == ref.flows
        assert_index_whole(fast)
        for f in list(ref.flows)[:3]:
            assert fast.share(f) == ref.share(f)
    assert fast.share("nobody") is None


def test_compiled_components_apart_are_not_re_shared():
    net = _fast_or_skip(np.array([10.0, 10.0, 10.0]))
    assert net.update({"a": (0,), "b": (1, 2)}) == {"a": 10.0, "b": 10.0}
    assert net.update({"c": (0,)}) == {"a": 5.0, "c": 5.0}
    assert net.update({"a": None}) == {"c": 10.0}
    assert net.update({"c": (0,)}) == {}          # unchanged links: nothing to do
    assert net.flows == {"b": (1, 2), "c": (0,)}


def _chosen(capacity):
    """The keeper net_shares hands on to, made by its first update (it is lazy until then)."""
    from dlsched.sim.network import LazyShares, net_shares
    net = net_shares(capacity)
    assert isinstance(net, LazyShares) and net.flows == {} and net.share("a") is None
    assert net._real is None                          # nothing chosen (nor numba imported) yet
    assert net.update({"a": (0,)}) == {"a": float(capacity[0])}
    assert net.flows == {"a": (0,)} and net.share("a") == float(capacity[0])
    return net._real


def test_net_shares_picks_the_compiled_one_on_large_clusters(monkeypatch):
    from dlsched.sim import netfast
    assert isinstance(_chosen(np.ones(8)), NetShares)            # small: nothing compiled
    monkeypatch.setenv("DLSCHED_JIT", "0")
    assert isinstance(_chosen(np.ones(netfast.MIN_LINKS)), NetShares)
    monkeypatch.delenv("DLSCHED_JIT")
    if netfast.available():
        assert isinstance(_chosen(np.ones(netfast.MIN_LINKS)), netfast.FastNetShares)


def test_a_run_without_flows_never_imports_numba():
    """Philly's jobs have no model, so no flow: the run does not pay numba's import (0.3 s)."""
    import subprocess
    import sys
    code = ("import sys, dlsched; from dlsched.workload.io import load_workload; "
            "dlsched.simulate('philly', load_workload('philly')[:500], 'fifo', record_rates=False); "
            "print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_simulation_same_event_log_with_and_without_the_compiled_solver(monkeypatch):
    """A busy multi-node workload on 150 nodes (155 links): the event log, rates included, is
    the same whichever keeper shares the links."""
    import dlsched
    from dlsched.sim import netfast
    if not netfast.available():
        pytest.skip("numba not installed")
    a = dlsched.simulate("v100-150", "poisson:jobs=400,rate=0.02", "fifo", seed=2)
    monkeypatch.setenv("DLSCHED_JIT", "0")
    b = dlsched.simulate("v100-150", "poisson:jobs=400,rate=0.02", "fifo", seed=2)
    assert sum(1 for e in a.events if e[1] == "rate") > 500
    assert a.events == b.events and a.decisions == b.decisions
