"""The tenancy's extension points: four replaceable parts, shared by both backends.

A tenancy mode (dlsched.tenancy.modes) names one component of each kind; the engine
(dlsched.tenancy.engine) calls them in every round of the Scheduler, before the profile's own
allocation and placement, as an admission walk:

    Ledger.advance(now, held)            outside rounds, as time passes (what each queue and
                                         user held since the last call)
    Entitlement.compute(view)            once per round: what each queue deserves now
    repeat while some queue has a job not yet considered:
        QueueOrder.key(view, leaf, job)  each queue's head: the smallest key goes next
        admission: the book's invariant and caps (dlsched.tenancy.book), the non-preemptible
                   rule, then Entitlement.admits(view, leaf, job)
        refused:  Victims.choose(view, job, leaf) -> the jobs to suspend, with reasons
        admitted: Ledger.admit(queue, user, GPUs) (an entry penalty, where the ledger has one)

Admitted jobs go on, in the walk's order, to the profile's order-independent steps (allocate,
placers, the per-task placement), which place them or leave them waiting for room ("blocked by
placement"); the others wait "blocked by quota", with the reason the walk gave.

`view` (dlsched.tenancy.view.View) is the walk's state: `tree`, `book` (usage now, with this walk's
admissions and victims), `now`, `capacity` (per constrained resource, nodes up), `entitled`
(the entitlement's GPUs per queue), `ledger`, `running(leaf)` (the jobs a victim may be taken
from), `request(job)`, `leaf_of(job)`, `started(job)` (its last start), `params` (the mode's
settings) and `pending` (each queue's head refused so far in this walk).

Every part is a registered component (dlsched.scheduler.framework.register) and may also use the
hooks every component has (observe, next_wake, quiet_until). Parts read the view and mutate
nothing but their own state, except where a hook says so.
"""
from __future__ import annotations

from typing import ClassVar, Protocol

from dlsched.scheduler.framework import Component, declare


class Entitlement(Component, Protocol):
    """What each queue deserves now."""
    #: `admits` reads the job only through its request (and its priority): the admission walk
    #: keeps its answer per (leaf, request, priority) until the book changes (tenancy/engine.py)
    admits_by_request: ClassVar[bool] = True

    def compute(self, view) -> dict[str, float]:
        """GPUs each queue of the tree (leaves and inner nodes) deserves at this round: its
        nominal quota (Kueue), a water-filled fair share (KAI), a weighted deserved share
        (Volcano proportion). Called once per round before the walk. Pure."""
        ...

    def admits(self, view, leaf: str, job, req: dict[str, float]) -> str:
        """An admission rule of this system beyond the book's invariant and caps ("" when the
        job may be admitted in `leaf` now; otherwise why not, with numbers): Volcano's
        proportion admits only within the deserved share. Pure. Default: no further rule."""
        return ""


class QueueOrder(Component, Protocol):
    """Which queue's head goes next in the walk."""
    #: the key of a leaf's head depends only on that leaf's own usage, the job and what is fixed
    #: for the round (entitlements, the ledger, view.cache): the walk then asks again only when
    #: that leaf changed (benchmarks/bench_tenancy.py), not after every admission anywhere
    local: ClassVar[bool] = False

    def key(self, view, leaf: str, job, req: dict[str, float]) -> tuple:
        """The sort key of `job`, the head of `leaf` (its queue's own order is the profile's):
        the head with the smallest key is considered next. Asked again after every admission,
        so shares that change with each admission take effect at once. Pure."""
        ...

    #: the key is part(view, leaf, req) + tail(job): a part that reads the job only through its
    #: request, and a tail that reads nothing but the job. The walk then makes the part once per
    #: shape and book, the tail once per job (tenancy/engine.py), instead of asking `key`
    split: ClassVar[bool] = False

    def part(self, view, leaf: str, req: dict[str, float]) -> tuple:
        """The key's part that depends on the book. Pure. Asked only of an order whose `split`
        is true (an order that leaves it false need not define it)."""
        ...

    def tail(self, job) -> tuple:
        """The rest of the key: the job's own (it ends with the job id). Pure. Asked only of an
        order whose `split` is true."""
        ...


class Victims(Component, Protocol):
    """Who is preempted, and why."""

    def choose(self, view, job, leaf: str, req: dict[str, float]) -> list[tuple[object, str]]:
        """When `job` (the head of `leaf`) is refused by quota: the running jobs to suspend so
        that it is admitted, each with its reason ("reclaim", "fair-share", "within-queue"), or
        [] when this system allows none. The set is minimal (no job in it can be left out)
        and the engine checks it on the nodes before carrying it out. Pure, and it reads the job
        through its leaf and priority alone (view.candidates, view.fits): the engine keeps an
        empty answer per (leaf, request, priority) while the book is unchanged."""
        ...


class Ledger(Component, Protocol):
    """Usage over time, per queue and per user."""

    def advance(self, now: float, held: dict[str, float]) -> None:
        """Time passed up to `now` with `held` GPUs per key ("queue:<name>", "user:<name>")
        held since the last call. Called outside rounds. Mutates the ledger."""
        ...

    def admit(self, key: str, gpus: float) -> None:
        """A job of `key` was admitted with `gpus` (Kueue's entry penalty). Mutates the
        ledger; the engine calls it only for the walk that was carried out."""

    def value(self, key: str) -> float:
        """The decayed usage of `key`, normalised as the ledger says. Pure."""
        ...

    def state(self) -> dict:
        """Everything the ledger knows, as JSON-able data (the runtime keeps it across a
        restart)."""
        ...

    def load(self, state: dict) -> None:
        """Take back what state() gave."""


declare("entitlement", Entitlement, "compute")
declare("queue_order", QueueOrder, "key")
declare("victims", Victims, "choose")
declare("ledger", Ledger, "value")
