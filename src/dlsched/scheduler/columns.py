"""The column-kept sequences beside the typed event log: the utilisation timeline (Timeline), the
rounds (Rounds), and finished jobs' job_stats as rows of typed columns (StatsBlock, StatsRow,
StatsView), with the base they share (ColumnSeq, which the engine's EngineLog and the event log's
CompactLog build on too).

A module of its own because these are storage, not vocabulary: each stands for a list of tuples
or dicts and reads back values equal to those put in, in a fraction of the memory (a 1M-job run
keeps a few rows per job; benchmarks/bench_scale.py --million measures its peak RSS), while
dlsched.scheduler.eventlog defines what a record is (KINDS, LogRecord) and keeps the log itself.
Every name here is importable from dlsched.scheduler.eventlog as before.
"""
from __future__ import annotations

from array import array
from collections.abc import Mapping


class ColumnSeq:
    """What the column-kept sequences (CompactLog, Timeline, the engine's EngineLog) share: they
    stand for a list of rows, so they compare equal to one (or to their own kind) row by row,
    are unhashable, print and pickle as that list, and index as a list does (`_index`)."""
    __slots__ = ()
    __hash__ = None

    def _index(self, i: int) -> int:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{type(self).__name__} index out of range")
        return i

    @staticmethod
    def _same(row, other_row) -> bool:
        return row == other_row

    def __eq__(self, other) -> bool:
        if isinstance(other, (type(self), list, tuple)):
            return len(self) == len(other) and all(self._same(a, b) for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"

    def __reduce__(self):
        return (type(self), (list(self),))

    def _new_kind(self, kind: str) -> int:
        """The one-byte code of a kind not seen before (`_code`, `_kinds`: the kinds so far)."""
        code = self._code[kind] = len(self._kinds)
        if code > 255:
            raise ValueError(f"{type(self).__name__} holds at most 256 kinds")
        self._kinds.append(kind)
        return code

    def _coded(self, which, kinds) -> tuple[bytes, bytes]:
        """For bulk appends (`extend_coded`, `extend_shaped`): `which` (indices into `kinds`, one
        byte each) as bytes, and the table that translates them into this log's kind codes."""
        codes = bytes(self._code[k] if k in self._code else self._new_kind(k) for k in kinds)
        w = which.astype("uint8", copy=False).tobytes() if hasattr(which, "tobytes") else bytes(which)
        return w, codes + bytes(256 - len(codes))


class StatsView(Mapping):
    """A stats record's dict as CompactLog keeps it: its keys (one tuple shared by every record
    with the same keys) and values. A read-only mapping equal to the dict; a 1M-job result
    reads one per job, and a dict of 13 keys each would cost 650 bytes."""
    __slots__ = ("_k", "_v")

    def __init__(self, keys: tuple, values: tuple):
        self._k, self._v = keys, values

    def __getitem__(self, key):
        try:
            return self._v[self._k.index(key)]
        except ValueError:
            raise KeyError(key) from None

    def get(self, key, default=None):
        try:
            return self._v[self._k.index(key)]
        except ValueError:
            return default

    def __iter__(self):
        return iter(self._k)

    def __len__(self) -> int:
        return len(self._k)

    def __repr__(self) -> str:
        return repr(dict(zip(self._k, self._v)))


_INT64_MIN, _INT64_MAX = -2 ** 63, 2 ** 63 - 1


class StatsBlock:
    """The stats dicts of many jobs with the same keys, in columns: per key an array of doubles
    where every value so far is a float, of int64 where every one is an int, else a list (the
    values read back are equal to those added, and of the same type). A 1M-job result holds one
    row per job; a tuple of 13 boxed values each cost about 340 bytes, a row here about 110."""
    __slots__ = ("keys", "index", "cols", "n")

    def __init__(self, keys: tuple):
        self.keys = keys
        self.index = {k: c for c, k in enumerate(keys)}
        self.cols: list = [None] * len(keys)
        self.n = 0

    def add(self, st: dict) -> "StatsRow":
        cols, i = self.cols, self.n
        for c, v in enumerate(st.values()):
            col = cols[c]
            t = type(v)
            if col is None:                       # the first row sets the column's kind
                col = cols[c] = array("d") if t is float else array("q") if t is int else []
            if type(col) is not list and not (
                    (t is float and col.typecode == "d")
                    or (t is int and col.typecode == "q" and _INT64_MIN <= v <= _INT64_MAX)):
                col = cols[c] = col.tolist()      # mixed types from here on: a list
            col.append(v)
        self.n = i + 1
        return StatsRow(self, i)


class StatsRow(Mapping):
    """One job's stats dict in a StatsBlock: a read-only mapping equal to the dict."""
    __slots__ = ("_b", "_i")

    def __init__(self, block: StatsBlock, i: int):
        self._b, self._i = block, i

    def __getitem__(self, key):
        return self._b.cols[self._b.index[key]][self._i]

    def get(self, key, default=None):
        c = self._b.index.get(key)
        return default if c is None else self._b.cols[c][self._i]

    def __iter__(self):
        return iter(self._b.keys)

    def __len__(self) -> int:
        return len(self._b.keys)

    def as_dict(self) -> dict:
        i = self._i
        return {k: col[i] for k, col in zip(self._b.keys, self._b.cols)}

    def __repr__(self) -> str:
        return repr(self.as_dict())


class Timeline(ColumnSeq):
    """The scheduler's utilisation samples, (time_s, allocated_gpus, effective_gpus,
    partial_gpus, running_jobs, queued_jobs), kept in columns (about two per job; a list of
    6-tuples of boxed numbers costs five times as much). A sequence of those tuples: `append`,
    iteration, `len`, `[i]`, and `[-1] = sample` (a sample at the same time replaces the last).
    The numbers come back as Python floats and ints (equal to those appended)."""
    __slots__ = ("_f", "_n")
    compact = True

    def __init__(self, samples=()):
        self._f = array("d")     # time, allocated, effective, partial: 4 per sample
        self._n = array("q")     # running, queued: 2 per sample
        for s in samples:
            self.append(s)

    def append(self, s) -> None:
        t, a, e, p, run, q = s
        self._f.extend((t, a, e, p))
        self._n.extend((run, q))

    def __len__(self) -> int:
        return len(self._n) // 2

    def extend_columns(self, f, k) -> None:
        """Append samples in bulk: f (n x 4 doubles: time, allocated, effective, partial GPUs)
        and k (n x 2 integers: running, queued jobs), numpy arrays."""
        import numpy as np
        self._f.frombytes(np.ascontiguousarray(f, dtype=np.float64).tobytes())
        self._n.frombytes(np.ascontiguousarray(k, dtype=np.int64).tobytes())

    def __getitem__(self, i: int) -> tuple:
        i = self._index(i)
        f, k = self._f, self._n
        return (f[4 * i], f[4 * i + 1], f[4 * i + 2], f[4 * i + 3], k[2 * i], k[2 * i + 1])

    def __setitem__(self, i: int, s) -> None:
        i = self._index(i)
        t, a, e, p, run, q = s
        self._f[4 * i:4 * i + 4] = array("d", (t, a, e, p))
        self._n[2 * i:2 * i + 2] = array("q", (run, q))

    def __iter__(self):
        f, k = self._f, self._n
        for i in range(len(self)):
            yield (f[4 * i], f[4 * i + 1], f[4 * i + 2], f[4 * i + 3], k[2 * i], k[2 * i + 1])

    def columns(self) -> dict:
        """The samples as numpy columns (time_s, allocated_gpus, ..., queued_jobs)."""
        import numpy as np
        f = np.frombuffer(self._f, dtype=np.float64).reshape(-1, 4) if len(self._f) else np.empty((0, 4))
        k = np.frombuffer(self._n, dtype=np.int64).reshape(-1, 2) if len(self._n) else np.empty((0, 2), dtype=np.int64)
        return {"time_s": f[:, 0].copy(), "allocated_gpus": f[:, 1].copy(), "effective_gpus": f[:, 2].copy(),
                "partial_gpus": f[:, 3].copy(), "running_jobs": k[:, 0].copy(), "queued_jobs": k[:, 1].copy()}

    @staticmethod
    def _same(row, other_row) -> bool:
        return row == tuple(other_row)      # a sample given as a list equals its tuple


class Rounds(ColumnSeq):
    """The scheduler's rounds, (time_s, wall_s, queued jobs) each, kept in columns (a run of a
    million jobs runs about a million rounds; a tuple of boxed numbers each cost 110 bytes, a
    row here 24). A sequence of those tuples: `append`, `len`, iteration, `[i]` and slices (a
    list), which the runtime's metrics read from where they last stopped."""
    __slots__ = ("_f", "_q")
    compact = True

    def __init__(self, rows=()):
        self._f = array("d")     # time, wall: 2 per round
        self._q = array("q")
        for r in rows:
            self.append(r)

    def append(self, r) -> None:
        t, wall, queued = r
        self._f.extend((t, wall))
        self._q.append(queued)

    def extend_columns(self, t, wall, queued) -> None:
        """Append rounds in bulk from numpy arrays of their times, wall seconds and queued jobs."""
        import numpy as np
        self._f.frombytes(np.column_stack((t, wall)).astype(np.float64).tobytes())
        self._q.frombytes(np.ascontiguousarray(queued, dtype=np.int64).tobytes())

    def __len__(self) -> int:
        return len(self._q)

    def pop(self) -> tuple:
        """Remove and return the last round (a list's pop())."""
        last = self[-1]
        del self._f[-2:]
        del self._q[-1]
        return last

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        i = self._index(i)
        return (self._f[2 * i], self._f[2 * i + 1], self._q[i])

    def __iter__(self):
        f, q = self._f, self._q
        for i in range(len(q)):
            yield (f[2 * i], f[2 * i + 1], q[i])

    @staticmethod
    def _same(row, other_row) -> bool:
        return row == tuple(other_row)
