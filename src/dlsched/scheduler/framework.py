"""Extension points, the registry and typed construction of policy components.

A component is a class that subclasses the Protocol of its extension point (below) and is
registered by name with `@register(kind, name)`. Subclassing is required: every hook and flag a
policy may use is declared here, with a default, so the framework reads them directly and never
discovers them. Every hook's contract (when it is called, what it may read and mutate, what must
be idempotent) is written on the hook.

A round (dlsched.scheduler.core.Scheduler.round) calls, in this order:

    Order.begin_round(ctx)      once per round, before any key()
    Order.key(job, ctx)         each waiting job (static orders: once, at arrival)
    Allocate.allocate(jobs, ctx)
    Action.before_place(ctx)    each action, in the profile's order
    Place.place(ctx)            each job-level placer, in the profile's order
    per-task placement          each job not yet decided: Filter.filter -> Score.score
    Action.act(ctx)             each action, in the profile's order

and, outside rounds, `observe(now, events, applied)` on every component that defines it: after
each batch of events the backend delivered, and after each plan the backend applied.

What a policy sees (RoundContext, dlsched.scheduler.core): a read-only view of the cluster
(`ctx.snap`), of the jobs (`ctx.jobs`, `ctx.queue`, `ctx.running`: JobRecords a policy reads
but never writes; their `state` is a JobState and part of the contract), the backend's
per-job counters (`ctx.stats(job_id)`, one vocabulary: dlsched.scheduler.backend.STATS_KEYS),
a seeded `ctx.rng`, and the round's transaction `ctx.txn`, the only thing a round may change.
`ctx.commit(rec)`, `ctx.order_key(rec)`, `ctx.feasible(job, task, free)` and `ctx.action(cls)`
expose what the framework itself does, so policies need no handle on the scheduler.

Every component is a class registered by name. Its constructor takes typed keyword parameters
with defaults; `build(kind, name, params, path)` validates them against the signature (unknown
keys and wrong types are ConfigErrors naming the path).

Capabilities. A component states what it needs from the backend in `needs` (a frozenset of
dlsched.scheduler.backend.CAPABILITIES; an instance may narrow it in its constructor from its
parameters). A profile needs the union of its components' needs; the Scheduler refuses to run
on a backend that lacks one, naming both (never a silent degradation).
"""
from __future__ import annotations

import math

import inspect
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Protocol

import numpy as np

from dlsched.core.errors import ConfigError, DlschedError
from dlsched.core.types import JobSpec, Plan, TaskSpec

KINDS = ("order", "allocate", "filter", "score", "place", "action",
         # the tenancy's parts (declared in dlsched.tenancy.points) and its named modes
         "entitlement", "queue_order", "victims", "ledger", "tenancy", "profile")


@dataclass(frozen=True, slots=True)
class NodeMask:
    """A filter's verdict for every node: `ok[n]` and, for rejected nodes, why."""
    ok: np.ndarray
    reason: str = ""

    def explain(self, node: int) -> str:
        return "ok" if self.ok[node] else self.reason


class Component(Protocol):
    """What every extension point shares."""
    name: ClassVar[str]
    #: backend capabilities this component's decisions need (dlsched.scheduler.backend)
    needs: frozenset = frozenset()
    #: attributes a round may change besides the transaction (Gandiva's rings, grown jobs):
    #: the framework saves them before a round and puts them back when that round's plan is
    #: not the one carried out (a dry run, a retry after a contained error, the same snapshot
    #: given twice), so a round is idempotent for an unchanged snapshot. Everything else a
    #: component keeps is changed in observe() only (or is a cache of pure functions).
    round_state: ClassVar[tuple[str, ...]] = ()

    def observe(self, now: float, events: list, applied: Plan | None) -> None:
        """Learn from what happened (Volcano's session close; Tiresias's attained service,
        Gandiva's restart clock, Optimus's fits). Called outside rounds: with the events of a
        batch (`applied` None), and with each plan the backend applied (`events` empty) at time
        `now`, including plans made outside a round (an operator's migrate, a re-attach). May
        update the component's own state only. Never called when the component does not
        override it."""

    def next_wake(self, now: float) -> float | None:
        """The time after `now` at which this component wants a round even if nothing happens
        (the end of a Gandiva time-slice turn), or None. Asked after each round carried out and
        each applied plan; the scheduler asks the backend for a round then (Backend.wake_at).
        Pure. Never called when the component does not override it."""

    def quiet_until(self, now: float, running) -> float:
        """After a round at `now` that decided nothing: the earliest time at which this
        component could decide otherwise if nothing happens meanwhile (no event of any kind),
        math.inf if never (its decisions depend on the cluster and the queue alone). `running`:
        the running jobs' records. While every component of a profile is quiet, the periodic
        rounds before that time are skipped: they would decide nothing, and a round costs a pass
        over the whole queue (Tiresias on a long queue ran 99 % such rounds). Pure. A component
        that does not override it is never quiet (its profile's periodic rounds all run)."""


