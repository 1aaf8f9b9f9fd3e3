"""The queue tree of a shared cluster (`--queues FILE`): who is entitled to what.

    queues:
      - name: research                 # an inner node: its subtree's cap and its own shared pool
        quotas:
          gpu: {nominal: 0, limit: 48}
      - name: team-a
        parent: research               # no parent: a child of the implicit root
        weight: 2                      # share weight (fair share, over-quota split); default 1
        priority: 0                    # queue priority (KAI); default 0
        quotas:
          gpu: {nominal: 8, borrowing_limit: 4, lending_limit: 2, limit: 16}
          gpu:V100: {nominal: 4}       # a quota for one GPU type
      - name: team-b
        parent: research
        quotas:
          gpu: {nominal: 4}            # no borrowing_limit: may borrow what its cohort has idle

Only leaves hold jobs; a job names its leaf in its `queue` (a workload's `queue` column, a job
spec's `queue:`). A cluster without a queue file has one leaf, `default`, with no quota.

One record per (queue, resource) expresses the four systems our users run (docs/tenancy.md):

| here            | Kueue          | KAI                 | Volcano            | Slurm     |
|-----------------|----------------|---------------------|--------------------|-----------|
| nominal         | nominalQuota   | quota (deserved)    | deserved           | -         |
| borrowing_limit | borrowingLimit | (limit - quota)     | capability - deserved | -      |
| lending_limit   | lendingLimit   | -                   | deserved - guarantee | -       |
| limit           | -              | limit               | capability         | GrpTRES   |
| weight          | fairSharing.weight | overQuotaWeight | weight             | RawShares |
| priority        | -              | queue priority      | priority           | -         |

Resources: `gpu` (any type), `gpu:<TYPE>` (one GPU type), `cpu`, `mem_gb`.

Bad input is one ConfigError naming the file, the line and the field: a name given twice, an
unknown parent, a cycle, a negative quota, a lending limit above the nominal, a limit below the
nominal, or children whose nominal quotas together exceed their parent's limit (the subtree could
never give them their guarantees).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlsched.core.errors import ConfigError

DEFAULT_QUEUE = "default"
ROOT = ""                              # the implicit root: the parent of every top-level queue
MAX_QUEUES = 10_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_RESOURCE = re.compile(r"^(gpu(:[A-Za-z0-9_.-]{1,64})?|cpu|mem_gb)$")
_QUEUE_FIELDS = ("name", "parent", "weight", "priority", "quotas")
_QUOTA_FIELDS = ("nominal", "borrowing_limit", "lending_limit", "limit")


@dataclass(frozen=True)
class Quota:
    """One queue's quota of one resource. None: no such limit (may borrow whatever its cohort
    has idle; lends all of its nominal; no cap)."""
    nominal: float = 0.0
    borrowing_limit: float | None = None
    lending_limit: float | None = None
    limit: float | None = None

    @property
    def guaranteed(self) -> float:
        """The part never lent to others (Kueue's nominal - lendingLimit; Volcano's guarantee)."""
        return self.nominal - (self.lending_limit if self.lending_limit is not None else self.nominal)


@dataclass(frozen=True)
class QueueNode:
    name: str
    parent: str = ROOT
    weight: float = 1.0
    priority: int = 0
    quotas: dict[str, Quota] = field(default_factory=dict)

    def quota(self, resource: str) -> Quota | None:
        return self.quotas.get(resource)


@dataclass
class QueueTree:
    """The validated tree: nodes by name, children by parent name (ROOT for the top level)."""
    nodes: dict[str, QueueNode]
    children: dict[str, list[str]]
    file: str | None = None
    #: the file's `tenancy:` section: {mode, and a mode's settings} (dlsched.tenancy.modes)
    settings: dict = field(default_factory=dict)

    @property
    def leaves(self) -> list[str]:
        return [n for n in self.nodes if not self.children.get(n)]

    def is_leaf(self, name: str) -> bool:
        return name in self.nodes and not self.children.get(name)

    def ancestors(self, name: str) -> list[str]:
        """`name`'s parents up to the top level, nearest first (the root not included)."""
        out, p = [], self.nodes[name].parent
        while p != ROOT:
            out.append(p)
            p = self.nodes[p].parent
        return out

    def resources(self) -> list[str]:
        return sorted({r for n in self.nodes.values() for r in n.quotas})

    def to_dict(self) -> dict:
        return {**({"tenancy": dict(self.settings)} if self.settings else {}),
                "queues": [{"name": n.name, **({"parent": n.parent} if n.parent != ROOT else {}),
                            "weight": n.weight, "priority": n.priority,
                            "quotas": {r: {k: getattr(q, k) for k in _QUOTA_FIELDS if getattr(q, k) is not None}
                                       for r, q in n.quotas.items()}} for n in self.nodes.values()]}


