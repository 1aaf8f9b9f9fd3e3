"""Cluster files from the machine lists that public traces publish (`dlsched cluster from-trace`).

| format            | file (columns)                                                                 | what a node gets                                   |
|-------------------|--------------------------------------------------------------------------------|----------------------------------------------------|
| `pai-machines`    | Alibaba PAI 2020 `pai_machine_spec.csv` (no header: machine, gpu_type, cap_cpu, cap_mem, cap_gpu), or its `.tar.gz` | GPUs, GPU type, CPUs and memory (GB) as given; GPU memory by type (assumed) |
| `philly-machines` | Philly `cluster_machine_list` (machineId, number of GPUs, single GPU mem)       | GPUs and GPU memory as given; type from memory (12 GB: P100, 24 GB: P40, as the `philly` preset); CPUs and memory assumed |
| `helios-vc`       | Helios `<cluster>_cluster_gpu_number.csv` (date, one column per VC, total)      | 8-GPU nodes per VC, on one date (default: the last); GPU type and host assumed |
| `openb-nodes`     | Alibaba OpenB (gpu-v2023) `openb_node_list_gpu_node.csv` (sn, cpu_milli, memory_mib, gpu, model) | GPUs, GPU model, CPUs (cpu_milli / 1000), memory (memory_mib / 1024) as given; GPU memory by model (assumed) |

Nodes of the same hardware become one node group (32 nodes per rack); what the trace does not
give (network, host of a Helios node, GPU memory of an undisclosed model) is ours and is said so
in the file's header comment. `helios-vc` also gives the queue tree of "Many tenants": one queue
per VC with its GPUs on that date as its nominal quota.

Bad input is one InputError naming the file, the line and the field.
"""
from __future__ import annotations

import csv
import io
import math
import os
import tarfile
from pathlib import Path

from dlsched.core.errors import DlschedError, InputError

FORMATS = ("pai-machines", "philly-machines", "helios-vc", "openb-nodes")
NODES_PER_RACK = 32
# GPU memory (GB) by type where a trace names the type but not its memory (public specs of each
# card; PAI's MISC and OpenB's G1-G3 are undisclosed: 16 GB assumed)
GPU_MEM_GB = {"P100": 16, "T4": 16, "V100": 16, "V100M16": 16, "V100M32": 32, "A10": 24, "A100": 80,
              "P40": 24, "K80": 12}
UNKNOWN_GPU_MEM_GB = 16
PHILLY_TYPE_BY_MEM = {12: "P100", 24: "P40"}      # as the `philly` preset (dlsched.cluster.topology)
HELIOS_GPUS_PER_NODE = 8


def _rows(path: Path) -> tuple[str, list[tuple[int, list[str]]]]:
    """(name for messages, [(line, cells)]) of a CSV file, or of the one CSV in a .tar.gz."""
    if path.name.endswith((".tar.gz", ".tgz")):
        try:
            with tarfile.open(path, "r:gz") as tar:
                members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".csv")]
                if len(members) != 1:
                    raise DlschedError(f"{path}: expected one .csv in the archive, found {len(members)}")
                text = tar.extractfile(members[0]).read().decode("utf-8")
                name = f"{path}:{members[0].name}"
        except (tarfile.TarError, OSError, EOFError, UnicodeDecodeError) as e:
            raise DlschedError(f"{path}: not a readable .tar.gz of a CSV file ({e})") from None
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise DlschedError(f"{path}: not a text (UTF-8) CSV file") from None
        name = str(path)
    reader = csv.reader(io.StringIO(text))
    rows = []
    for cells in reader:
        if cells and any(c.strip() for c in cells):
            rows.append((reader.line_num, [c.strip() for c in cells]))
    if not rows:
        raise InputError("is empty", file=name, line=1)
    return name, rows


def _num(cells: list[str], i: int, field: str, name: str, line: int, *, integer: bool = False,
         suffix: str = "") -> float:
    """Cell i as a number >= 0 (an integer when asked; a unit suffix such as GB allowed)."""
    if i >= len(cells):
        raise InputError("missing (the row is short)", file=name, line=line, field=field)
    raw = cells[i]
    text = raw[: -len(suffix)].strip() if suffix and raw.upper().endswith(suffix) else raw
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0 or (integer and v != int(v)):
        want = "an integer >= 0" if integer else "a number >= 0"
        raise InputError(f"expected {want}{' (' + suffix + ' allowed)' if suffix else ''}, got {raw!r}",
                         file=name, line=line, field=field)
    return int(v) if integer else v


