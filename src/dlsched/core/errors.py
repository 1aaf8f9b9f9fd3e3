"""Errors a user can cause. Each names where the problem is (file, line, field or config path)."""
from __future__ import annotations


class DlschedError(Exception):
    """Base of every error dlsched raises on purpose; the CLI prints it and exits non-zero."""


class Refused(DlschedError):
    """The server refused a command (not allowed, not there, or not possible now): the CLI prints
    the server's reason and exits 1, as distinct from bad input (exit 2)."""


class InputError(DlschedError):
    """A malformed input file: names the file, the line (1-based, header = line 1) and the field."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None):
        self.file, self.line, self.field, self.detail = file, line, field, message
        where = []
        if file is not None:
            where.append(str(file))
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__(f"{': '.join([', '.join(where)] if where else [])}{': ' if where else ''}{message}")


class ConfigError(DlschedError):
    """An invalid configuration value; `path` is the dotted config path (policies.tetris.weights.gpu,
    node_groups[0].gpus). With a YAML `file`, the line of the deepest part of `path` the file has
    is found in it (dlsched.core.yamlio.line_of), so every config error names file, line and field."""

    def __init__(self, path: str, message: str, *, file: str | None = None, line: int | None = None):
        if file is not None and line is None:
            from dlsched.core.yamlio import line_of
            line = line_of(file, path)
        self.path, self.detail, self.file, self.line = path, message, file, line
        prefix = f"{file}{f', line {line}' if line else ''}: " if file else ""
        super().__init__(f"{prefix}{path}: {message}")
