"""The import graph: a lazy package root, a core that imports nothing above it, and no import
cycle among the workload modules (docs/decisions/0014).

The runtime checks import in a fresh interpreter: this test process has long since loaded
everything."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import dlsched

SRC = Path(dlsched.__file__).resolve().parent          # src/dlsched
HEAVY = ("pandas", "ray", "torch", "scipy", "matplotlib")
ABOVE_CORE = ("dlsched.api", "dlsched.cluster", "dlsched.workload", "dlsched.scheduler",
              "dlsched.policies", "dlsched.sim", "dlsched.runtime", "dlsched.metrics",
              "dlsched.report", "dlsched.estimate", "dlsched.cli", "dlsched.experiments")


def _loaded_after(statement: str) -> list[str]:
    """sys.modules of a fresh interpreter after `statement`."""
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _under(mod: str, packages) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in packages)


@pytest.mark.parametrize("statement", ["import dlsched.core.types", "import dlsched",
                                       "import dlsched.core"])
def test_root_and_core_import_nothing_above_core(statement):
    mods = _loaded_after(statement)
    ours = [m for m in mods if _under(m, ("dlsched",))]
    assert [m for m in ours if m != "dlsched" and not _under(m, ("dlsched.core",))] == []
    assert [m for m in mods if _under(m, ABOVE_CORE)] == []     # the same, spelled out
    assert [m for m in mods if _under(m, HEAVY)] == []


def test_lazy_root_still_gives_simulate_and_load_policy_config():
    assert callable(dlsched.simulate) and callable(dlsched.load_policy_config)
    from dlsched import api, load_policy_config, simulate
    assert simulate is api.simulate and load_policy_config is api.load_policy_config
    assert {"simulate", "load_policy_config", "__version__"} <= set(dir(dlsched))
    with pytest.raises(AttributeError, match="no_such_thing"):
        dlsched.no_such_thing  # noqa: B018
    # In a fresh interpreter, the first access imports dlsched.api (and registers the policies).
    mods = _loaded_after("import dlsched\nassert dlsched.simulate.__module__ == 'dlsched.api'")
    assert "dlsched.api" in mods and "dlsched.policies" in mods


# -- static graph (ast): top-level imports and those inside functions alike ----------------------
def _modules(package: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under `package` (a folder of src/dlsched)."""
    out = {}
    for f in sorted(package.rglob("*.py")):
        parts = f.relative_to(SRC.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _imports(name: str, file: Path, known: set[str]) -> set[str]:
    """Every dlsched module `file` imports anywhere in its body (a `from pkg import sub` whose
    `sub` is a module counts as importing `pkg.sub`)."""
    is_pkg = file.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:                       # relative: resolve against this package
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if _under(m, ("dlsched",))}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path, or None."""
    state: dict[str, int] = {}                   # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_workload_modules_import_each_other_without_a_cycle():
    mods = _modules(SRC / "workload")
    assert {"dlsched.workload.readers", "dlsched.workload.efficiency",
            "dlsched.workload.measured"} <= set(mods)
    graph = {n: {m for m in _imports(n, f, set(mods)) if m in mods and m != n} for n, f in mods.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))
    # the Pollux modules share their data folder through the bottom module, one way
    assert "dlsched.workload.readers" not in graph["dlsched.workload.efficiency"]
    assert "dlsched.workload.readers" not in graph["dlsched.workload.measured"]


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_core_modules_import_nothing_above_core():
    mods = _modules(SRC / "core")
    every = set(_modules(SRC))
    bad = {n: sorted(m for m in _imports(n, f, every) if not _under(m, ("dlsched.core",)))
           for n, f in mods.items()}
    assert {n: b for n, b in bad.items() if b} == {}