def _header(rows, want: tuple[str, ...], name: str) -> list[str]:
    head = [c.lower() for c in rows[0][1]]
    for w in want:
        if w.lower() not in head:
            raise InputError(f"missing column {w!r} (header has: {', '.join(rows[0][1])})", file=name, line=1,
                             field=w)
    return head


def _node(gpus: int, gpu_type: str, gpu_mem_gb: float, cpus: float, mem_gb: float, **more) -> dict:
    g = {"gpus": gpus, "gpu_type": gpu_type if gpus else "none", "gpu_mem_gb": gpu_mem_gb if gpus else 0.0,
         "cpus": cpus, "mem_gb": mem_gb}
    g.update(more)
    return g


def _grouped(nodes: list[dict]) -> list[dict]:
    """Nodes of the same hardware as node groups, in order of first appearance."""
    groups: dict[tuple, dict] = {}
    for n in nodes:
        key = tuple(sorted(n.items()))
        if key in groups:
            groups[key]["count"] += 1
        else:
            groups[key] = {"count": 1, **n}
    out = []
    for i, g in enumerate(groups.values()):
        prefix = f"{g['gpu_type'].lower() if g['gpus'] else 'cpu'}-g{i}-"
        out.append({"count": g.pop("count"), **g, "nodes_per_rack": NODES_PER_RACK, "name_prefix": prefix})
    return out


def _pai(rows, name) -> list[dict]:
    if [c.lower() for c in rows[0][1]][:2] == ["machine", "gpu_type"]:
        rows = rows[1:]                         # the table as published has no header; allow one
    nodes = []
    cols = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")
    for line, cells in rows:
        if len(cells) < len(cols):
            raise InputError(f"missing: the row has {len(cells)} of the {len(cols)} fields ({', '.join(cols)})",
                             file=name, line=line, field=cols[len(cells)])
        gpus = _num(cells, 4, "cap_gpu", name, line, integer=True)
        gtype = cells[1] if len(cells) > 1 else ""
        if gpus and (not gtype or gtype.upper() == "CPU"):
            raise InputError(f"a machine with {gpus} GPUs needs a GPU type, got {gtype!r}", file=name, line=line,
                             field="gpu_type")
        nodes.append(_node(gpus, gtype, float(GPU_MEM_GB.get(gtype.upper(), UNKNOWN_GPU_MEM_GB)),
                           _num(cells, 2, "cap_cpu", name, line), _num(cells, 3, "cap_mem", name, line),
                           nic_gbps=25.0))
    return nodes


def _philly(rows, name) -> list[dict]:
    head = _header(rows, ("machineId", "number of GPUs", "single GPU mem"), name)
    ig, im = head.index("number of gpus"), head.index("single gpu mem")
    nodes = []
    for line, cells in rows[1:]:
        gpus = _num(cells, ig, "number of GPUs", name, line, integer=True)
        mem = _num(cells, im, "single GPU mem", name, line, suffix="GB")
        if gpus and mem <= 0:
            raise InputError(f"must be > 0 on a machine with GPUs, got {cells[im]!r}", file=name, line=line,
                             field="single GPU mem")
        gtype = PHILLY_TYPE_BY_MEM.get(int(mem), f"GPU{mem:g}GB")
        # CPU and memory are not in the list: the `philly` preset's (24 CPUs / 128 GB for a 2-GPU
        # machine, 48 / 512 for an 8-GPU one), i.e. max(24, 6 per GPU) CPUs and 64 GB per GPU
        nodes.append(_node(gpus, gtype, mem, float(max(24, 6 * gpus)), float(max(64, 64 * gpus)),
                           nic_gbps=40.0))
    return nodes


def _openb(rows, name) -> list[dict]:
    head = _header(rows, ("sn", "cpu_milli", "memory_mib", "gpu", "model"), name)
    ic, im, ig, it = (head.index(c) for c in ("cpu_milli", "memory_mib", "gpu", "model"))
    nodes = []
    for line, cells in rows[1:]:
        gpus = _num(cells, ig, "gpu", name, line, integer=True)
        model = cells[it] if it < len(cells) else ""
        if gpus and model.lower() in ("", "nan", "none"):
            raise InputError(f"a node with {gpus} GPUs needs a model, got {model!r}", file=name, line=line,
                             field="model")
        nodes.append(_node(gpus, model, float(GPU_MEM_GB.get(model.upper(), UNKNOWN_GPU_MEM_GB)),
                           _num(cells, ic, "cpu_milli", name, line) / 1000.0,
                           _num(cells, im, "memory_mib", name, line) / 1024.0, nic_gbps=25.0))
    return nodes


