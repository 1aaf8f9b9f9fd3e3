"""`dlsched cluster from-trace`: cluster files (and Helios's queue tree) from the bundled machine
lists, that load, describe and simulate; bad rows are one line naming file, line and field."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from dlsched.cli.main import main
from dlsched.cluster import load_cluster
from dlsched.cluster.fromtrace import cluster_from_trace
from dlsched.core.errors import InputError
from dlsched.tenancy import load_queues

DATA = Path(__file__).resolve().parents[2] / "src" / "dlsched" / "data" / "traces"
SLICES = {
    "pai-machines": DATA / "pai-machines" / "pai_machine_spec-every6th.csv",
    "philly-machines": DATA / "philly-machines" / "cluster_machine_list",
    "helios-vc": DATA / "helios-vc" / "Venus_cluster_gpu_number.csv",
    "openb-nodes": DATA / "openb-nodes" / "openb_node_list_gpu_node-sample.csv",
}
TIRESIAS = DATA / "tiresias" / "60_job.csv"


def _gpus_by_type(cluster) -> dict:
    out: dict = {}
    for n in cluster.nodes:
        if n.gpus:
            out[n.gpu_type] = out.get(n.gpu_type, 0) + n.gpus
    return out


@pytest.mark.parametrize("fmt", list(SLICES))
def test_each_list_gives_a_cluster_that_loads_and_simulates(fmt, tmp_path, capsys):
    out = tmp_path / "c.yaml"
    assert main(["cluster", "from-trace", str(SLICES[fmt]), "--format", fmt, "-o", str(out)]) == 0
    assert main(["cluster", str(out)]) == 0 and main(["cluster", "describe", str(out)]) == 0
    cl = load_cluster(out)
    assert f"{cl.total_gpus} GPUs" in capsys.readouterr().out
    run = tmp_path / "run"
    assert main(["simulate", "-c", str(out), "-w", str(TIRESIAS), "-o", str(run)]) == 0
    s = json.loads((run / "summary.json").read_text())
    assert s["finished"] == 60


def test_philly_list_is_the_philly_preset():
    spec, queues, _ = cluster_from_trace(SLICES["philly-machines"], "philly-machines")
    from dlsched.cluster.topology import cluster_from_dict
    ours, preset = cluster_from_dict(spec), load_cluster("philly")
    assert queues is None
    assert ours.num_nodes == preset.num_nodes and _gpus_by_type(ours) == _gpus_by_type(preset)
    assert sorted((n.gpus, n.cpus, n.mem_gb, n.gpu_mem_gb) for n in ours.nodes) == \
        sorted((n.gpus, n.cpus, n.mem_gb, n.gpu_mem_gb) for n in preset.nodes)


def test_pai_machines_as_the_file_says():
    df = pd.read_csv(SLICES["pai-machines"], header=None, names=["machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"])
    spec, _, _ = cluster_from_trace(SLICES["pai-machines"], "pai-machines")
    from dlsched.cluster.topology import cluster_from_dict
    cl = cluster_from_dict(spec)
    assert cl.num_nodes == len(df) and cl.total_gpus == df.cap_gpu.sum()
    assert _gpus_by_type(cl) == df[df.cap_gpu > 0].groupby("gpu_type").cap_gpu.sum().to_dict()
    assert sum(n.cpus for n in cl.nodes) == df.cap_cpu.sum() and sum(n.mem_gb for n in cl.nodes) == df.cap_mem.sum()


def test_openb_nodes_units():
    df = pd.read_csv(SLICES["openb-nodes"])
    spec, _, _ = cluster_from_trace(SLICES["openb-nodes"], "openb-nodes")
    from dlsched.cluster.topology import cluster_from_dict
    cl = cluster_from_dict(spec)
    assert _gpus_by_type(cl) == df.groupby("model").gpu.sum().to_dict()
    assert sum(n.cpus for n in cl.nodes) == pytest.approx(df.cpu_milli.sum() / 1000)
    assert sum(n.mem_gb for n in cl.nodes) == pytest.approx(df.memory_mib.sum() / 1024)


@pytest.mark.parametrize("date", [None, "2020-04-01"])
def test_helios_vcs_and_queue_tree(date, tmp_path):
    with open(SLICES["helios-vc"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    row = rows[-1] if date is None else next(r for r in rows if r["date"] == date)
    out, qout = tmp_path / "venus.yaml", tmp_path / "queues.yaml"
    args = ["cluster", "from-trace", str(SLICES["helios-vc"]), "--format", "helios-vc", "-o", str(out),
            "--queues-out", str(qout)] + (["--date", date] if date else [])
    assert main(args) == 0
    assert load_cluster(out).total_gpus == int(row["total"])
    tree = load_queues(qout)
    vcs = [k for k in row if k not in ("date", "total")]
    assert set(vcs) <= set(tree.nodes)
    for vc in vcs:
        assert tree.nodes[vc].quotas["gpu"].nominal == int(row[vc])


def test_helios_slice_simulates_under_its_vcs(tmp_path):
    out, qout = tmp_path / "venus.yaml", tmp_path / "queues.yaml"
    assert main(["cluster", "from-trace", str(SLICES["helios-vc"]), "--format", "helios-vc", "-o", str(out),
                 "--queues-out", str(qout)]) == 0
    venus = set(load_queues(qout).nodes)
    log = pd.read_csv(DATA / "helios" / "cluster_log.csv", dtype=str)
    w = tmp_path / "cluster_log.csv"
    log[log.vc.isin(venus)].to_csv(w, index=False)       # the slice has one Earth VC (vcpDC)
    run = tmp_path / "run"
    assert main(["simulate", "-c", str(out), "--queues", str(qout), "-w", str(w), "-o", str(run)]) == 0
    jobs = pd.read_parquet(run / "jobs.parquet")
    assert set(jobs.queue) <= venus and len(jobs) > 0


PAI_ROW = "m1,V100,96,512,8\n"
BAD = [
    ("pai-machines", PAI_ROW + "m2,V100,96,512,eight\n", 2, "cap_gpu"),
    ("pai-machines", PAI_ROW + "m2,V100,96,512,-8\n", 2, "cap_gpu"),
    ("pai-machines", PAI_ROW + "m2,CPU,96,512,2\n", 2, "gpu_type"),
    ("pai-machines", PAI_ROW + "m2,V100,96\n", 2, "cap_mem"),
    ("philly-machines", "machineId, number of GPUs, single GPU mem\nm0,2, 12GB\nm1,8, 24XB\n", 3, "single GPU mem"),
    ("philly-machines", "machineId, number of GPUs\nm0,2\n", 1, "single GPU mem"),
    ("openb-nodes", "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,32768,1,\n", 2, "model"),
    ("openb-nodes", "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,32768,1.5,T4\n", 2, "gpu"),
    ("helios-vc", "date,vcA,vcB,total\n2020-04-01,8,16,24\n2020-04-02,8,16,32\n", 3, "total"),
    ("helios-vc", "date,vcA,vcB,total\n2020-04-01,8,x,8\n", 2, "vcB"),
]


@pytest.mark.parametrize("fmt,text,line,field", BAD)
def test_bad_row_is_one_line_and_nothing_written(fmt, text, line, field, tmp_path, capsys):
    f = tmp_path / "list.csv"
    f.write_text(text)
    with pytest.raises(InputError) as e:
        cluster_from_trace(f, fmt)
    assert (e.value.file, e.value.line, e.value.field) == (str(f), line, field)
    out, qout = tmp_path / "c.yaml", tmp_path / "q.yaml"
    out.write_text("earlier: file\n")
    extra = ["--queues-out", str(qout)] if fmt == "helios-vc" else []
    assert main(["cluster", "from-trace", str(f), "--format", fmt, "-o", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"line {line}" in err and f"field '{field}'" in err
    assert "Traceback" not in err
    assert out.read_text() == "earlier: file\n" and not qout.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "list.csv"]


@pytest.mark.parametrize("args,part", [
    (["--format", "nope"], "unknown format 'nope'"),
    (["--format", "pai-machines", "--queues-out", "q.yaml"], "only with --format helios-vc"),
    (["--format", "pai-machines", "--date", "2020-04-01"], "only with --format helios-vc"),
    (["--format", "helios-vc", "--date", "1999-01-01"], "not in"),
])
def test_bad_options_exit_2(args, part, tmp_path, capsys):
    src = SLICES["helios-vc"] if "helios-vc" in args else SLICES["pai-machines"]
    assert main(["cluster", "from-trace", str(src), "-o", str(tmp_path / "c.yaml"), *args]) == 2
    err = capsys.readouterr().err
    assert part in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "c.yaml").exists()


def test_pai_archive_as_published(tmp_path):
    import tarfile
    arc = tmp_path / "pai_machine_spec.tar.gz"
    with tarfile.open(arc, "w:gz") as tar:
        tar.add(SLICES["pai-machines"], arcname="pai_machine_spec.csv")
    a, _, _ = cluster_from_trace(arc, "pai-machines")
    b, _, _ = cluster_from_trace(SLICES["pai-machines"], "pai-machines")
    assert a["node_groups"] == b["node_groups"]
