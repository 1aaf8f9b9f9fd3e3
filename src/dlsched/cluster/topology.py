"""Cluster topology and the YAML cluster spec.

A spec is a list of node groups; each group gives a count and the per-node hardware. Racks and
domains are named in the group (`rack`, `domain`) or generated (`nodes_per_rack`). Example:

    name: small
    rack_uplink_gbps: 40          # default uplink of every rack (oversubscription)
    racks: {r0: {uplink_gbps: 100}}
    node_groups:
      - {count: 2, gpus: 4, gpu_type: V100, gpu_mem_gb: 32, cpus: 32, mem_gb: 256,
         disk_mbps: 2000, nic_gbps: 10, gpu_link_gbps: 300, rack: r0}

Validation errors name the field: `node_groups[1].gpus: must be an integer >= 0, got 'four'`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from dlsched.core.config import read_yaml
from dlsched.core.errors import ConfigError, DlschedError
from dlsched.core.types import NRES, NodeSpec

# Node-group fields: name -> (kind, default). kind: "int", "float", "str".
_GROUP_FIELDS: dict[str, tuple[str, Any]] = {
    "count": ("int", None),
    "gpus": ("int", 0),
    "gpu_type": ("str", "none"),
    "gpu_mem_gb": ("float", 0.0),
    "cpus": ("float", None),
    "mem_gb": ("float", None),
    "disk_mbps": ("float", 1000.0),
    "nic_gbps": ("float", 10.0),
    "gpu_link_gbps": ("float", 100.0),
    "gpus_per_group": ("int", 0),
    "rack": ("str", None),
    "domain": ("str", None),
    "nodes_per_rack": ("int", None),
    "name_prefix": ("str", None),
}
_TOP_FIELDS = {"name", "rack_uplink_gbps", "racks", "node_groups", "description"}


@dataclass(frozen=True)
class Cluster:
    """An immutable cluster: nodes in id order, rack and domain names, rack uplinks (Gbps)."""
    name: str
    nodes: tuple[NodeSpec, ...]
    rack_names: tuple[str, ...]
    rack_domain: tuple[int, ...]
    rack_uplink_gbps: tuple[float, ...]
    domain_names: tuple[str, ...]

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @cached_property
    def capacity(self) -> np.ndarray:
        """(nodes x NRES) capacities, read-only."""
        cap = np.array([n.capacity() for n in self.nodes], dtype=np.float64).reshape(-1, NRES)
        cap.setflags(write=False)
        return cap

    @cached_property
    def inv_capacity(self) -> np.ndarray:
        """(nodes x NRES) 1 / capacity, 0 where a node lacks the resource; column-major, so
        scorers can work one resource column at a time."""
        cap = self.capacity
        inv = np.zeros_like(cap, order="F")
        np.divide(1.0, cap, out=inv, where=cap > 0)
        inv.setflags(write=False)
        return inv

    @cached_property
    def _type_masks(self) -> dict:
        return {}

    def type_mask(self, job) -> np.ndarray | None:
        """The nodes whose GPU type `job` may use (a JobSpec's gpu_type, else its gpu_types), as
        a read-only bool array; None when any type will do. Kept per set of types. Names match
        whatever their case (a throughput table keeps them upper-case: V100 for Gavel's v100;
        a cluster may call its types fast and slow)."""
        allowed = (job.gpu_type,) if job.gpu_type is not None else getattr(job, "gpu_types", None)
        if allowed is None:
            return None
        m = self._type_masks.get(allowed)
        if m is None:
            types = self.gpu_types
            want = {str(t).upper() for t in allowed}
            ids = [i for i, t in enumerate(types) if str(t).upper() in want]
            m = np.isin(self.node_gpu_type, ids) if ids else np.zeros(self.num_nodes, dtype=bool)
            m.setflags(write=False)
            self._type_masks[allowed] = m
        return m

    @cached_property
    def node_rack(self) -> np.ndarray:
        a = np.array([n.rack for n in self.nodes], dtype=np.int64)
        a.setflags(write=False)
        return a

    @cached_property
    def node_domain(self) -> np.ndarray:
        a = np.array([n.domain for n in self.nodes], dtype=np.int64)
        a.setflags(write=False)
        return a

    @cached_property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({n.gpu_type for n in self.nodes}))

    @cached_property
    def node_gpu_type(self) -> np.ndarray:
        """Index into `gpu_types` per node."""
        idx = {t: i for i, t in enumerate(self.gpu_types)}
        a = np.array([idx[n.gpu_type] for n in self.nodes], dtype=np.int64)
        a.setflags(write=False)
        return a

    @cached_property
    def gpu_mem_gb(self) -> np.ndarray:
        a = np.array([n.gpu_mem_gb for n in self.nodes], dtype=np.float64)
        a.setflags(write=False)
        return a

    @cached_property
    def max_gpus_per_node(self) -> int:
        return max((n.gpus for n in self.nodes), default=0)

    def gpu_group(self, node: int, gpu: int) -> int:
        """The GPU affinity group (PCIe switch / socket) of GPU slot `gpu` of `node`; 0 when the
        node has no groups (gpus_per_group 0: all its GPUs are alike)."""
        size = self.nodes[node].gpus_per_group
        return gpu // size if size > 0 else 0

    def gpu_groups(self, node: int, gpu_ids) -> set[int]:
        """The affinity groups a set of GPU slots of `node` spans."""
        size = self.nodes[node].gpus_per_group
        return {g // size for g in gpu_ids} if size > 0 else {0}

    @property
    def total_gpus(self) -> int:
        return int(sum(n.gpus for n in self.nodes))

    def describe(self) -> str:
        groups: dict[tuple, int] = {}
        for n in self.nodes:
            key = (n.gpus, n.gpu_type, n.gpu_mem_gb, n.cpus, n.mem_gb, n.nic_gbps)
            groups[key] = groups.get(key, 0) + 1
        parts = [f"{c} x {g} {t} ({m:g} GB), {cpu:g} CPU, {mem:g} GB, {nic:g} Gbps"
                 for (g, t, m, cpu, mem, nic), c in groups.items()]
        return (f"{self.name}: {self.num_nodes} nodes, {self.total_gpus} GPUs, "
                f"{len(self.rack_names)} racks, {len(self.domain_names)} domains; " + "; ".join(parts))


def _check(kind: str, value: Any, path: str, file: str | None) -> Any:
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(path, f"must be an integer >= 0, got {value!r}", file=file)
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
            raise ConfigError(path, f"must be a number >= 0, got {value!r}", file=file)
        return float(value)
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ConfigError(path, f"must be a string, got {value!r}", file=file)
    return str(value)


def cluster_from_dict(spec: Any, *, file: str | None = None, name: str | None = None) -> Cluster:
    """Build and validate a Cluster from a parsed spec (see the module docstring)."""
    if not isinstance(spec, dict):
        raise ConfigError("cluster", "must be a mapping with node_groups", file=file)
    unknown = set(spec) - _TOP_FIELDS
    if unknown:
        raise ConfigError(sorted(unknown)[0], f"unknown field (allowed: {', '.join(sorted(_TOP_FIELDS))})", file=file)
    groups = spec.get("node_groups")
    if not isinstance(groups, list) or not groups:
        raise ConfigError("node_groups", "must be a non-empty list of node groups", file=file)
    default_uplink = _check("float", spec.get("rack_uplink_gbps", 100.0), "rack_uplink_gbps", file)
    racks_cfg = spec.get("racks") or {}
    if not isinstance(racks_cfg, dict):
        raise ConfigError("racks", "must be a mapping of rack name to {uplink_gbps, domain}", file=file)

    rack_idx: dict[str, int] = {}
    rack_dom: list[int] = []
    dom_idx: dict[str, int] = {}
    nodes: list[NodeSpec] = []

    def rack_of(rname: str, dname: str) -> int:
        if dname not in dom_idx:
            dom_idx[dname] = len(dom_idx)
        if rname not in rack_idx:
            rack_idx[rname] = len(rack_idx)
            rack_dom.append(dom_idx[dname])
        return rack_idx[rname]

    auto_rack = 0
    for gi, g in enumerate(groups):
        gpath = f"node_groups[{gi}]"
        if not isinstance(g, dict):
            raise ConfigError(gpath, "must be a mapping", file=file)
        unknown = set(g) - set(_GROUP_FIELDS)
        if unknown:
            raise ConfigError(f"{gpath}.{sorted(unknown)[0]}", "unknown field", file=file)
        v: dict[str, Any] = {}
        for key, (kind, default) in _GROUP_FIELDS.items():
            if key in g and g[key] is not None:
                v[key] = _check(kind, g[key], f"{gpath}.{key}", file)
            elif default is None and key in ("count", "cpus", "mem_gb"):
                raise ConfigError(f"{gpath}.{key}", "is required", file=file)
            else:
                v[key] = default
        if v["count"] < 1:
            raise ConfigError(f"{gpath}.count", f"must be >= 1, got {v['count']}", file=file)
        if v["gpus"] > 0 and v["gpu_mem_gb"] <= 0:
            raise ConfigError(f"{gpath}.gpu_mem_gb", "must be > 0 when the node has GPUs", file=file)
        if v["gpus_per_group"] and (v["gpus"] == 0 or v["gpus"] % v["gpus_per_group"]):
            raise ConfigError(f"{gpath}.gpus_per_group", f"must divide gpus ({v['gpus']}) into equal "
                              f"affinity groups, got {v['gpus_per_group']}", file=file)
        if v["nic_gbps"] <= 0:
            raise ConfigError(f"{gpath}.nic_gbps", "must be > 0", file=file)
        if v["rack"] is not None and v["nodes_per_rack"] is not None:
            raise ConfigError(f"{gpath}.nodes_per_rack", "give either rack or nodes_per_rack, not both", file=file)
        dname = v["domain"] or "d0"
        prefix = v["name_prefix"] or f"g{gi}-n"
        for i in range(v["count"]):
            if v["rack"] is not None:
                rname = v["rack"]
            else:
                per = v["nodes_per_rack"] or v["count"]
                rname = f"{dname}-r{auto_rack + i // per}"
            rid = rack_of(rname, dname)
            nodes.append(NodeSpec(
                node_id=len(nodes), name=f"{prefix}{i}", rack=rid, domain=dom_idx[dname],
                gpus=v["gpus"], gpu_type=v["gpu_type"] if v["gpus"] else "none",
                gpu_mem_gb=v["gpu_mem_gb"], cpus=v["cpus"], mem_gb=v["mem_gb"],
                disk_mbps=v["disk_mbps"], nic_gbps=v["nic_gbps"], gpu_link_gbps=v["gpu_link_gbps"],
                gpus_per_group=v["gpus_per_group"]))
        if v["rack"] is None:
            per = v["nodes_per_rack"] or v["count"]
            auto_rack += (v["count"] + per - 1) // per

    uplinks = [default_uplink] * len(rack_idx)
    for rname, rc in racks_cfg.items():
        rpath = f"racks.{rname}"
        if rname not in rack_idx:
            raise ConfigError(rpath, "names a rack that no node group uses", file=file)
        if not isinstance(rc, dict) or set(rc) - {"uplink_gbps"}:
            raise ConfigError(rpath, "must be a mapping with uplink_gbps", file=file)
        if "uplink_gbps" in rc:
            up = _check("float", rc["uplink_gbps"], f"{rpath}.uplink_gbps", file)
            if up <= 0:
                raise ConfigError(f"{rpath}.uplink_gbps", "must be > 0", file=file)
            uplinks[rack_idx[rname]] = up
    return Cluster(
        name=str(spec.get("name") or name or "cluster"),
        nodes=tuple(nodes),
        rack_names=tuple(rack_idx), rack_domain=tuple(rack_dom),
        rack_uplink_gbps=tuple(uplinks), domain_names=tuple(dom_idx))


def _seed000() -> dict:
    # Seed 000 names 20 simulated nodes and CPU/memory/disk/network demands; the node size is ours.
    return {"name": "seed000", "rack_uplink_gbps": 40, "node_groups": [
        {"count": 20, "gpus": 4, "gpu_type": "V100", "gpu_mem_gb": 16, "cpus": 32, "mem_gb": 128,
         "disk_mbps": 1000, "nic_gbps": 10, "gpu_link_gbps": 100, "nodes_per_rack": 10}]}


def _seed002() -> dict:
    # Seed 002: 2 servers x 4 V100 + 2 servers x 2 V100, 10 Gbps Ethernet, one rack.
    common = {"gpu_type": "V100", "gpu_mem_gb": 32, "cpus": 40, "mem_gb": 256, "disk_mbps": 2000,
              "nic_gbps": 10, "gpu_link_gbps": 100, "rack": "r0"}
    return {"name": "seed002", "rack_uplink_gbps": 40, "node_groups": [
        {"count": 2, "gpus": 4, "name_prefix": "v100x4-", **common},
        {"count": 2, "gpus": 2, "name_prefix": "v100x2-", **common}]}


def _seed001() -> dict:
    # Optimus's evaluation (seed 001) names no cluster; ours: 16 servers x 4 P100 (the paper's
    # testbed GPUs are of that class), 32 cores, 128 GB, 10 Gbps, one rack.
    return {"name": "seed001", "rack_uplink_gbps": 40, "node_groups": [
        {"count": 16, "gpus": 4, "gpu_type": "P100", "gpu_mem_gb": 16, "cpus": 32, "mem_gb": 128,
         "disk_mbps": 1000, "nic_gbps": 10, "gpu_link_gbps": 100, "rack": "r0"}]}


def _liquid(n: int) -> dict:
    # Seed 003 (Liquid): nodes of 2 T4; 5 nodes per rack so that rack cost matters at 10+ nodes.
    return {"name": f"liquid-{n}", "rack_uplink_gbps": 25, "node_groups": [
        {"count": n, "gpus": 2, "gpu_type": "T4", "gpu_mem_gb": 16, "cpus": 24, "mem_gb": 96,
         "disk_mbps": 1000, "nic_gbps": 10, "gpu_link_gbps": 64, "nodes_per_rack": 5}]}


def _v100(n: int) -> dict:
    # The scale benchmark's cluster (issue "Scale"): n nodes of 8 V100, 100 Gbps NICs, 32 nodes
    # per rack; CPU and memory are ours (a DGX-1-like server). The fabric is non-blocking (a rack
    # uplink of 32 x 100 Gbps), as in GPU clusters built for all-reduce; a YAML cluster with a
    # narrower rack_uplink_gbps models an oversubscribed one.
    return {"name": f"v100-{n}", "rack_uplink_gbps": 3200, "node_groups": [
        {"count": n, "gpus": 8, "gpu_type": "V100", "gpu_mem_gb": 32, "cpus": 80, "mem_gb": 512,
         "nic_gbps": 100, "gpu_link_gbps": 300, "nodes_per_rack": 32}]}


def _pollux() -> dict:
    # Pollux's simulator and testbed: 16 x g4dn.12xlarge (4 T4, 48 vCPU, 192 GB). nic_gbps is the
    # *effective* all-reduce bandwidth fitted from Pollux's measured sync times (bert, cifar10 over
    # 2 nodes: about 5-7 Gbps), not the 50 Gbps nominal link; see docs in tests/unit/test_speed.py.
    return {"name": "pollux", "rack_uplink_gbps": 400, "node_groups": [
        {"count": 16, "gpus": 4, "gpu_type": "T4", "gpu_mem_gb": 16, "cpus": 48, "mem_gb": 192,
         "disk_mbps": 1000, "nic_gbps": 6, "gpu_link_gbps": 100, "rack": "r0"}]}


def _philly() -> dict:
    # ../shared/traces/philly/cluster_machine_list: 321 x 2 GPUs (12 GB) + 231 x 8 GPUs (24 GB).
    # GPU types are inferred from the memory sizes (12 GB: P100-12GB, 24 GB: P40); CPU, memory and
    # racks (32 nodes per rack) are not in the list and are our assumptions.
    return {"name": "philly", "rack_uplink_gbps": 100, "node_groups": [
        {"count": 321, "gpus": 2, "gpu_type": "P100", "gpu_mem_gb": 12, "cpus": 24, "mem_gb": 128,
         "nic_gbps": 40, "gpu_link_gbps": 100, "nodes_per_rack": 32, "name_prefix": "m2-"},
        {"count": 231, "gpus": 8, "gpu_type": "P40", "gpu_mem_gb": 24, "cpus": 48, "mem_gb": 512,
         "nic_gbps": 40, "gpu_link_gbps": 100, "nodes_per_rack": 32, "name_prefix": "m8-"}]}


def _gavel(v: int, p: int, k: int, g: int) -> dict:
    # Gavel's simulated clusters (`-c V:P:K`, `--num_gpus_per_server G`): V V100s, P P100s and K
    # K80s on servers of G GPUs of one type. Gavel models no network (its throughput table holds
    # each job's whole speed); the servers' CPU, memory and links here are ours.
    groups = []
    for gtype, n, mem in (("V100", v, 16), ("P100", p, 16), ("K80", k, 12)):
        if n:
            groups.append({"count": n // g, "gpus": g, "gpu_type": gtype, "gpu_mem_gb": mem, "cpus": 8 * g,
                           "mem_gb": 64 * g, "nic_gbps": 25, "gpu_link_gbps": 100, "nodes_per_rack": 32,
                           "name_prefix": f"{gtype.lower()}-"})
    return {"name": f"gavel-{v}:{p}:{k}:{g}", "rack_uplink_gbps": 800, "node_groups": groups}


def _tiresias(n: int, g: int) -> dict:
    # The Tiresias simulator's cluster spec files (SymbioticLab/Tiresias simulator/nNgG.csv, e.g.
    # n32g4.csv: num_switch 1, num_node_p_switch 32, num_gpu_p_node 4, num_cpu_p_node 40,
    # mem_p_node 256): N nodes of G GPUs under one switch. It models no GPU type or network
    # speed; those here are ours (they do not change a Tiresias trace's fixed durations).
    return {"name": f"tiresias-n{n}g{g}", "rack_uplink_gbps": 100 * n, "node_groups": [
        {"count": n, "gpus": g, "gpu_type": "V100", "gpu_mem_gb": 16, "cpus": 40, "mem_gb": 256,
         "nic_gbps": 100, "gpu_link_gbps": 100, "rack": "r0"}]}


def _tiresias_counts(s: str) -> tuple[int, int] | None:
    """(N, G) of a `tiresias-nNgG` name, else None."""
    m = re.fullmatch(r"tiresias-n(\d+)g(\d+)", s)
    if m is None:
        return None
    n, g = int(m.group(1)), int(m.group(2))
    return (n, g) if 0 < n <= MAX_SIZED_NODES and 0 < g <= 64 else None


def _gavel_counts(s: str) -> tuple[int, int, int, int] | None:
    """(V, P, K, G) of a `gavel-V:P:K[:G]` name, else None; DlschedError for a malformed one."""
    if not s.startswith("gavel-"):
        return None
    parts = s[len("gavel-"):].split(":")
    if len(parts) not in (3, 4) or not all(x.isdigit() for x in parts):
        raise DlschedError(f"cluster {s!r}: give gavel-V:P:K or gavel-V:P:K:G (V100, P100 and K80 GPUs, "
                           "G GPUs per server), e.g. gavel-36:36:36 or gavel-8:16:24:4")
    v, p, k = (int(x) for x in parts[:3])
    g = int(parts[3]) if len(parts) == 4 else 1
    if not 1 <= g <= 64:
        raise DlschedError(f"cluster {s!r}: G (GPUs per server) must be 1..64, got {g}")
    bad = [f"{n} {t}s" for n, t in ((v, "V100"), (p, "P100"), (k, "K80")) if n % g]
    if bad:
        raise DlschedError(f"cluster {s!r}: {bad[0]} do not fill servers of {g} GPUs")
    if not 0 < v + p + k <= MAX_SIZED_NODES * g:
        raise DlschedError(f"cluster {s!r}: give between 1 and {MAX_SIZED_NODES * g} GPUs")
    return v, p, k, g


PRESETS: dict[str, Any] = {
    "seed000": _seed000,
    "seed001": _seed001,
    "seed002": _seed002,
    "pollux": _pollux,
    "philly": _philly,
    "liquid-N": _liquid,   # liquid-5, liquid-10, ...
    "v100-N": _v100,       # v100-150, v100-1500, ...
    "gavel-V:P:K[:G]": _gavel,   # gavel-36:36:36, gavel-8:16:24:4 (V100, P100, K80; G per server)
    "tiresias-nNgG": _tiresias,  # tiresias-n4g4, tiresias-n32g4 (Tiresias's simulator/nNgG.csv)
}
SIZED = {"liquid-": _liquid, "v100-": _v100}   # presets that take a node count: liquid-N, v100-N
MAX_SIZED_NODES = 100_000


def _sized(s: str):
    """(builder, N) for a sized preset name such as liquid-10, else None."""
    for prefix, build in SIZED.items():
        rest = s[len(prefix):]
        if s.startswith(prefix) and rest.isdigit() and 0 < int(rest) <= MAX_SIZED_NODES:
            return build, int(rest)
    return None


def is_preset(ref) -> bool:
    """Whether `ref` names a preset (a preset wins over a file of the same name)."""
    s = str(ref)
    if s.startswith("gavel-") and ":" in s:
        return True                     # a malformed one is refused by preset_spec, with the form
    return ((s in PRESETS and not s.endswith(("-N", "]", "NgG"))) or _sized(s) is not None
            or _tiresias_counts(s) is not None)


def preset_spec(name: str) -> dict:
    """The spec (node groups) of a preset name, as a cluster YAML file would give it."""
    counts = _gavel_counts(name)
    if counts is not None:
        return _gavel(*counts)
    tc = _tiresias_counts(name)
    if tc is not None:
        return _tiresias(*tc)
    sized = _sized(name)
    return sized[0](sized[1]) if sized else PRESETS[name]()


def load_cluster(ref: str | Path | Cluster) -> Cluster:
    """A preset name (seed000, seed001, seed002, liquid-N, v100-N, gavel-V:P:K[:G], tiresias-nNgG, pollux, philly) or
    a YAML file."""
    if isinstance(ref, Cluster):
        return ref
    s = str(ref)
    if is_preset(s):
        return cluster_from_dict(preset_spec(s), name=s)
    p = Path(s)
    if p.suffix in (".yaml", ".yml", ".json") or p.exists():
        spec = read_yaml(p, "cluster file")
        return cluster_from_dict(spec, file=s, name=p.stem)
    names = ", ".join(k for k in PRESETS)
    raise DlschedError(f"unknown cluster {s!r}: give a preset ({names}) or a YAML file")
