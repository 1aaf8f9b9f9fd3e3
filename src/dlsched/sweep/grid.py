"""A sweep file: the grid of clusters x workloads x policies x parameters x seeds that
`dlsched sweep` runs, one simulation (a cell) per point.

    name: policies-on-philly          # optional, shown in the report
    clusters: [philly, my.yaml]        # presets or cluster files (relative to this file)
    workloads: [philly-sample, "poisson:jobs=500,rate=0.02", jobs.csv]
    policies: [fifo, tiresias]
    seeds: 3                           # 0, 1, 2; or a list: [0, 7]
    parameters:                        # optional; every combination is a cell
      restart_delay_s: [0, 30]         # simulate options: restart_delay_s, start_delay_s
      round_s: [60, 300]               # policy settings: round_s, gang, blocking
      tiresias.thresholds: [[57600], [28800, 115200]]   # <component>.<parameter> of a policy
      queues: [philly-isolated, teams.yaml]             # a queue tree (bundled, or a file)
      tenancy: [kueue, kai]                             # the tenancy mode (with queues)
    semantics: gavel                   # optional: Gavel's round mechanism (gavel-* policies; its
                                       # one parameter: window: [[4000, 5000]], the jobs that must
                                       # finish, by position)
    exclude:                           # optional: points of the grid left out; a cell goes when
      - {policy: tiresias, workload: philly-sample}      # it has every value of one entry
      - {policy: fifo, round_s: 300}   # keys: cluster, workload, policy, seed or a parameter

An exclude entry's keys are `cluster`, `workload`, `policy`, `seed` and the parameters' names,
each with one value of its axis as the file writes it; a value the grid does not have is an
error (a typo would otherwise leave the cell in).

A component parameter applies to the policies that have that component; the other policies run
once per value of the rest of the grid. Every value is checked (each policy built with it) before
any cell runs: a bad one is one line naming the file and the field.
"""
from __future__ import annotations

import hashlib
import importlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlsched.core.errors import ConfigError, DlschedError

TOP = {"name", "clusters", "workloads", "policies", "seeds", "parameters", "semantics", "exclude"}
SIM_OPTIONS = ("restart_delay_s", "start_delay_s")
TENANCY_OPTIONS = ("queues", "tenancy")      # simulate's queues= and tenancy= (dlsched.tenancy)
POLICY_SETTINGS = ("round_s", "gang", "blocking")
GAVEL_OPTIONS = ("semantics", "window")      # simulate's semantics= and window= (dlsched.sim.gavel)
MAX_CELLS = 100_000
MAX_SEED = 2 ** 32 - 1


@dataclass(frozen=True)
class Cell:
    """One simulation of a sweep. `params`: the grid's parameter values, sorted by name."""
    cluster: str
    workload: str
    policy: str
    seed: int
    params: tuple[tuple[str, Any], ...] = ()
    inputs: tuple[tuple[str, str], ...] = field(default=(), compare=False)   # file -> sha256

    def label(self) -> str:
        p = ", ".join(f"{k}={json.dumps(v)}" for k, v in self.params)
        return f"{self.policy} on {Path(self.cluster).name} / {Path(self.workload).name}, seed {self.seed}" + \
            (f" ({p})" if p else "")

    def key(self) -> str:
        """A hash of everything the cell's result depends on: its inputs (a file by its content),
        policy, seed, parameters and the dlsched version."""
        import dlsched
        blob = json.dumps({"cluster": self.cluster, "workload": self.workload, "policy": self.policy,
                           "seed": self.seed, "params": [list(p) for p in self.params],
                           "files": dict(self.inputs), "version": dlsched.__version__}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def sim_options(self) -> dict:
        return {k: (tuple(v) if k == "window" else v) for k, v in self.params
                if k in SIM_OPTIONS or k in TENANCY_OPTIONS or k in GAVEL_OPTIONS}

    def policy_settings(self) -> dict:
        """The profile overrides of this cell: {round_s, gang, blocking, params: {component: {...}}}."""
        out: dict = {}
        for k, v in self.params:
            if k in POLICY_SETTINGS:
                out[k] = v
            elif "." in k:
                comp, _, name = k.partition(".")
                out.setdefault("params", {}).setdefault(comp, {})[name] = v
        return out


@dataclass
class Sweep:
    name: str
    cells: list[Cell]
    file: str


def seeded(workload: str) -> bool:
    """Whether a cell's seed changes its workload's jobs: a generator (`poisson:...`) draws them
    from the seed; a trace (a bundled one such as `pollux-6`, or a file) is the same jobs whatever
    the seed, so its cells differ by seed only where a policy draws random numbers itself."""
    from dlsched.workload.generators import GENERATORS
    return "/" not in workload and workload.partition(":")[0].strip() in GENERATORS


def _list(spec: dict, key: str, file: str, kind=str) -> list:
    v = spec.get(key)
    if v is None:
        raise ConfigError(key, "is required (a list)", file=file)
    if isinstance(v, (str, int)) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, list) or not v:
        raise ConfigError(key, "must be a non-empty list", file=file)
    for i, x in enumerate(v):
        if not isinstance(x, kind) or isinstance(x, bool):
            raise ConfigError(f"{key}[{i}]", f"must be a {kind.__name__}, got {x!r}", file=file)
    if len(set(map(str, v))) < len(v):
        raise ConfigError(key, "names an entry twice", file=file)
    return v


