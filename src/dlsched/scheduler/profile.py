"""A built profile: the component instances that fill a ProfileSpec's extension points, with the
profile's own settings (gang, blocking, round_s, event_rounds) and the overrides a user config
gives (unknown keys are ConfigErrors naming their path)."""
from __future__ import annotations

from typing import Any

from dlsched.core.errors import ConfigError
from dlsched.scheduler.framework import REGISTRY, ProfileSpec, build


def overrides(component, hook: str) -> bool:
    """Does the component define `hook` itself (not just inherit the declared no-op)?"""
    from dlsched.scheduler import framework as fw
    defaults = (fw.Component.observe, fw.Component.next_wake, fw.Component.quiet_until, fw.Order.begin_round,
                fw.Action.before_place, fw.Action.act)
    return getattr(type(component), hook, None) not in defaults


class Profile:
    """A built ProfileSpec: component instances ready for rounds."""

    def __init__(self, spec: ProfileSpec, overrides: dict[str, Any] | None = None):
        over = dict(overrides or {})
        # a user's params go on top of the profile's, key by key within each component (a
        # gavel-* profile names its Gavel policy in gavel_lease's params; a user who sets that
        # component's `throughputs` keeps it)
        user = over.pop("params", {})
        params = {**spec.params, **{c: ({**spec.params[c], **p} if isinstance(p, dict) and isinstance(spec.params.get(c), dict)
                                        else p) for c, p in user.items()}}
        self.spec = spec
        self.name = spec.name
        self.gang = bool(over.pop("gang", spec.gang))
        self.blocking = bool(over.pop("blocking", spec.blocking))
        self.round_s = over.pop("round_s", spec.round_s)
        self.event_rounds = bool(over.pop("event_rounds", spec.event_rounds))
        if over:
            raise ConfigError(f"policies.{spec.name}.{sorted(over)[0]}",
                              "unknown key (allowed: gang, blocking, round_s, event_rounds, params)")
        if self.round_s is not None and (isinstance(self.round_s, bool)
                                         or not isinstance(self.round_s, (int, float)) or self.round_s <= 0):
            raise ConfigError(f"policies.{spec.name}.round_s", f"must be a number > 0, got {self.round_s!r}")
        if not self.event_rounds and not self.round_s:
            raise ConfigError(f"policies.{spec.name}.event_rounds",
                              "false needs round_s (rounds would never run)")
        base = f"policies.{spec.name}.params"
        names = [name for _, name in spec.components()]
        used = set(names)
        shared = sorted({n for n in names if names.count(n) > 1} & set(params))
        if shared:
            # params are keyed by component name: two kinds with one name cannot be told apart
            raise ConfigError(f"{base}.{shared[0]}", "ambiguous: components of two kinds share this name")
        for cname in params:
            if cname not in used:
                raise ConfigError(f"{base}.{cname}", f"not a component of this profile "
                                  f"(components: {', '.join(sorted(used))})")

        def mk(kind, name):
            return build(kind, name, params.get(name), f"{base}.{name}")
        self.order = mk("order", spec.order)
        self.allocator = mk("allocate", spec.allocate)
        self.filters = [mk("filter", f) for f in spec.filters]
        self.scorers = [(mk("score", s), float(w)) for s, w in spec.scores]
        self.placers = [mk("place", p) for p in spec.placers]
        self.actions = [mk("action", a) for a in spec.actions]
        if self.allocator.resizes and not any(p.carries_allocation for p in self.placers):
            raise ConfigError(f"{base}.allocate", f"allocator {spec.allocate!r} resizes jobs, but no "
                              "placer of this profile carries allocations out")

    def components(self) -> list:
        return [self.order, self.allocator, *self.filters, *(sc for sc, _ in self.scorers),
                *self.placers, *self.actions]

    def needs(self) -> dict[str, list[str]]:
        """Backend capability -> the components (by name) that need it."""
        out: dict[str, list[str]] = {}
        for c in self.components():
            for cap in sorted(c.needs):
                out.setdefault(cap, []).append(c.name)
        return out


def build_profile(name: str, overrides: dict | None = None, *, runtime: bool = False) -> Profile:
    """The registered profile `name`, built; `runtime`: as the real runtime runs it, with its
    runtime_params under the user's own params, and rounds on events (`event_rounds`) unless the
    user's settings say otherwise: a profile that keeps Pollux's simulator loop (rounds only at
    multiples of round_s: tiresias, optimus) would leave a job submitted to an idle cluster waiting
    up to a whole interval; its periodic round still runs."""
    spec = REGISTRY.get("profile", name)
    if runtime:
        over = dict(overrides or {})
        over.setdefault("event_rounds", True)
        if spec.runtime_params:
            user = over.get("params", {})
            over["params"] = {**user, **{c: {**p, **user.get(c, {})} for c, p in spec.runtime_params.items()}}
        overrides = over
    return Profile(spec, overrides)
