"""dlsched: schedules deep-learning training jobs on shared GPU clusters.

One policy core drives a trace-driven simulator (this package's `simulate`) and, later, a real
runtime. See README.md for the tour.

The root is lazy (PEP 562): `import dlsched` and `import dlsched.core.types` load no simulator,
runtime, policy or scheduler module. `dlsched.simulate` and `dlsched.load_policy_config` import
dlsched.api (and with it every policy, which registers itself) on first use.
tests/unit/test_import_graph.py checks both."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs only; at run time __getattr__ below loads them
    from dlsched.api import load_policy_config, simulate

__version__ = "0.1.0"
__all__ = ["simulate", "load_policy_config", "__version__"]

# attribute -> the module that defines it, imported on first access
_LAZY = {"simulate": "dlsched.api", "load_policy_config": "dlsched.api"}


def __getattr__(name: str) -> Any:
    if name == "report":        # the package itself, callable: dlsched.report(step=..., loss=...)
        return importlib.import_module("dlsched.report")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value      # later lookups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