def _seeds(spec: dict, file: str) -> list[int]:
    v = spec.get("seeds", 1)
    if isinstance(v, int) and not isinstance(v, bool):
        if not 1 <= v <= 10_000:
            raise ConfigError("seeds", f"a count must be 1..10000, got {v}", file=file)
        return list(range(v))
    seeds = _list(spec, "seeds", file, int)
    for i, s in enumerate(seeds):
        if not 0 <= s <= MAX_SEED:
            raise ConfigError(f"seeds[{i}]", f"must be 0..{MAX_SEED}, got {s}", file=file)
    return seeds


def _file_input(ref: str, base: Path) -> tuple[str, str | None]:
    """(absolute path, sha256) of a file reference, relative to the sweep file's folder."""
    p = Path(ref).expanduser()
    if not p.is_absolute():
        p = base / p
    if not p.is_file():
        return str(p), None
    with open(p, "rb") as fh:
        return str(p.resolve()), hashlib.file_digest(fh, "sha256").hexdigest()


def _tenancy_values(k: str, vals: list, where: str, file: str, base: Path, inputs: dict) -> list:
    """A `queues` axis: bundled trees by name, files as absolute paths (validated, their content
    hashed into the cells' inputs); a `tenancy` axis: registered modes."""
    from dlsched.scheduler.framework import REGISTRY
    from dlsched.tenancy.tree import BUNDLED, load_queues
    import dlsched.tenancy.modes  # noqa: F401  (the modes register themselves)
    out = []
    for j, v in enumerate(vals):
        if not isinstance(v, str):
            raise ConfigError(f"{where}[{j}]", f"must be a name, got {v!r}", file=file)
        if k == "tenancy":
            if v not in REGISTRY.names("tenancy"):
                raise ConfigError(f"{where}[{j}]", f"unknown mode {v!r} (modes: {', '.join(REGISTRY.names('tenancy'))})",
                                  file=file)
            out.append(v)
            continue
        if v in BUNDLED:
            out.append(v)
            continue
        path, digest = _file_input(v, base)
        if digest is None:
            raise ConfigError(f"{where}[{j}]", f"{v!r} is neither a bundled queue tree ({', '.join(BUNDLED)}) nor a file",
                              file=file)
        try:
            load_queues(path)
        except ConfigError as e:
            raise ConfigError(f"{where}[{j}]", str(e), file=file) from None
        inputs[path] = digest
        out.append(path)
    return out


def _excludes(spec: dict, file: str, axes: dict[str, tuple[list, list]]) -> list[dict[str, str]]:
    """The `exclude` entries as {axis: the value's identity in a cell}. `axes`: name -> (the values
    as the file writes them, the same as cells hold them)."""
    raw = spec.get("exclude")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError("exclude", "must be a list of mappings such as {policy: fifo, seed: 1}", file=file)
    out = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or not entry:
            raise ConfigError(f"exclude[{i}]", f"must be a non-empty mapping of {', '.join(axes)} to a value, "
                              f"got {entry!r}", file=file)
        one = {}
        for k, v in entry.items():
            if k not in axes:
                raise ConfigError(f"exclude[{i}].{k}", f"unknown key (keys: {', '.join(axes)})", file=file)
            written, held = axes[k]
            at = [j for j, w in enumerate(written) if w == v and type(w) is type(v)]
            if not at:
                raise ConfigError(f"exclude[{i}].{k}", f"{v!r} is not a value of the grid "
                                  f"({', '.join(map(str, written))})", file=file)
            one[k] = json.dumps(held[at[0]])
        out.append(one)
    return out


