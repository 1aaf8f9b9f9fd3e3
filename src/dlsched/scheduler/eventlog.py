"""The scheduler's typed event log: one record per thing that happened to a job or a node, the
same on both backends (the Scheduler writes it, whichever backend it drives).

    time_s      the backend's clock (simulated seconds; on the runtime, seconds since the store's
                epoch)
    kind        one of KINDS
    job_id      "" for node events
    detail      free text: a reason (stopped, held, rejected), "task@node;..." for placements,
                the node id for node events
    placements  TaskPlacements of a launch, resume, migrate or resize (empty otherwise)
    cost        the decision's switch cost (dlsched.workload.packing.SwitchCost), None when the
                backend's own cost applies
    packed      the job shares its GPUs with the job(s) already on them (GPU sharing)
    spec        the JobSpec (arrival records)
    stats       the backend's job_stats (STATS_KEYS) for the job (stats records); for round
                records, (wall seconds the round took, jobs waiting in it)

Records compare and unpack as tuples, so `for t, kind, job_id, *_ in log` reads the first four.
dlsched.metrics.result computes every metric of a run from this log, so both backends get the
same summary and tables. Utilisation is the one input beside it: allocated GPUs follow from the
log's placements (the runtime derives its samples from them), but the simulator's effective and
partly held GPUs come from its speed model, so its backend hands those samples over directly.
A `sink` given to the Scheduler sees each record as it is written (the runtime keeps them in its
store, so the log outlives a server restart).

Rooms: this module holds what a record is (KINDS, LogRecord, placed_detail) and the log kept in
columns (CompactLog). The other column-kept sequences (Timeline, Rounds, the StatsBlock rows of
job_stats, the ColumnSeq base) are dlsched.scheduler.columns, importable from here too.
"""
from __future__ import annotations

import bisect
import itertools
from array import array
from typing import Any, NamedTuple

from dlsched.scheduler.columns import (ColumnSeq, Rounds, StatsBlock, StatsRow, StatsView,  # noqa: F401 (re-exported)
                                       Timeline)

KINDS = {
    "arrival": "the job was submitted (arrived)",
    "rejected": "it can never run on this cluster (detail: why)",
    "launch": "tasks started for the first time",
    "resume": "restarted from its checkpoint after a suspend or a stop",
    "migrate": "moved to other placements",
    "resize": "restarted with another task list",
    "suspend": "suspended by the policy",
    "stopped": "stopped by the backend (a failure, a node lost): queued again (detail: why)",
    "held": "held (an operator, or a policy error: detail says)",
    "released": "released from hold",
    "finish": "finished (or cancelled, or failed for good, on the runtime)",
    "task_finish": "one task of a bag of tasks ended (detail: its index)",
    "stats": "the job's counters as the backend measured them (appended when a run's result is built)",
    "round": "a scheduling round whose plan was carried out (stats: (wall seconds, queued jobs); "
             "a store keeps them as the detail text \"<wall> <queued>\")",
    "NodeDown": "a node went down (detail: node id)",
    "NodeUp": "a node came (back) up (detail: node id)",
}


class LogRecord(NamedTuple):
    time_s: float
    kind: str
    job_id: str
    detail: str = ""
    placements: tuple = ()
    cost: Any = None
    packed: bool = False
    spec: Any = None
    stats: Any = None


_tuple_new = tuple.__new__
_DEFAULTS = tuple(LogRecord._field_defaults[f] for f in LogRecord._fields[3:])
# Shapes of a record's fields after job_id, and what `_x` keeps for each:
_PLAIN, _DETAIL, _SPEC, _STATS, _JOBSTATS, _FULL, _STATROW, _PLACED, _PLACED_PACKED, _ROUND = range(10)
#   _PLAIN     every field at its default (detail "")                 None
#   _DETAIL    only detail set (a str)                                 the detail
#   _SPEC      only spec set (arrival records)                         the spec
#   _STATS     only stats set (round records: (wall, queued))          the stats
#   _JOBSTATS  only stats set, a dict of str keys (stats records)      (keys tuple, values tuple)
#   _FULL      anything else                                           the 6 fields, a tuple
#   _STATROW   a stats record built by `of_stats`                      a StatsRow (its block's columns)
#   _PLACED    a decision appended by `append_placed` (detail derived   the placements
#              from the placements, no cost; _PLACED_PACKED: packed)
#   _ROUND     a round record whose stats are (a float, an int)        None: they are the
#              (wall, queued): the Scheduler's                         round columns' next row


