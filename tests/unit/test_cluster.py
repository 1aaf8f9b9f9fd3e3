import numpy as np
import pytest

from dlsched.cluster import ClusterState, cluster_from_dict, load_cluster
from dlsched.core.errors import ConfigError, DlschedError


def test_presets_match_the_seeds_and_traces():
    philly = load_cluster("philly")
    assert philly.num_nodes == 321 + 231
    assert philly.total_gpus == 321 * 2 + 231 * 8 == 2490
    assert sorted({n.gpu_mem_gb for n in philly.nodes}) == [12, 24]
    s2 = load_cluster("seed002")
    assert [n.gpus for n in s2.nodes] == [4, 4, 2, 2]
    assert {n.gpu_type for n in s2.nodes} == {"V100"} and {n.nic_gbps for n in s2.nodes} == {10}
    assert load_cluster("seed000").num_nodes == 20
    assert load_cluster("pollux").total_gpus == 64
    lq = load_cluster("liquid-15")
    assert lq.num_nodes == 15 and {n.gpus for n in lq.nodes} == {2} and {n.gpu_type for n in lq.nodes} == {"T4"}
    assert len(lq.rack_names) == 3


def test_capacity_and_state_are_numpy_arrays():
    cl = load_cluster("seed002")
    assert cl.capacity.shape == (4, 5)
    assert not cl.capacity.flags.writeable
    st = ClusterState(cl)
    snap = st.snapshot(0.0)
    assert not snap.free.flags.writeable and not snap.gpu_load.flags.writeable
    from dlsched.scheduler.transaction import Transaction
    txn = Transaction(snap)
    txn.free[0, 0] = 0                   # a round's tentative changes never reach the state
    assert st.free[0, 0] == 4 and snap.free[0, 0] == 4
    st.take(0, np.array([2, 4, 8, 0, 0.0]), (0, 1))
    assert st.free[0, 0] == 2
    assert st.allocated_gpus() == 2
    st.give(0, np.array([2, 4, 8, 0, 0.0]), (0, 1))
    assert (st.free == cl.capacity).all()


def test_yaml_cluster_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("""
name: two-racks
rack_uplink_gbps: 20
racks: {a: {uplink_gbps: 50}}
node_groups:
  - {count: 2, gpus: 8, gpu_type: A100, gpu_mem_gb: 80, cpus: 64, mem_gb: 512, nic_gbps: 100, rack: a}
  - {count: 3, gpus: 4, gpu_type: T4, gpu_mem_gb: 16, cpus: 32, mem_gb: 128, rack: b, domain: d2}
""")
    cl = load_cluster(p)
    assert cl.name == "two-racks" and cl.num_nodes == 5 and cl.total_gpus == 28
    assert cl.rack_uplink_gbps == (50.0, 20.0)
    assert list(cl.node_rack) == [0, 0, 1, 1, 1] and list(cl.node_domain) == [0, 0, 1, 1, 1]


@pytest.mark.parametrize("spec, path", [
    ({"node_groups": [{"count": 1, "gpus": "four", "cpus": 1, "mem_gb": 1, "gpu_mem_gb": 1}]}, "node_groups[0].gpus"),
    ({"node_groups": [{"count": 1, "cpus": 1}]}, "node_groups[0].mem_gb"),
    ({"node_groups": [{"count": 1, "cpus": 1, "mem_gb": 1, "colour": "red"}]}, "node_groups[0].colour"),
    ({"node_groups": [{"count": 0, "cpus": 1, "mem_gb": 1}]}, "node_groups[0].count"),
    ({"node_groups": [{"count": 1, "cpus": 1, "mem_gb": 1, "gpus": 2}]}, "node_groups[0].gpu_mem_gb"),
    ({"node_groups": []}, "node_groups"),
    ({"node_groups": [{"count": 1, "cpus": 1, "mem_gb": 1}], "racks": {"zz": {"uplink_gbps": 1}}}, "racks.zz"),
    ({"node_groups": [{"count": 1, "cpus": 1, "mem_gb": 1}], "nodes": 3}, "nodes"),
])
def test_cluster_validation_names_the_field(spec, path):
    with pytest.raises(ConfigError) as e:
        cluster_from_dict(spec, file="c.yaml")
    assert e.value.path == path
    assert str(e.value).startswith("c.yaml: " + path)


def test_unknown_cluster_and_bad_yaml(tmp_path):
    with pytest.raises(DlschedError, match="unknown cluster"):
        load_cluster("nosuchpreset")
    bad = tmp_path / "bad.yaml"
    bad.write_text("node_groups: [\n")
    with pytest.raises(DlschedError, match="bad.yaml"):
        load_cluster(bad)