def default_tree() -> QueueTree:
    """A cluster without a queue file: one leaf, `default`, with no quota."""
    return QueueTree({DEFAULT_QUEUE: QueueNode(DEFAULT_QUEUE)}, {ROOT: [DEFAULT_QUEUE]})


def _num(v: Any, where: str, file: str | None, *, allow_none: bool = True) -> float | None:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        raise ConfigError(where, f"must be a number, got {v!r}", file=file)
    if v < 0:
        raise ConfigError(where, f"must be >= 0, got {v}", file=file)
    return float(v)


def _quota(spec: Any, where: str, file: str | None) -> Quota:
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        spec = {"nominal": spec}                           # gpu: 4  is  gpu: {nominal: 4}
    if not isinstance(spec, dict):
        raise ConfigError(where, "must be a mapping of nominal, borrowing_limit, lending_limit, limit", file=file)
    unknown = sorted(str(k) for k in spec if k not in _QUOTA_FIELDS)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", f"unknown field (allowed: {', '.join(_QUOTA_FIELDS)})", file=file)
    q = Quota(nominal=_num(spec.get("nominal", 0), f"{where}.nominal", file, allow_none=False),
              **{k: _num(spec.get(k), f"{where}.{k}", file) for k in _QUOTA_FIELDS[1:]})
    if q.lending_limit is not None and q.lending_limit > q.nominal:
        raise ConfigError(f"{where}.lending_limit", f"must be at most the nominal quota ({q.nominal:g}), "
                          f"got {q.lending_limit:g}", file=file)
    if q.limit is not None and q.limit < q.nominal:
        raise ConfigError(f"{where}.limit", f"must be at least the nominal quota ({q.nominal:g}), got {q.limit:g}",
                          file=file)
    return q


