"""Jobs on several GPU types with a throughput table (issue "Many GPU types", item 1): the
`gavel-V:P:K[:G]` preset, each job's own speed per type and GPU count, no placement on a type
without an entry, a job across types at its slowest type's speed, a duration as run time on the
table's reference type, and the jobs table's `gpu_type_run`."""
from __future__ import annotations

import subprocess
import sys

import pytest

import dlsched
from dlsched.cluster.topology import load_cluster
from dlsched.core.errors import DlschedError
from dlsched.core.types import GPU, NRES, JobSpec, Role, TaskSpec
from dlsched.workload.throughputs import load_throughputs

TABLE = """\
# reference: V100
job_type,gpus,gpu_type,steps_per_s
fast-on-v,1,V100,10
fast-on-v,1,P100,4
fast-on-v,1,K80,1
fast-on-v,2,V100,18
fast-on-v,2,P100,7
k80-only,1,K80,2
zero-on-v,1,V100,0
zero-on-v,1,K80,1
nowhere,1,A100,5
"""


def job(jid, model, gpus=1, t=0.0, steps=None, duration=None) -> JobSpec:
    d = [0.0] * NRES
    d[GPU] = 1.0
    tasks = tuple(TaskSpec(i, Role.WORKER, tuple(d), None) for i in range(gpus))
    return JobSpec(jid, t, tasks=tasks, model=model, iterations=steps, duration_s=duration)


