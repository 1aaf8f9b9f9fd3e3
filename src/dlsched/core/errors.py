"""Errors a user can cause. Each names where the problem is (file, line, field or config path)."""
from __future__ import annotations


class DlschedError(Exception):
    """Base of every error dlsched raises on purpose; the CLI prints it and exits non-zero."""


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
    """An invalid configuration value; `path` is the dotted config path (policies.tetris.weights.gpu)."""

    def __init__(self, path: str, message: str, *, file: str | None = None):
        self.path, self.detail, self.file = path, message, file
        prefix = f"{file}: " if file else ""
        super().__init__(f"{prefix}{path}: {message}")
