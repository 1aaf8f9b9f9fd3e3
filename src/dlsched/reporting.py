"""`dlsched.reporting.report(step=..., loss=...)`: progress from a script dlsched runs by its `command`.

    from dlsched.reporting import report, saved   # or: try/except ImportError -> no-ops of your own
    report(step=i, loss=loss.item())               # step i is done
    saved(step=i)                                  # your snapshot now holds step i (optional)

Inside a dlsched job the rank worker gives the script a named pipe (a FIFO in a directory only
its user can read), named by the environment variable DLSCHED_REPORT_PATH; each call writes one
JSON line to it (one `write` of well under PIPE_BUF bytes, so lines of processes sharing it never
interleave). A path, not an inherited descriptor: torchrun's workers and any subprocess of the
script reach it the same way. Outside dlsched the variable is not set and the calls do nothing.
They never raise: no reader (the worker is gone), a full pipe, a path that is not a FIFO or a
value that is not a number is dropped. Only rank 0's reports are kept, as for the SDK's
ctx.report. `saved` lets dlsched say how much work a stop loses (the steps after the last saved
one; docs/runtime-byo-scripts.md). This module imports nothing heavy (json, os and stat only).
"""
from __future__ import annotations

import json
import os
import stat

_FD: list = []          # [fd or None], opened once


def _fd() -> int | None:
    if not _FD:
        fd = None
        path = os.environ.get("DLSCHED_REPORT_PATH")
        try:
            if path and stat.S_ISFIFO(os.stat(path).st_mode):
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            fd = None
        _FD.append(fd)
    return _FD[0]


def _send(rec: dict) -> None:
    fd = _fd()
    if fd is None:
        return
    try:
        data = (json.dumps(rec) + "\n").encode()
        if len(data) < 4096:
            os.write(fd, data)
    except (OSError, ValueError, TypeError):
        pass


def report(step: int, **metrics: float) -> None:
    """Record that `step` is done, with metrics such as loss=..., accuracy=... (numbers)."""
    try:
        rec = {"step": int(step), **{str(k)[:64]: float(v) for k, v in metrics.items()}}
    except (ValueError, TypeError):
        return
    _send(rec)


def saved(step: int) -> None:
    """Record that the script's own snapshot now holds the work up to `step`."""
    try:
        _send({"saved": int(step)})
    except (ValueError, TypeError):
        pass