class Timeless:
    """A mixin for components whose decisions depend on the cluster, the queue and the jobs'
    requests alone, never on the time: quiet forever after a round that decided nothing."""

    def quiet_until(self, now: float, running) -> float:
        return math.inf


class Order(Component, Protocol):
    """Which waiting job goes first: a sort key (the framework appends (submit_time_s, job_id),
    so ties are deterministic)."""
    #: the key never changes after arrival: keyed once (ctx is None then), the queue kept sorted
    static: ClassVar[bool] = False
    #: re-key after every job the round places (DRF's progressive filling)
    dynamic: ClassVar[bool] = False
    #: a waiting job that holds nothing keeps its key while it waits: keyed once, when it joins
    #: the queue, and kept in order between rounds (dlsched.scheduler.kept_order)
    waiting_keys_kept: ClassVar[bool] = False
    #: (with dynamic) a job's key is its user's (`user_keys`): the queue is kept per user
    #: (dlsched.scheduler.user_order)
    key_per_user: ClassVar[bool] = False
    #: a running job's key never rises while it runs (with waiting_keys_kept): a preempt walk
    #: that suspends nobody stays so until an event (policies/actions/preempt.py)
    running_keys_fall: ClassVar[bool] = False

    def begin_round(self, ctx: "RoundContextLike") -> None:
        """Once at the start of each round, before any key(): fold time-dependent state
        (Tiresias's starvation promotion) into the order's own state. Must be idempotent for one
        round time: a second call with the same view changes nothing."""

    def key(self, job: "JobRecordLike", ctx: "RoundContextLike") -> tuple:
        """The job's sort key. Pure: reads the job, the view and the order's state; mutates
        nothing (so a round run twice on one snapshot orders the same)."""
        ...

    def keys(self, jobs: list, ctx: "RoundContextLike") -> list[tuple]:
        """`key` of each job, in one call (a round keys its whole queue at once; an order may
        answer faster than a call per job, as DRF does from its per-user shares)."""
        key = self.key
        return [key(j, ctx) for j in jobs]


class Allocate(Component, Protocol):
    #: the allocator may give a job another shape than it asked for, or resize and suspend
    #: running jobs (Optimus): the profile must then have a placer that carries allocations out
    #: (Place.carries_allocation); the framework never changes a job's tasks itself
    resizes: ClassVar[bool] = False

    def allocate(self, jobs: list, ctx: "RoundContextLike") -> dict[str, tuple[TaskSpec, ...]]:
        """{job_id: tasks}: the tasks each job should hold after this round. `jobs` is the
        waiting queue in the order's order; a resizing allocator may also name running jobs
        (ctx.running): a new task list for one is a resize, () a suspend; () for a waiting job
        keeps it waiting. Absent: unchanged (a waiting job gets what it asked for). Called once
        per round, after the order and before the actions' before_place. Reads the view; may
        update caches and samples that are a pure function of the view (a second call on the
        same snapshot returns the same); returns new TaskSpec tuples. The result is published
        read-only as ctx.allocation for the placers; a non-resizing allocator returns {}."""
        ...


class Filter(Component, Protocol):
    def filter(self, ctx: "RoundContextLike", job: JobSpec, task: TaskSpec, free: np.ndarray) -> NodeMask:
        """NodeMask over all nodes (bool array + reasons): which nodes may take this task now.
        Reads `free` (the transaction's tentative free array); must not write it."""
        ...

    def never_fits(self, job: JobSpec, cluster) -> str:
        """A reason when the job can never pass this filter on this cluster (co-location of a job
        larger than any server): the job is rejected at arrival instead of waiting forever.
        "" (the default): it may fit some day. Pure."""
        return ""