def _helios(rows, name, date: str | None) -> tuple[list[dict], dict[str, int], str]:
    """(node groups, GPUs per VC, the date used)."""
    head = rows[0][1]
    if not head or head[0].lower() != "date" or "total" not in [h.lower() for h in head]:
        raise InputError(f"expected a header date, <vc>..., total, got {', '.join(head)}", file=name, line=1,
                         field="date")
    it = [h.lower() for h in head].index("total")
    vcs = [(i, h) for i, h in enumerate(head) if i not in (0, it)]
    body = rows[1:]
    if not body:
        raise InputError("has no dated row", file=name, line=2)
    pick = body[-1] if date is None else next((r for r in body if r[1] and r[1][0] == date), None)
    if pick is None:
        raise DlschedError(f"--date {date}: not in {name} (it spans {body[0][1][0]} .. {body[-1][1][0]})")
    line, cells = pick
    counts = {vc: _num(cells, i, vc, name, line, integer=True) for i, vc in vcs}
    total = _num(cells, it, head[it], name, line, integer=True)
    if total != sum(counts.values()):
        raise InputError(f"is {total} but the VCs' GPUs add up to {sum(counts.values())}", file=name, line=line,
                         field=head[it])
    groups = []
    for vc, n in counts.items():
        full, rest = divmod(n, HELIOS_GPUS_PER_NODE)
        for count, gpus in ((full, HELIOS_GPUS_PER_NODE), (1 if rest else 0, rest)):
            if count:
                groups.append({"count": count, **_node(gpus, "V100", 32.0, 64.0, 512.0, nic_gbps=100.0),
                               "rack": f"rack-{vc}", "name_prefix": f"{vc}-{gpus}g-"})
    if not groups:
        raise InputError("no VC has a GPU on this date", file=name, line=line)
    return groups, counts, cells[0]


ASSUMED = {
    "pai-machines": "GPU memory by type (MISC: 16 GB, undisclosed), 25 Gbps NICs, 32 nodes per rack",
    "philly-machines": "GPU type from its memory (12 GB: P100, 24 GB: P40), CPUs and host memory as the philly "
                       "preset, 40 Gbps NICs, 32 nodes per rack",
    "helios-vc": "8 V100 (32 GB) per node, 64 CPUs, 512 GB, 100 Gbps NICs, one rack per VC",
    "openb-nodes": "GPU memory by model (G1-G3: 16 GB, undisclosed), 25 Gbps NICs, 32 nodes per rack",
}


def cluster_from_trace(path: str | Path, fmt: str, *, name: str | None = None,
                       date: str | None = None) -> tuple[dict, dict | None, str]:
    """(cluster spec, queue tree spec or None, a header comment) from a trace's machine list;
    both specs validated (dlsched.cluster.topology.cluster_from_dict, tenancy.tree_from_dict)."""
    from dlsched.cluster.topology import cluster_from_dict
    if fmt not in FORMATS:
        raise DlschedError(f"--format: unknown format {fmt!r} (formats: {', '.join(FORMATS)})")
    if date is not None and fmt != "helios-vc":
        raise DlschedError("--date: only with --format helios-vc (its GPUs per VC change by the day)")
    p = Path(path)
    if not p.is_file():
        raise DlschedError(f"{p}: no such file")
    src, rows = _rows(p)
    queues = None
    if fmt == "helios-vc":
        groups, counts, day = _helios(rows, src, date)
        queues = {"queues": [{"name": vc, "quotas": {"gpu": {"nominal": n}}} for vc, n in counts.items()]}
        what = f"{len(counts)} VCs on {day}"
    else:
        nodes = {"pai-machines": _pai, "philly-machines": _philly, "openb-nodes": _openb}[fmt](rows, src)
        if not nodes:
            raise InputError("has no machine row", file=src, line=2)
        groups = _grouped(nodes)
        what = f"{len(nodes)} machines"
    spec = {"name": name or p.name.split(".")[0], "description": f"from {p.name} ({fmt}, {what})",
            "rack_uplink_gbps": 400, "node_groups": groups}
    cluster_from_dict(spec)
    if queues is not None:
        from dlsched.tenancy.tree import tree_from_dict
        tree_from_dict(queues)
    note = (f"# written by `dlsched cluster from-trace --format {fmt}` from {p.name} ({what}).\n"
            f"# Taken from the trace: what its columns give (see docs/workloads/trace-formats.md). Assumed: {ASSUMED[fmt]}.\n")
    return spec, queues, note


def write_atomic(path: Path, text: str) -> None:
    """`text` into `path` through a temporary file in the same folder, renamed over it: a reader
    sees the old file or the whole new one, never part of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def dump(spec: dict, note: str) -> str:
    import yaml
    return note + yaml.safe_dump(spec, sort_keys=False, default_flow_style=None, width=120)
