"""What a job's ranks print: one log per rank under `<state dir>/logs/jobs/<job>/rank-<r>.log`.

A rank worker sends its process's stdout and stderr (file descriptors 1 and 2, so C-level
output such as gloo's or NCCL's warnings too) to the rank's log while the job runs there, and
gives them back afterwards; each run appends, after a header naming the run and the node. The
files outlive the server and `dlsched down` (they are the users' record), and are private to
their owner like the rest of the state dir. On a multi-node cluster the state dir must be on a
file system every node sees, as for checkpoints.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def job_workdir(state_dir: str | Path, job_id: str) -> Path:
    """A job's own working directory (its ranks run there unless its spec names `workdir`):
    relative paths it writes never meet another job's. Created private (0700) by the rank."""
    return Path(state_dir) / "work" / job_id


def rank_log(state_dir: str | Path, job_id: str, rank: int) -> Path:
    return Path(state_dir) / "logs" / "jobs" / job_id / f"rank-{int(rank)}.log"


def read_tail(p: Path, max_bytes: int) -> str:
    """The last `max_bytes` of a log ('' when there is none)."""
    try:
        with open(p, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


class Capture:
    """Redirect this process's fds 1 and 2 to a rank's log for the length of one run."""

    def __init__(self, path: str | Path, header: str):
        self.path, self.header = Path(path), header
        self._saved: tuple[int, int] | None = None

    def __enter__(self) -> "Capture":
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.write(fd, f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {self.header} ===\n".encode())
        _flush()
        self._saved = (os.dup(1), os.dup(2))
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        return self

    def __exit__(self, *exc) -> None:
        _flush()
        if self._saved is not None:
            out, err = self._saved
            os.dup2(out, 1)
            os.dup2(err, 2)
            os.close(out)
            os.close(err)
            self._saved = None


def _flush() -> None:
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