class Score(Component, Protocol):
    #: a node's score depends on that node's row alone: the framework re-scores only the node
    #: that changed between a job's identical tasks
    node_local: ClassVar[bool] = False
    #: the first candidate wins (every score equal): the framework skips scoring
    first_fit: ClassVar[bool] = False

    def score(self, ctx: "RoundContextLike", job: JobSpec, task: TaskSpec, free: np.ndarray,
              nodes: np.ndarray) -> np.ndarray:
        """Float array in [0, 1], one per candidate in `nodes` (higher is better). The framework
        checks the range, combines scorers by weight and picks the best node, ties to the lowest
        node id. Pure."""
        ...


class Place(Component, Protocol):
    #: this placer carries out the round's allocation (ctx.allocation): every job named there
    #: is kept, resized, suspended or launched by it
    carries_allocation: ClassVar[bool] = False

    def place(self, ctx: "RoundContextLike") -> None:
        """Job-level placement (Liquid's batch GA, Gandiva's getNodes, Optimus's fewest-servers
        placement of its allocation): after order, allocate and the actions' before_place, before
        the per-task loop. Places whole jobs through ctx.txn (reserve, then ctx.commit), and may
        resize or suspend running ones (Resize, Suspend decisions); jobs it decided (ctx.txn.
        decided) are skipped by the per-task loop. Must be idempotent for an unchanged snapshot:
        the same view gives the same decisions."""
        ...


class Action(Component, Protocol):
    def before_place(self, ctx: "RoundContextLike") -> None:
        """Before placement (after order and allocate): preempt, migrate, pack, end time-slice
        turns, shrink. Decides through ctx.txn only. Idempotent for an unchanged snapshot."""

    def act(self, ctx: "RoundContextLike") -> None:
        """After placement: whatever else the round does (backfill, admit time-sliced jobs,
        grow). Decides through ctx.txn only. Idempotent for an unchanged snapshot."""


JobRecordLike = Any
RoundContextLike = Any
_PROTOCOLS = {"order": Order, "allocate": Allocate, "filter": Filter, "score": Score, "place": Place,
              "action": Action}
_HOOK = {"order": "key", "allocate": "allocate", "filter": "filter", "score": "score", "place": "place",
         "action": None}


class RegistryError(DlschedError):
    pass


def declare(kind: str, protocol: type, hook: str | None) -> None:
    """Declare the Protocol of an extension point kept outside this module (the tenancy's parts,
    dlsched.tenancy.points): a component registered as `kind` must subclass it and define `hook`."""
    if kind not in KINDS:
        raise RegistryError(f"unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
    _PROTOCOLS[kind], _HOOK[kind] = protocol, hook


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
            proto = _PROTOCOLS[kind]
            if proto not in cls.__mro__:
                raise RegistryError(f"{cls.__name__} registered as {kind} must subclass "
                                    f"dlsched.scheduler.framework.{proto.__name__} (its hooks are declared there)")
            hook = _HOOK[kind]
            if hook is not None and getattr(cls, hook) is getattr(proto, hook):
                raise RegistryError(f"{cls.__name__} registered as {kind} does not define {hook}()")
            if kind == "action" and cls.before_place is Action.before_place and cls.act is Action.act:
                raise RegistryError(f"{cls.__name__} registered as action defines neither before_place() nor act()")
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

    placers:  job-level placers (Place), run in this order before the per-task loop.

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
    placers: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    gang: bool = False
    blocking: bool = True
    round_s: float | None = None
    event_rounds: bool = True
    source: str = ""
    params: dict = field(default_factory=dict)   # component name -> constructor params
    #: component name -> params the real runtime uses instead (what a real program can give:
    #: Optimus has no oracle speed there and fits what it measures); a user's params go on top
    runtime_params: dict = field(default_factory=dict)

    def components(self) -> list[tuple[str, str]]:
        return ([("order", self.order), ("allocate", self.allocate)]
                + [("filter", f) for f in self.filters]
                + [("score", s) for s, _ in self.scores]
                + [("place", p) for p in self.placers]
                + [("action", a) for a in self.actions])


def register_profile(spec: ProfileSpec) -> ProfileSpec:
    REGISTRY.add("profile", spec.name, spec, spec.description, spec.source)
    return spec
