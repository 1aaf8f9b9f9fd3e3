"""Reading the YAML files a user gives (cluster specs, policy and speed configs)."""
from __future__ import annotations

from pathlib import Path
from typing import Any



def read_yaml(path: str | Path, what: str, max_bytes: int = 16 * 1024 ** 2) -> Any:
    """Parse a YAML file; a missing, binary or oversized file, a syntax error or an alias bomb is
    a DlschedError naming the file (and the line, where YAML knows it)."""
    from dlsched.core.yamlio import load_yaml_text, read_text_bounded
    return load_yaml_text(read_text_bounded(path, max_bytes, what), file=str(path))
