"""Named tenancy modes: one component of each part (dlsched.tenancy.points) and the settings
that make a faithful reading of one system. `dlsched policies --all` lists them.

| mode               | entitlement        | queue order | victims            | ledger            | root pool |
|--------------------|--------------------|-------------|--------------------|-------------------|-----------|
| kueue              | nominal            | kueue       | kueue              | -                 | none      |
| kueue-fair         | nominal            | drs         | kueue-fair         | -                 | none      |
| kai                | kai                | kai         | kai                | decayed, by capacity, 1-week window | cluster |
| volcano-proportion | volcano-proportion | volcano     | volcano-proportion | -                 | cluster   |
| volcano-capacity   | volcano-capacity   | volcano     | volcano-capacity   | -                 | cluster   |
| slurm-fairtree     | nominal            | fairtree    | none               | decayed, half-life 7 days | cluster |

Root pool: Kueue admits only within the queues' quotas (capacity no queue names is used by
nobody); the others divide the whole cluster, so the root holds what the top-level quotas
leave. Settings every mode has: `strategy` (profile | strict | best-effort: a queue whose head
is refused blocks the rest of that queue, as Kueue's StrictFIFO, or not, as BestEffortFIFO;
`profile`: strict when the profile blocks, as fifo does), `non_preemptible_priority` (jobs at or
above it are never preempted: KAI's build and inference classes, Volcano's jobs not marked
preemptable; None: every job may be preempted), `non_preemptible_in_quota` (such jobs are
admitted only within their queue's nominal quota: KAI), `reclaim_min_runtime_s` and
`preempt_min_runtime_s`; and any part by name (`victims: none` turns preemption off). The differences from each system are written in docs/tenancy.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from dlsched.core.errors import ConfigError
from dlsched.scheduler.framework import REGISTRY, build
from dlsched.tenancy import entitle, ledger, orders, victims  # noqa: F401 (the parts register themselves)

SETTINGS = ("entitlement", "queue_order", "victims", "ledger", "strategy", "non_preemptible_priority", "non_preemptible_in_quota", "reclaim_min_runtime_s", "preempt_min_runtime_s", "params")


@dataclass(frozen=True)
class ModeSpec:
    name: str
    description: str
    entitlement: str
    queue_order: str
    victims: str
    ledger: str | None = None
    pool: str = "cluster"                  # none | cluster (see the module)
    strategy: str = "profile"
    non_preemptible_priority: int | None = None
    non_preemptible_in_quota: bool = False      # KAI: such jobs use only their queue's quota
    reclaim_min_runtime_s: float = 0.0
    preempt_min_runtime_s: float = 0.0
    params: dict = field(default_factory=dict)   # part kind -> constructor params
    source: str = ""


def _mode(spec: ModeSpec) -> ModeSpec:
    REGISTRY.add("tenancy", spec.name, spec, spec.description, spec.source)
    return spec


_mode(ModeSpec("kueue", "Kueue classic: nominal quotas, cohort borrowing, reclaim to nominal",
               "nominal", "kueue", "kueue", pool="none", source="kubernetes-sigs/kueue"))
_mode(ModeSpec("kueue-fair", "Kueue fair sharing: lowest dominant share first, S2-a/S2-b preemption",
               "nominal", "drs", "kueue-fair", pool="none", source="kubernetes-sigs/kueue KEP-1714"))
_mode(ModeSpec("kai", "KAI-Scheduler: water-filled fair share with time-based usage, reclaim, priorities",
               "kai", "kai", "kai", ledger="decayed", non_preemptible_priority=100, non_preemptible_in_quota=True,
               params={"ledger": {"half_life_s": 0.0, "window_s": 7 * 86400.0, "normalise": "capacity"}},
               source="NVIDIA/KAI-Scheduler"))
_mode(ModeSpec("volcano-proportion", "Volcano proportion: weighted deserved shares, reclaim above deserved",
               "volcano-proportion", "volcano", "volcano-proportion", non_preemptible_priority=100,
               source="volcano-sh/volcano plugins/proportion"))
_mode(ModeSpec("volcano-capacity", "Volcano capacity: configured deserved, capability, guarantee",
               "volcano-capacity", "volcano", "volcano-capacity", non_preemptible_priority=100,
               source="volcano-sh/volcano plugins/capacity"))
_mode(ModeSpec("slurm-fairtree", "Slurm Fair Tree: shares and decayed usage order, limits, no preemption",
               "nominal", "fairtree", "none", ledger="decayed", source="SchedMD/slurm fair_tree.shtml"))


class Mode:
    """A built mode: its parts' instances and its settings."""

    def __init__(self, name: str, overrides: dict | None = None):
        spec = REGISTRY.get("tenancy", name) if name in REGISTRY.names("tenancy") else None
        if spec is None:
            raise ConfigError("tenancy", f"unknown tenancy mode {name!r} (modes: {', '.join(REGISTRY.names('tenancy'))})")
        over = dict(overrides or {})
        bad = sorted(k for k in over if k not in SETTINGS)
        if bad:
            raise ConfigError(f"tenancy.{bad[0]}", f"unknown setting (allowed: {', '.join(SETTINGS)})")
        params = {k: {**spec.params.get(k, {}), **v} for k, v in {**spec.params, **over.pop("params", {})}.items()}
        spec = replace(spec, **over)
        for kind in ("entitlement", "queue_order", "victims", "ledger"):
            name = getattr(spec, kind)
            if (name is not None or kind != "ledger") and name not in REGISTRY.names(kind):
                raise ConfigError(f"tenancy.{kind}", f"unknown {kind} {name!r} (registered: "
                                  f"{', '.join(REGISTRY.names(kind))})")
        if spec.strategy not in ("profile", "strict", "best-effort"):
            raise ConfigError("tenancy.strategy", f"must be profile, strict or best-effort, got {spec.strategy!r}")
        for k in ("reclaim_min_runtime_s", "preempt_min_runtime_s"):
            v = getattr(spec, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ConfigError(f"tenancy.{k}", f"must be a number >= 0, got {v!r}")
        bad = sorted(k for k in params if k not in ("entitlement", "queue_order", "victims", "ledger"))
        if bad:
            raise ConfigError(f"tenancy.params.{bad[0]}", "unknown part (entitlement, queue_order, victims, ledger)")
        self.spec = spec
        self.name = spec.name
        self.entitlement = build("entitlement", spec.entitlement, params.get("entitlement"), "tenancy.params.entitlement")
        self.queue_order = build("queue_order", spec.queue_order, params.get("queue_order"), "tenancy.params.queue_order")
        self.victims = build("victims", spec.victims, params.get("victims"), "tenancy.params.victims")
        self.ledger = (build("ledger", spec.ledger, params.get("ledger"), "tenancy.params.ledger")
                       if spec.ledger else None)

    def parts(self) -> list:
        return [p for p in (self.entitlement, self.queue_order, self.victims, self.ledger) if p is not None]