def placed_detail(placements) -> str:
    """A placement record's detail: "task@node;..." (the scheduler's, for a launch, resume,
    migrate or resize)."""
    return ";".join([f"{tp.task}@{tp.node}" for tp in placements])


class CompactLog(ColumnSeq):
    """A typed event log kept in columns: what a list of LogRecords holds, in about a quarter
    of the memory (a run writes about 4 records per job, and a 1M-job simulation keeps them
    all). Times in an array of doubles, kinds as one byte, job ids as references, and the rest
    of a record only where it differs from the defaults; the `stats` dicts of stats records as
    their values with one shared tuple of keys.

    It is a sequence of LogRecords: `append(record)`, iteration, `len`, indexing and slicing
    (a slice is a list) read back records equal to those appended, field for field and of the
    same types (a time that is not a float is kept as it came). It compares equal to any
    sequence of equal records (a list of LogRecords or plain tuples included). Records read
    back are new tuples each time (and a stats record's dict a new dict): the log is
    append-only, and nothing should mutate what it reads."""
    __slots__ = ("_t", "_k", "_s", "_j", "_x", "_odd_t", "_kinds", "_code", "_keysets", "_ri", "_rw", "_rq")

    def __init__(self, records=()):
        self._t = array("d")
        self._k = bytearray()
        self._s = bytearray()
        self._j: list = []
        self._x: list = []
        self._odd_t: dict[int, Any] = {}      # index -> a time that is not a float
        self._kinds: list[str] = []
        self._code: dict[str, int] = {}
        self._keysets: dict[tuple, tuple] = {}
        # the round records' stats in columns (shape _ROUND): each one's index in the log, its wall
        # seconds and its queued jobs. 24 bytes a round against about 110 as a tuple of a float
        # and an int; an oversubscribed 1M-job run has about 1.8M rounds (`python
        # benchmarks/bench_scale.py --jobs "" --million --networks 8`)
        self._ri = array("q")
        self._rw = array("d")
        self._rq = array("q")
        for r in records:
            self.append(r)

    def append(self, rec) -> None:
        t, kind, job_id, *rest = rec
        if len(rest) < 6:
            rest.extend(_DEFAULTS[len(rest):])
        detail, placements, cost, packed, spec, stats = rest
        code = self._code.get(kind)
        if code is None:
            code = self._new_kind(kind)
        if type(detail) is str and not placements and cost is None and packed is False:
            if spec is None and stats is None:
                shape, x = (_PLAIN, None) if detail == "" else (_DETAIL, detail)
            elif detail == "" and stats is None:
                shape, x = _SPEC, spec
            elif detail == "" and spec is None:
                if kind == "round" and type(stats) is tuple and len(stats) == 2 and type(stats[0]) is float \
                        and type(stats[1]) is int and -2**63 <= stats[1] < 2**63:
                    shape, x = _ROUND, None
                    self._ri.append(len(self._j))
                    self._rw.append(stats[0])
                    self._rq.append(stats[1])
                elif type(stats) is dict and all(type(k) is str for k in stats):
                    keys = tuple(stats)
                    shape, x = _JOBSTATS, (self._keysets.setdefault(keys, keys), tuple(stats.values()))
                else:
                    shape, x = _STATS, stats
            else:
                shape, x = _FULL, (detail, placements, cost, packed, spec, stats)
        else:
            shape, x = _FULL, (detail, placements, cost, packed, spec, stats)
        if type(t) is not float:
            self._odd_t[len(self._j)] = t
            t = float("nan")
        self._t.append(t)
        self._k.append(code)
        self._s.append(shape)
        self._j.append(job_id)
        self._x.append(x)

    def extend(self, records) -> None:
        for r in records:
            self.append(r)

    #: the shapes `extend_shaped` takes, by name: what `append` keeps of such a record
    SHAPES = {"plain": _PLAIN, "detail": _DETAIL, "spec": _SPEC, "stats": _STATS, "placed": _PLACED}

    def extend_shaped(self, times, which, kinds, shapes, job_ids: list, xs: list) -> None:
        """Append records in bulk (a compiled run's: dlsched.sim.fastloop): the i-th at times[i]
        (a numpy array of floats), of kind kinds[which[i]] and job job_ids[i], shaped shapes[which[i]] with
        xs[i]: "plain" (x None: no more), "detail" (x its detail, not ""), "spec" (x its spec),
        "stats" (x its stats, not a dict), "placed" (x its placements, not empty: a launch,
        resume, migrate or resize with no cost, not packed). What `append` keeps of the same
        records, so they read back the same."""
        w, table = self._coded(which, kinds)
        shape = bytes(self.SHAPES[x] for x in shapes)
        self._t.frombytes(times.astype("float64", copy=False).tobytes())
        self._k.extend(w.translate(table))
        self._s.extend(w.translate(shape + bytes(256 - len(shape))))
        self._j.extend(job_ids)
        self._x.extend(xs)

    def append_placed(self, t: float, kind: str, job_id: str, placements: tuple, cost, packed: bool) -> None:
        """Append LogRecord(t, kind, job_id, placed_detail(placements), placements, cost, packed)
        (a launch, resume, migrate or resize), without building the detail string: it is made
        from the placements when the record is read (a run writes one per start; the string
        and the record's tuple were about 150 bytes of each)."""
        if cost is not None or type(t) is not float or not placements:
            self.append((t, kind, job_id, placed_detail(placements), placements, cost, bool(packed), None, None))
            return
        code = self._code.get(kind)
        if code is None:
            code = self._new_kind(kind)
        self._t.append(t)
        self._k.append(code)
        self._s.append(_PLACED_PACKED if packed else _PLACED)
        self._j.append(job_id)
        self._x.append(placements)

    def _record(self, i: int, t: float) -> LogRecord:
        if self._odd_t and i in self._odd_t:
            t = self._odd_t[i]
        shape = self._s[i]
        x = self._x[i]
        head = (t, self._kinds[self._k[i]], self._j[i])
        if shape == _PLAIN:
            return _tuple_new(LogRecord, head + _DEFAULTS)
        if shape == _DETAIL:
            return _tuple_new(LogRecord, head + (x, (), None, False, None, None))
        if shape == _SPEC:
            return _tuple_new(LogRecord, head + ("", (), None, False, x, None))
        if shape == _STATS:
            return _tuple_new(LogRecord, head + ("", (), None, False, None, x))
        if shape == _JOBSTATS:
            return _tuple_new(LogRecord, head + ("", (), None, False, None, dict(zip(*x))))
        if shape == _STATROW:
            return _tuple_new(LogRecord, head + ("", (), None, False, None, x.as_dict()))
        if shape == _PLACED or shape == _PLACED_PACKED:
            return _tuple_new(LogRecord, head + (placed_detail(x), x, None, shape == _PLACED_PACKED, None, None))
        if shape == _ROUND:
            return _tuple_new(LogRecord, head + ("", (), None, False, None, self._round(i)))
        return _tuple_new(LogRecord, head + x)

    def _round(self, i: int) -> tuple[float, int]:
        """The stats of the round record at index i (shape _ROUND)."""
        n = bisect.bisect_left(self._ri, i)
        return self._rw[n], self._rq[n]

    def __len__(self) -> int:
        return len(self._j)

    def __iter__(self):
        rec = self._record
        for i, t in enumerate(self._t):
            yield rec(i, t)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._record(k, self._t[k]) for k in range(*i.indices(len(self._j)))]
        i = self._index(i)
        return self._record(i, self._t[i])

    compact = True     # what dlsched.metrics keeps as it is, rather than copy into a list

    def joined(self, *others: "CompactLog", drop: str | None = None) -> "CompactLog":
        """A new log: this one's records then the others', less those of kind `drop`. The
        columns are copied; what the records hold (specs, placements, stats) is shared."""
        out = CompactLog()
        for log in (self, *others):
            remap = bytearray(256)
            for c, kind in enumerate(log._kinds):
                code = out._code.get(kind)
                if code is None:
                    code = out._new_kind(kind)
                remap[c] = code
            skip = log._code.get(drop, -1) if drop is not None else -1
            base = len(out._j)
            out._rounds_from(log, base, skip)
            if skip < 0:
                out._t.extend(log._t)
                out._k.extend(log._k.translate(remap))
                out._s.extend(log._s)
                out._j.extend(log._j)
                out._x.extend(log._x)
            else:
                import numpy as np
                mask = np.frombuffer(log._k, dtype=np.uint8) != skip if log._k else np.zeros(0, bool)
                out._t.extend(array("d", np.frombuffer(log._t, dtype=np.float64)[mask].tobytes()) if mask.any() else ())
                out._k.extend(np.frombuffer(log._k, dtype=np.uint8)[mask].tobytes().translate(remap))
                out._s.extend(np.frombuffer(log._s, dtype=np.uint8)[mask].tobytes())
                flags = mask.tolist()             # (shared bools: 8 bytes a record, no index list)
                out._j.extend(itertools.compress(log._j, flags))
                out._x.extend(itertools.compress(log._x, flags))
                del flags
            if log._odd_t:
                keep = range(len(log._j)) if skip < 0 else [i for i, c in enumerate(log._k) if c != skip]
                pos = {i: n for n, i in enumerate(keep)}
                for i, t0 in log._odd_t.items():
                    if i in pos:
                        out._odd_t[base + pos[i]] = t0
            for keys in log._keysets:
                out._keysets.setdefault(keys, keys)
        return out

    def _rounds_from(self, log: "CompactLog", base: int, skip: int) -> None:
        """`joined`'s part for the round columns: `log`'s rounds, less those of kind code
        `skip`, whose records land at index `base` on."""
        if not log._ri:
            return
        import numpy as np
        ri = np.frombuffer(log._ri, dtype=np.int64)
        rw, rq = np.frombuffer(log._rw, dtype=np.float64), np.frombuffer(log._rq, dtype=np.int64)
        if skip >= 0:
            k = np.frombuffer(log._k, dtype=np.uint8)
            keep = k[ri] != skip
            at = (np.cumsum(k != skip) - 1)[ri[keep]]
            rw, rq = rw[keep], rq[keep]
        else:
            at = ri
        self._ri.frombytes((at + base).astype(np.int64).tobytes())
        self._rw.frombytes(rw.tobytes())
        self._rq.frombytes(rq.tobytes())

    def kinds(self) -> list[str]:
        """Each record's kind, in order (without building the records)."""
        ks = self._kinds
        return [ks[c] for c in self._k]

    def of_kind(self, kind: str) -> list[LogRecord]:
        """The records of one kind, in order (only those are built)."""
        c = self._code.get(kind)
        if c is None:
            return []
        import numpy as np
        idx = np.flatnonzero(np.frombuffer(self._k, dtype=np.uint8) == c).tolist() if self._k else []
        t = self._t
        return [self._record(i, t[i]) for i in idx]

    def round_columns(self, kind: str = "round"):
        """(times, wall seconds, queued jobs) of the round records, as numpy arrays, without
        building them: None when one of them is not as the Scheduler writes it (a float time,
        stats (wall, queued)), for the caller to read the records instead."""
        import numpy as np
        c = self._code.get(kind)
        if c is None:
            return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
        idx = np.flatnonzero(np.frombuffer(self._k, dtype=np.uint8) == c)
        if self._odd_t and any(i in self._odd_t for i in idx.tolist()):
            return None
        shapes = np.frombuffer(self._s, dtype=np.uint8)[idx]
        if kind == "round" and len(idx) == len(self._ri) and (shapes == _ROUND).all():
            return (np.frombuffer(self._t, dtype=np.float64)[idx].copy(),
                    np.frombuffer(self._rw, dtype=np.float64).copy(), np.frombuffer(self._rq, dtype=np.int64).copy())
        if ((shapes != _STATS) & (shapes != _ROUND)).any():
            return None
        xs = [self._x[i] if s == _STATS else self._round(i) for i, s in zip(idx.tolist(), shapes.tolist())]
        if not all(type(x) is tuple and len(x) == 2 for x in xs):
            return None
        n = len(xs)
        return (np.frombuffer(self._t, dtype=np.float64)[idx].copy(),
                np.fromiter((float(x[0]) for x in xs), dtype=np.float64, count=n),
                np.fromiter((int(x[1]) for x in xs), dtype=np.int64, count=n))

    def rows(self, drop: str | None = None):
        """(time, kind, job_id, detail, placements, spec, stats) per record, in order, less
        those of kind `drop`, without building LogRecords (the metrics' replay reads these
        fields of every record of a run). A stats record's dict comes as a StatsView of the
        values kept (a read-only mapping equal to it, without a dict per job)."""
        kinds, odd, t = self._kinds, self._odd_t, self._t
        skip = self._code.get(drop, -1) if drop is not None else -1
        rw, rq, n = self._rw, self._rq, 0          # the round columns' next row
        for i, (c, sh, j, x) in enumerate(zip(self._k, self._s, self._j, self._x)):
            if sh == _ROUND:
                n += 1
                if c != skip:
                    yield (odd[i] if odd and i in odd else t[i]), kinds[c], j, "", (), None, (rw[n - 1], rq[n - 1])
                continue
            if c == skip:
                continue
            ti = odd[i] if odd and i in odd else t[i]
            if sh == _PLAIN:
                yield ti, kinds[c], j, "", (), None, None
            elif sh == _DETAIL:
                yield ti, kinds[c], j, x, (), None, None
            elif sh == _SPEC:
                yield ti, kinds[c], j, "", (), x, None
            elif sh == _STATROW:
                yield ti, kinds[c], j, "", (), None, x
            elif sh == _PLACED or sh == _PLACED_PACKED:
                yield ti, kinds[c], j, placed_detail(x), x, None, None
            elif sh == _JOBSTATS:
                yield ti, kinds[c], j, "", (), None, StatsView(*x)
            elif sh == _STATS:
                yield ti, kinds[c], j, "", (), None, x
            else:
                yield ti, kinds[c], j, x[0], x[1], x[4], x[5]

    def placement_columns(self, drop: str | None = None) -> tuple:
        """(time_s, kind, job_id, detail, placements, packed) of the records less those of kind
        `drop`: six lists, the fields the records read back with (a detail "" where it is None),
        without building a record each (`dlsched simulate` writes them all to log.parquet).
        The same reading by shape as `rows`, which lacks `packed`: built on `rows` (its
        tuples transposed, packed from the shapes) it took 2.0 s on the whole Philly trace's
        log against 0.63 s."""
        kinds, odd = self._kinds, self._odd_t
        skip = self._code.get(drop, -1) if drop is not None else -1
        t, k, j, det, pl, pk = [], [], [], [], [], []
        none = ()
        for i, (ti, c, sh, ji, x) in enumerate(zip(self._t, self._k, self._s, self._j, self._x)):
            if c == skip:
                continue
            t.append(odd[i] if odd and i in odd else ti)
            k.append(kinds[c])
            j.append(ji)
            if sh == _PLACED or sh == _PLACED_PACKED:
                det.append(placed_detail(x))
                pl.append(x)
                pk.append(sh == _PLACED_PACKED)
            elif sh == _FULL:
                det.append(x[0] or "")
                pl.append(x[1])
                pk.append(bool(x[3]))
            else:
                det.append(x if sh == _DETAIL else "")
                pl.append(none)
                pk.append(False)
        return t, k, j, det, pl, pk

    @classmethod
    def of_stats(cls, now: float, items) -> "CompactLog":
        """A log of `stats` records at `now`, one per (job_id, stats dict) in `items`: equal to
        appending LogRecord(now, "stats", job_id, stats=stats) for each, built faster and kept
        in columns (a 1M-job run appends one per job): the dicts with the first one's keys
        become rows of one StatsBlock (a typed array per key where every value is a float, or
        every value an int), a StatsRow is kept as it is (a row of a block the caller made),
        the others are kept as `append` keeps them."""
        out = cls()
        code = out._new_kind("stats")
        keysets = out._keysets
        js, xs, ss = out._j, out._x, []
        block = None
        for job_id, st in items:
            if type(st) is StatsRow:              # a row of a block already made: kept as it is
                ss.append(_STATROW)
                xs.append(st)
                js.append(job_id)
                continue
            keys = tuple(st) if type(st) is dict else None
            if keys is not None and block is None and all(type(k) is str for k in keys):
                block = StatsBlock(keys)
            if keys is not None and block is not None and keys == block.keys:
                ss.append(_STATROW)
                xs.append(block.add(st))
            elif keys is not None and (keys in keysets or all(type(k) is str for k in keys)):
                ss.append(_JOBSTATS)
                xs.append((keysets.setdefault(keys, keys), tuple(st.values())))
            elif st is None:
                ss.append(_PLAIN)
                xs.append(None)
            else:
                ss.append(_STATS)
                xs.append(st)
            js.append(job_id)
        n = len(js)
        if type(now) is not float:
            out._odd_t = dict.fromkeys(range(n), now)
            now = float("nan")
        out._t.extend([now] * n)
        out._k.extend(bytes([code]) * n)
        out._s.extend(bytes(ss))
        return out
