"""Extension points, the registry and typed construction of policy components.

The five extension points (one small Protocol each). A round calls them in this order:

    order     -> key(job, ctx): sort key of a waiting job; the framework appends
                 (submit_time_s, job_id), so ties are deterministic. Called once per waiting job
                 per round (or once at arrival when `static = True`). Must not mutate anything.
    allocate  -> allocate(jobs, ctx): {job_id: tasks} - how many workers / PS each waiting job
                 gets this round (default: what it asked for). Pure; returns new TaskSpec tuples.
    filter    -> filter(ctx, job, task, free): NodeMask over all nodes (bool array + reasons)
                 saying which nodes may take this task now. Reads `free` (the transaction's
                 tentative free array); must not write it. A filter may also define
                 never_fits(job, cluster) -> str: a reason when the job can never pass it on this
                 cluster (e.g. co-location of a job larger than any server); the job is then
                 rejected at arrival instead of waiting forever.
    score     -> score(ctx, job, task, free, nodes): float array in [0, 1], one per candidate
                 node (higher is better). The framework checks the range, combines scorers by
                 weight and picks the best node, ties to the lowest node id. A scorer whose score
                 for a node depends on that node's row alone sets `node_local = True`; then the
                 framework re-scores only the node that changed between a job's identical tasks.
    action    -> act(ctx): whatever else the round does (preempt, backfill, pack, migrate...).
                 Runs after placement; may add decisions through ctx.txn. Must be idempotent
                 with respect to an unchanged snapshot (same input, same decisions).
                 An action may also define before_place(ctx): it runs after ordering and
                 allocation, before the per-task placement loop, and may place whole jobs itself
                 (ctx.txn.reserve + ctx.scheduler.commit); jobs it decided are skipped by the loop.
                 This is how job-level placers work (Liquid's batch GA, Gandiva's getNodes).

An order with `dynamic = True` is re-evaluated after every job the round places (the next job
is the one with the smallest key at that moment): DRF's progressive filling needs it.

Every component is a class registered by name with `@register(kind, name)`. Its constructor
takes typed keyword parameters with defaults; `build(kind, name, params, path)` validates
them against the signature (unknown keys and wrong types are ConfigErrors naming the path).
"""
from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from dlsched.core.errors import ConfigError, DlschedError
from dlsched.core.types import JobSpec, TaskSpec

KINDS = ("order", "allocate", "filter", "score", "action", "profile")


@dataclass(frozen=True, slots=True)
class NodeMask:
    """A filter's verdict for every node: `ok[n]` and, for rejected nodes, why."""
    ok: np.ndarray
    reason: str = ""

    def explain(self, node: int) -> str:
        return "ok" if self.ok[node] else self.reason


@runtime_checkable
class Order(Protocol):
    static: bool  # True when the key never changes after arrival (the queue is kept sorted)

    def key(self, job: "JobRecordLike", ctx: "RoundContextLike") -> tuple: ...


@runtime_checkable
class Allocate(Protocol):
    def allocate(self, jobs: list, ctx: "RoundContextLike") -> dict[str, tuple[TaskSpec, ...]]: ...


@runtime_checkable
class Filter(Protocol):
    def filter(self, ctx: "RoundContextLike", job: JobSpec, task: TaskSpec, free: np.ndarray) -> NodeMask: ...


