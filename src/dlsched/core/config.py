"""Reading the YAML files a user gives (cluster specs, policy and speed configs)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dlsched.core.errors import DlschedError


def read_yaml(path: str | Path, what: str) -> Any:
    """Parse a YAML file; a missing file or a syntax error is a DlschedError naming the file
    (and the line, where YAML knows it)."""
    import yaml
    p = Path(path)
    if not p.exists():
        raise DlschedError(f"{what} not found: {path}")
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f", line {mark.line + 1}" if mark else ""
        raise DlschedError(f"{path}{line}: not valid YAML: {getattr(e, 'problem', None) or e}") from None
