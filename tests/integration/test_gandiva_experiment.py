"""seed001-gandiva on a smaller cluster (the CLI runs 180 GPUs and three seeds): every check
passes, and the figures printed beside the published ones are the simulations' own."""
import json

import pytest

from dlsched.experiments import EXPERIMENTS, run_experiment
from dlsched.experiments import seed001_gandiva as g
from dlsched.experiments.base import write_outputs

SMALL = {"name": "gandiva-32", "node_groups": [
    {"count": 8, "gpus": 4, "gpus_per_group": 2, "gpu_type": "P40", "gpu_mem_gb": 24, "cpus": 32,
     "mem_gb": 256, "nic_gbps": 40, "gpu_link_gbps": 100}]}


@pytest.fixture(scope="module")
def small():
    return g.run(seeds=1, cluster_spec=SMALL, span_s=2 * 3600.0, table_models=("vae", "rhn", "resnet50"))


def test_small_gandiva_experiment_shows_the_expected_direction(small, tmp_path):
    assert small.checks and all(c.ok for c in small.checks), [(c.text, c.detail) for c in small.checks if not c.ok]
    report = write_outputs(small, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] is True and report.exists()


def test_gandiva_figures_are_computed_not_typed_in(small):
    rows = {r["model"]: r for r in small.extra["table1"]}
    ours = {p["figure"]: p["ours"] for p in small.published}
    assert ours["Table 1 VAE: packing gain, pair"] == f"{100 * rows['vae']['pair_gain']:+.0f} %"
    # The pair gain is packed / time-sliced aggregate throughput, each from its own simulation.
    assert rows["vae"]["pair_gain"] == pytest.approx(rows["vae"]["pair_packed"] / rows["vae"]["pair_sliced"] - 1)
    gandiva = small.results["cluster"]["gandiva"][0].summary
    assert f"{100 * gandiva['useful_gpu_util_overload']:.1f} %" in \
        ours["cluster: useful GPU utilisation under overload fifo / tiresias / gandiva"]


def test_gandiva_experiment_is_listed():
    assert "seed001-gandiva" in EXPERIMENTS
    with pytest.raises(Exception):
        run_experiment("seed001-gandiva-nope", None)