def load_sweep(path: str | Path) -> Sweep:
    """Parse and validate a sweep file into its cells."""
    importlib.import_module("dlsched.policies")   # registers the profiles
    from dlsched.cluster.topology import is_preset, load_cluster
    from dlsched.core.config import read_yaml
    from dlsched.scheduler.core import build_profile
    from dlsched.scheduler.framework import REGISTRY
    from dlsched.workload.io import is_named_workload

    file = str(path)
    spec = read_yaml(path, "sweep file")
    if not isinstance(spec, dict):
        raise ConfigError("(top level)", "must be a mapping with clusters, workloads, policies", file=file)
    unknown = sorted(set(spec) - TOP)
    if unknown:
        raise ConfigError(unknown[0], f"unknown field (allowed: {', '.join(sorted(TOP))})", file=file)
    base = Path(path).resolve().parent
    inputs: dict[str, str] = {}

    def refs(key: str, is_name, what: str, check=None) -> list[str]:
        """The entries of `key`: names as they are, files as absolute paths (their content
        hashed into `inputs`)."""
        out = []
        for i, ref in enumerate(_list(spec, key, file)):
            if is_name(ref):
                out.append(ref)
                continue
            path, digest = _file_input(ref, base)
            if digest is None:
                raise ConfigError(f"{key}[{i}]", f"{ref!r} is neither {what} nor a file", file=file)
            if check is not None:
                try:
                    check(path)
                except DlschedError as e:
                    raise ConfigError(f"{key}[{i}]", str(e), file=file) from None
            out.append(path)
            inputs[path] = digest
        return out

    clusters = refs("clusters", is_preset, "a preset", load_cluster)
    workloads = refs("workloads", is_named_workload, "a generator, a bundled workload")
    semantics = spec.get("semantics", "native")
    if semantics not in ("native", "gavel"):
        raise ConfigError("semantics", f"must be native or gavel, got {semantics!r}", file=file)
    gavel = semantics == "gavel"
    if gavel:
        from dlsched.sim.gavel import GAVEL_POLICIES
        known = list(GAVEL_POLICIES)
    else:
        known = REGISTRY.names("profile")
    policies = _list(spec, "policies", file)
    for i, p in enumerate(policies):
        if p not in known:
            raise ConfigError(f"policies[{i}]", f"unknown policy {p!r} (registered: {', '.join(known)})", file=file)
    seeds = _seeds(spec, file)

    grid = spec.get("parameters") or {}
    if not isinstance(grid, dict):
        raise ConfigError("parameters", "must be a mapping of parameter name to a list of values", file=file)
    axes: list[tuple[str, list]] = []
    for k in sorted(grid):
        vals = grid[k]
        where = f"parameters.{k}"
        if gavel and k != "window":
            raise ConfigError(where, "under semantics: gavel the one parameter is window ([[first, end], ...])",
                              file=file)
        if k == "window" and not gavel:
            raise ConfigError(where, "window is a parameter of semantics: gavel", file=file)
        if k == "window":
            for j, v in enumerate(vals if isinstance(vals, list) else []):
                if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                    and x >= 0 for x in v) and v[0] < v[1]):
                    raise ConfigError(f"{where}[{j}]", f"must be [first, end] job positions, first < end, got {v!r}",
                                      file=file)
        elif not isinstance(k, str) or not (k in SIM_OPTIONS or k in POLICY_SETTINGS or k in TENANCY_OPTIONS or
                                            ("." in k and all(k.partition(".")[::2]))):
            raise ConfigError(where, f"unknown parameter (simulate options: {', '.join(SIM_OPTIONS + TENANCY_OPTIONS)}; "
                              f"policy settings: {', '.join(POLICY_SETTINGS)}; or <component>.<parameter>)", file=file)
        if not isinstance(vals, list) or not vals:
            raise ConfigError(where, "must be a non-empty list of values", file=file)
        if k in TENANCY_OPTIONS:
            vals = _tenancy_values(k, vals, where, file, base, inputs)
        if k in SIM_OPTIONS:
            for j, v in enumerate(vals):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
                    raise ConfigError(f"{where}[{j}]", f"must be a number >= 0, got {v!r}", file=file)
        axes.append((k, vals))

    excludes = _excludes(spec, file, {"cluster": (_list(spec, "clusters", file), clusters),
                                      "workload": (_list(spec, "workloads", file), workloads),
                                      "policy": (policies, policies), "seed": (seeds, seeds),
                                      **{k: (grid[k], vals) for k, vals in axes}})
    cells: list[Cell] = []
    seen: set[str] = set()
    for policy in policies:
        comps = set() if gavel else {name for _, name in REGISTRY.get("profile", policy).components()}
        # the axes that apply to this policy; a component parameter of another policy does not
        mine = [(k, vals) for k, vals in axes if "." not in k or k.partition(".")[0] in comps]
        for combo in itertools.product(*[vals for _, vals in mine]):
            params = tuple((k, v) for (k, _), v in zip(mine, combo))
            if gavel:
                params = (("semantics", "gavel"), *params)
            else:
                probe = Cell("", "", policy, 0, params)
                try:
                    build_profile(policy, probe.policy_settings())
                except ConfigError as e:
                    bad = ", ".join(f"{k}={v!r}" for k, v in params)
                    raise ConfigError("parameters", f"{policy} with {bad}: {e}", file=file) from None
            for cl, wl, seed in itertools.product(clusters, workloads, seeds):
                qrefs = [v for k, v in params if k == "queues"]
                own = tuple((ref, inputs[ref]) for ref in (cl, wl, *qrefs) if ref in inputs)   # its files' contents
                cell = Cell(cl, wl, policy, seed, params, own)
                if excludes:
                    have = {"cluster": cl, "workload": wl, "policy": policy, "seed": seed, **dict(params)}
                    if any(all(json.dumps(have.get(k)) == v for k, v in e.items()) for e in excludes):
                        continue
                ident = json.dumps([cl, wl, policy, seed, [list(p) for p in params]])   # values may be lists
                if ident not in seen:
                    seen.add(ident)
                    cells.append(cell)
                if len(cells) > MAX_CELLS:
                    raise ConfigError("(grid)", f"more than {MAX_CELLS:,} cells", file=file)
    name = str(spec.get("name") or Path(path).stem)[:128]
    return Sweep(name, cells, file)
