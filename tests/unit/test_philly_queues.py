"""The shipped Philly queue files (dlsched/data/philly/queues*.yaml): they load, every virtual
cluster of the bundled trace has a leaf, each nominal is the published size (HeliosArtifact's
philly_vc.csv, nodes x 8 GPUs) or the documented rule (one 8-GPU node, enough for the VC's largest
job), and the nominals add up to more than the `philly` preset, as the files' header says."""
from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from dlsched.cluster.topology import load_cluster
from dlsched.tenancy import load_queues
from dlsched.workload.readers import bundled_workload_path

DATA = bundled_workload_path("philly").parent
FILES = {"queues.yaml": None, "queues-isolated.yaml": 0.0}      # file -> every queue's borrowing_limit
# S-Lab-System-Group/HeliosArtifact 6345d9ff28350018656f307c4aba5f8acebd91a6,
# framework/QSSF Service/data/philly_vc.csv (nodes)
PUBLISHED_NODES = {"6214e9": 64, "7f04ca": 32, "11cb48": 16, "b436b2": 64, "ee9e8c": 64, "e13805": 16,
                   "6c71a0": 32, "2869ce": 16, "ed69ec": 8, "103959": 8, "0e4a51": 32}
GPUS_PER_NODE = 8
NOMINAL_SUM = 2848           # 352 published nodes x 8 + 4 unpublished VCs x 8
PHILLY_PRESET_GPUS = 2490    # 321 x 2 + 231 x 8


@pytest.fixture(scope="module")
def per_vc() -> pd.DataFrame:
    df = pd.read_csv(DATA / "philly.csv.gz", dtype={"cluster": str})
    return df.groupby("cluster").agg(jobs=("num_gpus", "size"), gpu_s=("gpu_time", "sum"),
                                     biggest=("num_gpus", "max"))


@pytest.mark.parametrize("name", sorted(FILES))
def test_shipped_file_loads_one_leaf_per_vc(name, per_vc):
    tree = load_queues(DATA / name)
    assert sorted(tree.leaves) == sorted(per_vc.index) == sorted(tree.nodes)   # flat: leaves only
    assert len(tree.nodes) == 15
    for node in tree.nodes.values():
        q = node.quota("gpu")
        assert q is not None and set(node.quotas) == {"gpu"}
        assert q.borrowing_limit == FILES[name] and q.lending_limit is None and q.limit is None
        assert (node.weight, node.priority) == (1.0, 0)


@pytest.mark.parametrize("name", sorted(FILES))
def test_nominal_is_published_size_or_the_one_node_rule(name, per_vc):
    tree = load_queues(DATA / name)
    for vc, row in per_vc.iterrows():
        nominal = tree.nodes[vc].quota("gpu").nominal
        if vc in PUBLISHED_NODES:
            assert nominal == PUBLISHED_NODES[vc] * GPUS_PER_NODE, vc
        else:   # the rule: the fewest whole 8-GPU nodes that admit the VC's largest job (at least one)
            assert nominal == max(1, math.ceil(row.biggest / GPUS_PER_NODE)) * GPUS_PER_NODE, vc
        assert nominal >= row.biggest, f"{vc}: its largest job ({row.biggest} GPUs) exceeds its nominal"


def test_both_files_agree_but_for_borrowing():
    a, b = (load_queues(DATA / n) for n in sorted(FILES))
    assert list(a.nodes) == list(b.nodes)
    assert all(a.nodes[v].quota("gpu").nominal == b.nodes[v].quota("gpu").nominal for v in a.nodes)


def test_nominal_sum_exceeds_the_philly_preset_as_documented():
    tree = load_queues(DATA / "queues.yaml")
    total = sum(n.quota("gpu").nominal for n in tree.nodes.values())
    cluster = load_cluster("philly")
    assert total == NOMINAL_SUM
    assert cluster.total_gpus == PHILLY_PRESET_GPUS and cluster.num_nodes == 552
    assert total > cluster.total_gpus                       # over-committed by 358 GPUs (1.14x)
    published = sum(PUBLISHED_NODES.values())
    assert published == 352 and published < cluster.num_nodes


def test_header_comments_match_the_trace(per_vc):
    """Each queue line's comment (jobs, GPU-hours, largest job) is what the bundled trace says."""
    for name in FILES:
        text = (DATA / name).read_text()
        assert "6345d9ff28350018656f307c4aba5f8acebd91a6" in text and "philly_vc.csv" in text
        rows = re.findall(r'name: "(\w+)".*# .*?(\d+) jobs +([\d,]+) GPU-h +max +(\d+) GPUs', text)
        assert len(rows) == len(per_vc)
        for vc, jobs, gpu_h, biggest in rows:
            r = per_vc.loc[vc]
            assert (int(jobs), int(biggest)) == (r.jobs, r.biggest)
            assert int(gpu_h.replace(",", "")) == round(r.gpu_s / 3600)