@pytest.fixture
def table(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(TABLE)
    return str(p)


def run(cluster, jobs, table, policy="fifo-backfill"):
    res = dlsched.simulate(cluster, jobs, policy, throughputs=table, restart_delay_s=0)
    return res.jobs.set_index("job_id")


def test_the_gavel_preset():
    c = load_cluster("gavel-8:16:24:4")
    assert c.total_gpus == 48 and c.num_nodes == 12
    assert sorted((n.gpu_type, n.gpus) for n in c.nodes)[:1] == [("K80", 4)]
    assert sum(n.gpu_type == "V100" for n in c.nodes) == 2
    assert load_cluster("gavel-36:36:36").total_gpus == 108
    for bad, needle in [("gavel-1:2", "gavel-V:P:K"), ("gavel-8:16:2:4", "2 K80s do not fill"),
                        ("gavel-0:0:0", "between 1 and"), ("gavel-1:1:1:0", "GPUs per server. must be 1")]:
        with pytest.raises(DlschedError, match=needle):
            load_cluster(bad)


def test_each_job_runs_at_its_own_speed_on_the_type_it_gets(table):
    # one GPU of each type; three jobs at once: first fit gives V100, then P100, then K80
    jobs = [job(f"j{i}", "fast-on-v", steps=100) for i in range(3)]
    t = run("gavel-1:1:1", jobs, table)
    got = {r.gpu_type_run: r.run_s for r in t.itertuples()}
    assert got == pytest.approx({"V100": 10.0, "P100": 25.0, "K80": 100.0})


def test_a_job_never_runs_on_a_type_without_an_entry(table):
    # the V100 is free but k80-only waits for the K80, held by the first job for 50 s
    jobs = [job("a", "k80-only", steps=100), job("b", "k80-only", steps=100, t=1.0)]
    t = run("gavel-1:0:1", jobs, table)
    assert set(t.gpu_type_run) == {"K80"}
    assert t.loc["b", "first_start_s"] == pytest.approx(50.0)
    # a model with no entry on any type of the cluster is rejected at arrival
    t = run("gavel-1:0:1", [job("c", "nowhere", steps=10)], table)
    assert t.loc["c", "state"] == "rejected"


def test_a_job_across_types_runs_at_its_slowest(table):
    # two 1-GPU servers, a V100 and a P100: the 2-GPU job spans both and runs at P100's 7 steps/s
    t = run("gavel-1:1:0", [job("x", "fast-on-v", gpus=2, steps=70)], table)
    assert t.loc["x", "gpu_type_run"] == "P100+V100"
    assert t.loc["x", "run_s"] == pytest.approx(10.0)


def test_a_duration_is_run_time_on_the_reference_type(table):
    # 100 s on a V100 (10 steps/s) is 1,000 steps: 250 s on a P100 (4 steps/s)
    jobs = [job("v", "fast-on-v", duration=100.0), job("p", "fast-on-v", duration=100.0)]
    t = run("gavel-1:1:0", jobs, table)
    assert dict(zip(t.gpu_type_run, t.run_s)) == pytest.approx({"V100": 100.0, "P100": 250.0})


def test_every_policy_runs_with_a_table(table):
    jobs = [job(f"j{i}", "fast-on-v", gpus=1 + i % 2, steps=50, t=float(i)) for i in range(6)]
    jobs += [job("k", "k80-only", steps=20, t=2.0)]
    from dlsched.scheduler.framework import REGISTRY
    for p in REGISTRY.names("profile"):
        t = run("gavel-2:2:2:2", jobs, table, policy=p)   # (co-location: a job on one server)
        assert (t.state == "done").all(), (p, t.state.to_dict())
        assert t.loc["k", "gpu_type_run"] == "K80", p


def test_the_bundled_gavel_table_runs_a_gavel_trace(tmp_path):
    trace = tmp_path / "t.trace"
    rows = ["ResNet-50 (batch size 64)\tpython3 main.py\timagenet\t--n\t1\t4390\t1\t1\t-1\t0",
            "Recommendation (batch size 2048)\tpython3 rec.py\trec\t--n\t1\t1660\t1\t1\t-1\t0"]
    trace.write_text("\n".join(rows) + "\n")
    t = dlsched.simulate("gavel-0:1:0", str(trace), "fifo", throughputs="gavel").jobs.set_index("job_id")
    tab = load_throughputs("gavel")
    first = t.sort_values("first_start_s").index[0]
    steps = 4390 if "ResNet" in t.loc[first, "model"] else 1660
    assert t.loc[first, "run_s"] == pytest.approx(steps / tab.steps_per_s(t.loc[first, "model"], 1, "P100"))
    r = subprocess.run([sys.executable, "-m", "dlsched.cli.main", "simulate", "-c", "gavel-1:1:1", "-w", str(trace),
                        "--throughputs", "gavel", "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("job_type,gpus,gpu_type,steps_per_s\nx,1,V100,-1\n")
    r = subprocess.run([sys.executable, "-m", "dlsched.cli.main", "simulate", "-c", "gavel-1:1:1", "-w", str(trace),
                        "--throughputs", str(bad), "--out", str(tmp_path / "o2")], capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "bad.csv, line 2" in r.stderr, r.stderr
    assert not (tmp_path / "o2").exists()


def test_zero_steps_per_s_means_the_job_cannot_run_there(table):
    t = run("gavel-1:0:1", [job("z", "zero-on-v", steps=10)], table)
    assert t.loc["z", "gpu_type_run"] == "K80" and t.loc["z", "run_s"] == pytest.approx(10.0)


def test_iterations_of_a_model_nobody_knows_are_refused(table):
    with pytest.raises(DlschedError, match="job q: its 10 iterations need a model the speed model knows"):
        dlsched.simulate("gavel-1:0:1", [job("q", "fast-on-v", steps=10)], "fifo")
    # with the table that knows it, the same job runs; the model's case does not matter
    t = run("gavel-1:0:1", [job("q", "FAST-ON-V", steps=10)], table)
    assert t.loc["q", "run_s"] == pytest.approx(1.0)


def test_two_jobs_sharing_a_gpu_run_at_the_tables_pair_speeds():
    """With a throughput table that measured the pair (Gavel's), a job sharing its GPU with one
    other runs at its pair throughput over its throughput alone; a pair the table lacks keeps
    the speed model's factors (None here)."""
    from dlsched.cluster.topology import load_cluster
    from dlsched.core.types import TaskPlacement
    from dlsched.sim.rates import _pair_factor
    from dlsched.sim.run import JobRun
    from dlsched.workload.gavel_gen import gen_gavel
    from dlsched.workload.throughputs import load_throughputs
    table = load_throughputs("gavel")
    cl = load_cluster("gavel-0:1:0")
    spec = next(j for j in gen_gavel(0, rate=1, jobs=50) if j.model == "ResNet-18 (batch size 64)")
    run = JobRun(spec, spec.tasks, 1.0, placements={0: TaskPlacement(0, 0, (0,))})
    other = "LM (batch size 20)"
    mine, _ = table.pair(spec.model, 1, other, "P100")
    got = _pair_factor(table, cl, run, other)
    assert got == pytest.approx(mine / table.steps_per_s(spec.model, 1, "P100"))
    assert 0 < got < 1
    assert _pair_factor(table, cl, run, "resnet50") is None         # not a job type of the table