def tree_from_dict(spec: Any, *, file: str | None = None) -> QueueTree:
    """Validate a parsed queue file ({queues: [...]}) into a QueueTree."""
    if not isinstance(spec, dict) or not isinstance(spec.get("queues"), list) or not spec["queues"]:
        raise ConfigError("queues", "must be a non-empty list of queues (name, parent, weight, priority, quotas)",
                          file=file)
    unknown = sorted(str(k) for k in spec if k not in ("queues", "tenancy"))
    if unknown:
        raise ConfigError(unknown[0], "unknown field (the file holds `queues: [...]` and `tenancy: {...}`)", file=file)
    settings = spec.get("tenancy") or {}
    if not isinstance(settings, dict):
        raise ConfigError("tenancy", "must be a mapping: mode and the mode's settings", file=file)
    if len(spec["queues"]) > MAX_QUEUES:
        raise ConfigError("queues", f"at most {MAX_QUEUES} queues, got {len(spec['queues'])}", file=file)
    nodes: dict[str, QueueNode] = {}
    for i, q in enumerate(spec["queues"]):
        where = f"queues[{i}]"
        if not isinstance(q, dict):
            raise ConfigError(where, "must be a mapping (name, parent, weight, priority, quotas)", file=file)
        bad = sorted(str(k) for k in q if k not in _QUEUE_FIELDS)
        if bad:
            raise ConfigError(f"{where}.{bad[0]}", f"unknown field (allowed: {', '.join(_QUEUE_FIELDS)})", file=file)
        name = q.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{where}.name", f"must be 1-64 letters, digits, '-', '_' or '.', got {name!r}", file=file)
        if name in nodes:
            raise ConfigError(f"{where}.name", f"queue {name!r} is named twice", file=file)
        parent = q.get("parent") or ROOT
        if not isinstance(parent, str):
            raise ConfigError(f"{where}.parent", f"must be a queue name, got {parent!r}", file=file)
        prio = q.get("priority", 0)
        if isinstance(prio, bool) or not isinstance(prio, int):
            raise ConfigError(f"{where}.priority", f"must be an integer, got {prio!r}", file=file)
        quotas = q.get("quotas") or {}
        if not isinstance(quotas, dict):
            raise ConfigError(f"{where}.quotas", "must be a mapping of resource to quota", file=file)
        qs = {}
        for r, qq in quotas.items():
            if not isinstance(r, str) or not _RESOURCE.match(r):
                raise ConfigError(f"{where}.quotas.{r}", "unknown resource (gpu, gpu:<TYPE>, cpu, mem_gb)", file=file)
            qs[r] = _quota(qq, f"{where}.quotas.{r}", file)
        nodes[name] = QueueNode(name, parent, _num(q.get("weight", 1.0), f"{where}.weight", file, allow_none=False),
                                int(prio), qs)
    index = {q["name"]: i for i, q in enumerate(spec["queues"])}
    children: dict[str, list[str]] = {}
    for n in nodes.values():
        if n.parent != ROOT and n.parent not in nodes:
            raise ConfigError(f"queues[{index[n.name]}].parent", f"unknown queue {n.parent!r}", file=file)
        children.setdefault(n.parent, []).append(n.name)
    for n in nodes.values():                                   # a cycle never reaches the root
        seen, p = {n.name}, n.parent
        while p != ROOT:
            if p in seen:
                raise ConfigError(f"queues[{index[n.name]}].parent",
                                  f"a cycle: {' -> '.join([n.name, *_chain(nodes, n.parent, n.name)])}", file=file)
            seen.add(p)
            p = nodes[p].parent
    for parent, kids in children.items():
        if parent == ROOT:
            continue
        for r, pq in nodes[parent].quotas.items():
            total = sum(nodes[k].quotas[r].nominal for k in kids if r in nodes[k].quotas)
            if pq.limit is not None and total > pq.limit + 1e-9:
                raise ConfigError(f"queues[{index[kids[-1]]}].quotas.{r}.nominal",
                                  f"the children of {parent!r} are guaranteed {total:g} {r} in all, more than its "
                                  f"limit of {pq.limit:g}", file=file)
    tree = QueueTree(nodes, children, file, dict(settings))
    if settings:
        from dlsched.tenancy.modes import Mode
        try:
            Mode(str(settings.get("mode", "kueue")), {k: v for k, v in settings.items() if k != "mode"})
        except ConfigError as e:
            raise ConfigError(e.path, e.detail, file=file) from None
    return tree


def _chain(nodes: dict[str, QueueNode], start: str, stop: str) -> list[str]:
    out, p = [], start
    while p != stop and p not in out:
        out.append(p)
        p = nodes[p].parent
    return out + [stop]


#: queue files shipped with dlsched, by name (`--queues philly`)
BUNDLED = {"philly": "philly/queues.yaml", "philly-isolated": "philly/queues-isolated.yaml"}


def load_queues(path: str | Path) -> QueueTree:
    """Read and validate a queue file (YAML), or a bundled one by name (BUNDLED); errors name
    the file, line and field."""
    from dlsched.core.config import read_yaml
    if str(path) in BUNDLED and not Path(path).exists():
        path = Path(__file__).resolve().parent.parent / "data" / BUNDLED[str(path)]
    return tree_from_dict(read_yaml(path, "queue file"), file=str(path))


def with_default(tree: QueueTree) -> QueueTree:
    """The tree with a `default` leaf (no quota: it runs on what others lend) when it has none:
    where jobs that name no queue go."""
    if DEFAULT_QUEUE in tree.nodes:
        return tree
    nodes = {**tree.nodes, DEFAULT_QUEUE: QueueNode(DEFAULT_QUEUE)}
    children = {k: list(v) for k, v in tree.children.items()}
    children.setdefault(ROOT, []).append(DEFAULT_QUEUE)
    return QueueTree(nodes, children, tree.file, dict(tree.settings))


def line_of(file: str | None, job_id: str) -> int | None:
    """The line of a text workload file (CSV, JSON lines) that starts the row of `job_id`."""
    import re
    if not file or file.endswith((".parquet", ".gz")):
        return None
    try:
        with open(file, encoding="utf-8", errors="replace") as fh:
            pat = re.compile(rf'(^|[,{{"\s]){re.escape(job_id)}([",\s]|$)')
            for n, text in enumerate(fh, 1):
                if pat.search(text):
                    return n
    except OSError:
        return None
    return None