@runtime_checkable
class Score(Protocol):
    def score(self, ctx: "RoundContextLike", job: JobSpec, task: TaskSpec, free: np.ndarray,
              nodes: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class Action(Protocol):
    def act(self, ctx: "RoundContextLike") -> None: ...


JobRecordLike = Any
RoundContextLike = Any
_PROTOCOLS = {"order": Order, "allocate": Allocate, "filter": Filter, "score": Score, "action": Action}


class RegistryError(DlschedError):
    pass


@dataclass
class Entry:
    kind: str
    name: str
    obj: Any
    doc: str
    source: str = ""
    module: str = ""


class Registry:
    """Components and profiles by (kind, name). Registering a name twice is an error."""

    def __init__(self):
        self._items: dict[tuple[str, str], Entry] = {}

    def add(self, kind: str, name: str, obj: Any, doc: str = "", source: str = "") -> None:
        if kind not in KINDS:
            raise RegistryError(f"unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
        if (kind, name) in self._items:
            raise RegistryError(f"duplicate {kind} name {name!r} "
                                f"(already registered by {self._items[(kind, name)].module})")
        mod = getattr(obj, "__module__", "") or ""
        self._items[(kind, name)] = Entry(kind, name, obj, doc, source, mod)

    def get(self, kind: str, name: str) -> Any:
        try:
            return self._items[(kind, name)].obj
        except KeyError:
            names = ", ".join(self.names(kind)) or "none"
            raise RegistryError(f"unknown {kind} {name!r} (registered: {names})") from None

    def entry(self, kind: str, name: str) -> Entry:
        self.get(kind, name)
        return self._items[(kind, name)]

    def names(self, kind: str) -> list[str]:
        return sorted(n for (k, n) in self._items if k == kind)

    def entries(self, kind: str | None = None) -> list[Entry]:
        return [e for (k, _), e in sorted(self._items.items()) if kind is None or k == kind]


REGISTRY = Registry()


def register(kind: str, name: str, *, source: str = "") -> Callable:
    """Class decorator: register a component under `name`; sets cls.name."""
    def deco(cls):
        if kind in _PROTOCOLS:
            missing = [m for m in ("key", "allocate", "filter", "score", "act")
                       if hasattr(_PROTOCOLS[kind], m) and not hasattr(cls, m)]
            if missing:
                raise RegistryError(f"{cls.__name__} registered as {kind} lacks {missing[0]}()")
        cls.name = name
        doc = (inspect.getdoc(cls) or "").strip().splitlines()
        REGISTRY.add(kind, name, cls, doc[0] if doc else "", source)
        return cls
    return deco


def _type_ok(value: Any, ann: Any) -> bool:
    if ann is inspect.Parameter.empty or ann is Any:
        return True
    origin = typing.get_origin(ann)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(ann))
    if ann is type(None):
        return value is None
    if ann is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if ann is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is dict or ann is dict:
        return isinstance(value, dict)
    if origin in (list, tuple) or ann in (list, tuple):
        return isinstance(value, (list, tuple))
    if isinstance(ann, type):
        return isinstance(value, ann)
    return True


def build(kind: str, name: str, params: dict | None = None, path: str | None = None) -> Any:
    """Construct a registered component, validating `params` against its constructor."""
    cls = REGISTRY.get(kind, name)
    path = path or f"policies.{name}"
    params = dict(params or {})
    sig = inspect.signature(cls.__init__)
    hints = typing.get_type_hints(cls.__init__)
    accepted = {p for p in sig.parameters if p != "self"}
    for key, value in params.items():
        if key not in accepted:
            allowed = ", ".join(sorted(accepted)) or "none"
            raise ConfigError(f"{path}.{key}", f"unknown parameter (allowed: {allowed})")
        ann = hints.get(key, inspect.Parameter.empty)
        if not _type_ok(value, ann):
            tname = getattr(ann, "__name__", str(ann))
            raise ConfigError(f"{path}.{key}", f"expected {tname}, got {value!r}")
    try:
        return cls(**params)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(path, str(e)) from None


def params_of(kind: str, name: str) -> dict[str, Any]:
    """Constructor parameters and defaults of a registered component."""
    cls = REGISTRY.get(kind, name)
    sig = inspect.signature(cls.__init__)
    return {p.name: p.default for p in sig.parameters.values() if p.name != "self"}


@dataclass(frozen=True)
class ProfileSpec:
    """A named scheduler: which component fills each extension point, and how a round commits.

    gang:     commit a job only when all its tasks are placed (all or nothing).
    blocking: stop the round at the first waiting job that does not fit (strict order, the
              head of the queue is never overtaken); otherwise later jobs may go first.
    round_s:  also run a round every round_s seconds (None: only when something changed).
    event_rounds: run a round as soon as something changes (an arrival, a finish, a node
              event). False (needs round_s): rounds only at multiples of round_s, so a job that
              arrives or frees GPUs between two waits for the next (Pollux's simulator's
              `--interval`).
    """
    name: str
    description: str
    order: str = "fifo"
    allocate: str = "requested"
    filters: tuple[str, ...] = ("fits",)
    scores: tuple[tuple[str, float], ...] = (("first_fit", 1.0),)
    actions: tuple[str, ...] = ()
    gang: bool = False
    blocking: bool = True
    round_s: float | None = None
    event_rounds: bool = True
    source: str = ""
    params: dict = field(default_factory=dict)   # component name -> constructor params

    def components(self) -> list[tuple[str, str]]:
        return ([("order", self.order), ("allocate", self.allocate)]
                + [("filter", f) for f in self.filters]
                + [("score", s) for s, _ in self.scores]
                + [("action", a) for a in self.actions])


def register_profile(spec: ProfileSpec) -> ProfileSpec:
    REGISTRY.add("profile", spec.name, spec, spec.description, spec.source)
    return spec
