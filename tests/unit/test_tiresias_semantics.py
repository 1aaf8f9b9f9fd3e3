"""`--semantics tiresias` (issue 35 part 5): the Tiresias simulator's rules, its 60-job figures,
the gang-per-node filter, the CLI's errors, and `native` unchanged."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dlsched.api import simulate
from dlsched.cluster.topology import load_cluster
from dlsched.core.errors import DlschedError
from dlsched.experiments import tiresias_fidelity as tf
from dlsched.policies.place.tiresias_node import node_plan


@pytest.mark.parametrize("policy", ["fifo", "tiresias"])
def test_60_job_trace_matches_the_tiresias_simulator_within_5_percent(policy):
    _, jct, makespan = tf.PUBLISHED[policy]
    s = tf.measure(policy).summary
    assert s["finished"] == 60
    assert abs(s["mean_jct_s"] / jct - 1) <= 0.05, (s["mean_jct_s"], jct)
    assert abs(s["makespan_s"] / makespan - 1) <= 0.05, (s["makespan_s"], makespan)
    assert s["preemptions"] == 0        # no job reaches 3250 GPU-s: Tiresias preempts nobody either


def test_native_semantics_is_unchanged_on_the_same_trace():
    # dlsched's own fifo is Tiresias's GPU-counting fifo (`--scheme=count`: 200.82 s / 3,335 s);
    # its tiresias keeps Pollux's threshold, 60 s rounds and 30 s restarts.
    w = tf.workload_path()
    s = simulate("tiresias-n4g4", w, "fifo").summary
    assert (round(s["mean_jct_s"], 2), s["makespan_s"]) == (200.82, 3335.0)
    s = simulate("tiresias-n4g4", w, "tiresias").summary
    assert s["preemptions"] > 0 and s["mean_jct_s"] > 300


def test_yarn_plan_one_node_when_it_fits_else_whole_nodes_and_one_for_the_rest():
    cap = np.array([4.0, 4.0, 4.0, 4.0])
    assert node_plan(np.array([1.0, 3.0, 4.0, 4.0]), cap, 2) == {1: 2}          # first node with 2 free
    assert node_plan(np.array([1.0, 3.0, 4.0, 4.0]), cap, 4) == {2: 4}
    assert node_plan(np.array([3.0, 3.0, 3.0, 3.0]), cap, 4) is None            # 12 free, no node has 4
    assert node_plan(np.array([4.0, 1.0, 4.0, 4.0]), cap, 8) == {0: 4, 2: 4}
    assert node_plan(np.array([2.0, 4.0, 4.0, 1.0]), cap, 10) == {1: 4, 2: 4, 0: 2}
    assert node_plan(np.array([4.0, 3.0, 3.0, 3.0]), cap, 8) is None            # one whole free node


def test_fifo_waits_for_one_node_where_gpu_counting_would_split_the_job(tmp_path):
    # 2 nodes x 4 GPUs; jobs of 3 and 3 GPUs fill one node each, a 2-GPU job then sees 2 free
    # GPUs on two nodes: counting starts it at once, Tiresias's yarn scheme waits for a node.
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                     "0,3,0,1,vgg19,100,0\n1,3,0,1,vgg19,200,0\n2,2,0,1,vgg19,50,0\n")
    native = simulate("tiresias-n2g4", str(trace), "fifo").summary
    ours = simulate("tiresias-n2g4", str(trace), "fifo", semantics="tiresias").summary
    assert native["makespan_s"] == 200 and ours["makespan_s"] == 200
    assert round(native["mean_jct_s"], 2) == round((100 + 200 + 50) / 3, 2)
    assert round(ours["mean_jct_s"], 2) == round((100 + 200 + 150) / 3, 2)   # job 2: 100 s wait


def test_bad_values_are_one_line_errors():
    w = tf.workload_path()
    with pytest.raises(DlschedError, match="must be native, gavel, tiresias or pollux"):
        simulate("tiresias-n4g4", w, "fifo", semantics="tiresia")
    with pytest.raises(DlschedError, match="runs fifo, tiresias"):
        simulate("tiresias-n4g4", w, "srtf", semantics="tiresias")
    assert load_cluster("tiresias-n32g4").total_gpus == 128
    with pytest.raises(DlschedError, match="unknown cluster"):
        load_cluster("tiresias-n0g4")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "dlsched.cli.main", *args], capture_output=True, text=True,
                          check=False, timeout=120)


def test_cli_refuses_a_policy_the_preset_cannot_run_and_runs_compare(tmp_path):
    w = tf.workload_path()
    out = _cli("simulate", "-c", "tiresias-n4g4", "-w", w, "-p", "sjf", "--semantics", "tiresias",
               "-o", str(tmp_path / "a"))
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "--semantics tiresias runs fifo, tiresias" in out.stderr
    out = _cli("compare", "-c", "tiresias-n4g4", "-w", w, "-p", "fifo,tiresias", "--semantics", "tiresias",
               "-o", str(tmp_path / "b"))
    assert out.returncode == 0, out.stderr
    import json
    got = json.loads((tmp_path / "b" / "summary.json").read_text())["policies"]
    assert round(got["fifo"]["mean_jct_s"], 2) == 219.18 and round(got["tiresias"]["mean_jct_s"], 2) == 190.68


def test_running_first_is_off_by_default_and_checked():
    from dlsched.policies.order.tiresias import TiresiasOrder
    assert TiresiasOrder().running_first is False
    with pytest.raises(ValueError, match="running_first"):
        TiresiasOrder(running_first="yes")
