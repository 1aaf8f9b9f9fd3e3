"""YAML read with bounds: a file over a size limit, or a document whose anchors and aliases
expand past a node limit (a "billion laughs" alias bomb: kilobytes on disk, gigabytes once
expanded, e.g. by json.dumps), is refused before it is built. Anchors and aliases of a sane size
keep working."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dlsched.core.errors import InputError

MAX_NODES = 100_000


def _expanded_nodes(node, memo: dict) -> int:
    """Nodes of the document with every alias expanded (memoised on the shared node objects,
    so this is linear in the composed size, not the expanded one)."""
    import yaml
    k = id(node)
    if k in memo:
        return memo[k]
    memo[k] = 1                     # a recursive alias counts once (safe_load would refuse it)
    n = 1
    if isinstance(node, yaml.MappingNode):
        for a, b in node.value:
            n += _expanded_nodes(a, memo) + _expanded_nodes(b, memo)
    elif isinstance(node, yaml.SequenceNode):
        for c in node.value:
            n += _expanded_nodes(c, memo)
    memo[k] = n
    return n


def load_yaml_text(text: str, *, file: str | None = None, max_nodes: int = MAX_NODES) -> Any:
    """`yaml.safe_load(text)` with the expansion bound; errors name the file and line."""
    import yaml
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None and _expanded_nodes(node, {}) > max_nodes:
            raise InputError(f"YAML expands to more than {max_nodes} nodes (anchors and aliases); refused",
                             file=file)
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise InputError(f"not valid YAML: {getattr(e, 'problem', None) or e}", file=file,
                         line=mark.line + 1 if mark else None) from None


def read_text_bounded(path: str | Path, max_bytes: int, what: str = "file") -> str:
    """A text file's content, refused at once when larger than `max_bytes` or not text."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what} not found", file=str(path))
    if p.is_dir():
        raise InputError(f"{what} is a folder, not a file", file=str(path))
    size = p.stat().st_size
    if size > max_bytes:
        raise InputError(f"{what} is {size} bytes; the limit is {max_bytes}", file=str(path))
    try:
        return p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{what} is not YAML (not UTF-8 text: a binary file?)", file=str(path)) from None
    except OSError as e:
        raise InputError(f"cannot read {what}: {e.strerror}", file=str(path)) from None


def _path_parts(path: str) -> list:
    """'node_groups[0].gpus' -> ['node_groups', 0, 'gpus']."""
    import re
    out: list = []
    for part in str(path).split("."):
        m = re.match(r"^([^\[]*)((?:\[\d+\])*)$", part)
        if not m:
            out.append(part)
            continue
        if m.group(1):
            out.append(m.group(1))
        out += [int(i) for i in re.findall(r"\[(\d+)\]", m.group(2))]
    return out


def line_of(file: str, path: str, max_bytes: int = 16 * 1024 ** 2) -> int | None:
    """The 1-based line of the deepest part of a dotted config `path` found in the YAML `file`
    (a key's line; an item's for a list index), or None when the file cannot be read or has
    none of it. Best effort: it only places an error message."""
    import yaml
    try:
        p = Path(file)
        if not p.is_file() or p.stat().st_size > max_bytes:
            return None
        node = yaml.compose(p.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    line = None
    for part in _path_parts(path):
        if isinstance(node, yaml.MappingNode):
            hit = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)), None)
            if hit is None:
                break
            line, node = hit[0].start_mark.line + 1, hit[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
