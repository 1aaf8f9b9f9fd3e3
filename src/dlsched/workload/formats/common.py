"""What every trace reader shares: the vectorised checks (the first bad row in file order is one
InputError naming file, line and field), times in seconds, the `extra` JSON column, and building
the JobSpecs.

A reader gets a DataFrame of strings (one per cell, as in the file) and the 1-based line of each
row, and returns a `Trace`: the (line, JobSpec) pairs in file order and, per documented reason,
how many rows it dropped.
"""
from __future__ import annotations

import dataclasses
import gc
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

import numpy as np

from dlsched.core.errors import InputError
from dlsched.core.types import JobSpec, Role, TaskSpec

if TYPE_CHECKING:
    import pandas

# host resources per GPU worker where a trace does not record them (as the Philly reader assumes,
# dlsched.workload.readers.TRACE_CPUS_PER_WORKER)
CPUS_PER_WORKER = 4.0
MEM_GB_PER_WORKER = 16.0


@dataclass
class Trace:
    """What a reader made of a file."""
    format: str
    pairs: list[tuple[int, JobSpec]]
    dropped: dict[str, int] = field(default_factory=dict)


def require(frame: "pandas.DataFrame", columns: Iterable[str], file) -> None:
    """Every column named is in the header, or an InputError at line 1 naming the first missing."""
    have = list(frame.columns)
    for c in columns:
        if c not in have:
            raise InputError(f"missing column {c!r} (header has: {', '.join(map(str, have))})",
                             file=file, line=1, field=c)


def first_bad(checks: list[tuple[str, np.ndarray, str]], frame, lines: np.ndarray, file) -> None:
    """checks: (field, bad mask, what was expected). Raises for the bad value first in file order
    (the first check breaks ties on a line); returns when every mask is clear."""
    best = None
    for order, (fld, mask, why) in enumerate(checks):
        idx = np.flatnonzero(mask)
        if idx.size:
            i = int(idx[0])
            key = (int(lines[i]), order)
            if best is None or key < best[0]:
                best = (key, i, fld, why)
    if best is not None:
        _, i, fld, why = best
        value = frame[fld].iloc[i] if fld in frame.columns else None
        raise InputError(f"{why}, got {value!r}", file=file, line=int(lines[i]), field=fld)


def blank(frame, col: str) -> np.ndarray:
    """Cells that are empty (or NaN, or a trace's spelling of nothing)."""
    s = frame[col]
    text = s.astype(str).str.strip()
    return (s.isna() | text.isin(("", "None", "none", "null", "NULL", "nan", "NaN", "Unknown", "N/A"))).to_numpy()


def _arrow_floats(s) -> np.ndarray | None:
    """Every cell a number (the usual case): one cast in Arrow; None when one is not."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if s.dtype == object:
        return None
    try:
        arr = pc.cast(pa.array(s), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    return arr.fill_null(float("nan")).to_numpy(zero_copy_only=False)


def numbers(frame, col: str) -> np.ndarray:
    """The column as float64 (NaN where empty or not a number: check with `bad_number`)."""
    import pandas as pd
    got = _arrow_floats(frame[col])
    if got is not None:
        return got
    return pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def bad_number(values: np.ndarray, empty: np.ndarray, *, minimum: float = 0.0, integer: bool = False,
               optional: bool = False) -> np.ndarray:
    """Mask of cells that are not a finite number >= minimum (an integer when asked); an empty
    cell is bad unless optional."""
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values < minimum)
        if integer:
            bad |= values != np.floor(values)
    return np.where(empty, not optional, bad)


def times(frame, col: str, *, fmt: str | None = None) -> tuple[np.ndarray, bool]:
    """(seconds, is_clock) of a time column: numbers of seconds as they are, else timestamps
    (`fmt`, or ISO 8601 / `YYYY-MM-DD HH:MM:SS`, a zone allowed) as seconds since the epoch.
    NaN where the cell is empty or does not parse (check with `blank`)."""
    import pandas as pd
    s = frame[col]
    empty = blank(frame, col)
    if fmt is None:
        num = _arrow_floats(s)
        if num is None:     # numbers with a bad cell, or timestamps: a sample of the filled cells says which
            sample = s[~empty].head(1000)
            if len(sample) and pd.to_numeric(sample, errors="coerce").notna().mean() >= 0.5:
                num = numbers(frame, col)
        if num is not None:
            return np.where(empty, np.nan, num), False
    fast = _arrow_clock(s, empty, fmt)
    if fast is not None:
        return fast, True
    text = s.astype(str).str.strip().where(~empty, None)
    ts = pd.to_datetime(text, format=fmt or "ISO8601", errors="coerce", utc=True)
    ns = ts.to_numpy(dtype="datetime64[ns]")
    out = ns.astype(np.int64).astype(np.float64) / 1e9
    return np.where(np.isnat(ns), np.nan, out), True


def _arrow_clock(s, empty: np.ndarray, fmt: str | None) -> np.ndarray | None:
    """Seconds since the epoch of every filled cell, by Arrow's ISO 8601 cast (0.03 s a million
    cells; pandas takes 0.4 s, benchmarks/bench_trace_read.py), or None when Arrow cannot take
    them all. Arrow's cast is strict (no impossible dates, no zone); for `%Y-%m-%d %H:%M:%S` every
    cell must also have that exact shape, as pandas' strptime would ask. The others go to pandas."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if fmt not in (None, "ISO8601", "%Y-%m-%d %H:%M:%S"):
        return None
    try:
        arr = pa.array(s, from_pandas=True)
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            return None
        text = pc.utf8_trim_whitespace(arr.filter(pa.array(~empty)))
        if fmt is not None and fmt != "ISO8601":
            shaped = pc.and_(pc.equal(pc.utf8_length(text), 19),
                             pc.equal(pc.utf8_slice_codeunits(text, 10, 11), " "))
            if pc.all(shaped).as_py() not in (True, None):
                return None
        secs = pc.cast(pc.cast(text, pa.timestamp("s")), pa.int64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    out = np.full(len(empty), np.nan)
    out[~empty] = secs
    return out


def bad_time(values: np.ndarray, empty: np.ndarray, *, optional: bool = False) -> np.ndarray:
    """Mask of time cells that did not parse (an empty one is bad unless optional)."""
    return np.where(empty, not optional, ~np.isfinite(values))


def extra_json(frame, columns: list[str]) -> list[str | None]:
    """One JSON object per row of the cells of `columns` (strings as in the file; empty cells left
    out), or None for a row with none. Built a column at a time: only values that need escaping go
    through json.dumps one by one."""
    import pandas as pd
    if not columns:
        return [None] * len(frame)
    fast = _arrow_extra(frame, columns)
    if fast is not None:
        return fast
    body = None
    for c in columns:
        s = frame[c]
        text = s.astype(str)
        empty = s.isna() | (text.str.strip() == "")
        plain = ~text.str.contains(r'["\\\x00-\x1f]', regex=True)
        part = json.dumps(c) + ':"' + text + '"'
        if not bool(plain.all()):        # only the values that need escaping, one by one
            part = part.astype(object)
            part[~plain] = json.dumps(c) + ":" + text[~plain].map(json.dumps)
        part = part.where(~empty, "")
        if body is None:
            body = part
        else:
            sep = pd.Series(np.where((body != "") & (part != ""), ",", ""), index=body.index)
            body = body + sep + part
    return [None if b == "" else "{" + b + "}" for b in body.tolist()]


def _arrow_extra(frame, columns: list[str], chunk: int = 65536) -> list[str | None] | None:
    """extra_json in Arrow when every column is text, None otherwise. 1 M rows of Helios' four
    extra columns: 1.0 s (pandas: 2.3 s). It works a chunk of rows at a time, so that its
    intermediate columns stay small (all at once they raised the peak by 400 MB), and keeps one
    str per distinct object (a trace's extras often repeat: benchmarks/bench_trace_read.py)."""
    import pyarrow as pa
    arrays = []
    for col in columns:
        arr = pa.array(frame[col], from_pandas=True)
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            return None
        arrays.append(arr.cast(pa.large_string()))
    keys = [json.dumps(col) for col in columns]
    out: list[str | None] = []
    seen: dict[str, str] = {}
    try:
        for start in range(0, len(frame), chunk):
            got = _extra_chunk([a.slice(start, chunk) for a in arrays], keys)
            out.extend([None if v is None else seen.setdefault(v, v) for v in got])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    return out


def _extra_chunk(arrays, keys) -> list[str | None]:
    import pyarrow as pa
    import pyarrow.compute as pc
    body = None
    for key, arr in zip(keys, arrays):
        filled = pc.and_kleene(pc.is_valid(arr), pc.not_equal(pc.utf8_trim_whitespace(arr), "")).fill_null(False)
        # each part ends in a comma, the last one trimmed: Arrow's join with null_handling
        # "skip" drops a row whose parts are all null (pyarrow 21), so no part is null here
        part = pc.binary_join_element_wise(_big(key + ':"'), arr, _big('",'), _big(""))
        odd = pc.match_substring_regex(arr, r'["\\\x00-\x1f]')
        if pc.any(odd).as_py():          # only the values that need escaping, one by one
            mask = odd.fill_null(False).to_numpy(zero_copy_only=False)
            values, texts = part.to_pylist(), arr.to_pylist()
            for i in np.flatnonzero(mask).tolist():
                values[i] = key + ":" + json.dumps(texts[i]) + ","
            part = pa.array(values, type=pa.large_string())
        part = pc.if_else(filled, part, _big(""))
        body = part if body is None else pc.binary_join_element_wise(body, part, _big(""))
    body = pc.utf8_rtrim(body, characters=",")
    whole = pc.binary_join_element_wise(_big("{"), body, _big("}"), _big(""))
    return pc.if_else(pc.equal(body, ""), pa.scalar(None, pa.large_string()), whole).to_pylist()


def _big(text: str):
    import pyarrow as pa
    return pa.scalar(text, pa.large_string())


def _release_arrow() -> None:
    """Give back the memory Arrow's pool kept of the columns a reader is done with, before a
    million job objects are made (about 300 MB of the peak at 1 M rows)."""
    import sys
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()


_TASKS: dict[tuple, tuple[TaskSpec, ...]] = {}


def _tasks(workers: int, gpw: float, cpus: float, mem: float) -> tuple[TaskSpec, ...]:
    key = (workers, gpw, cpus, mem)
    got = _TASKS.get(key)
    if got is None:
        if len(_TASKS) >= 65536:
            _TASKS.clear()
        demand = (gpw, cpus, mem, 0.0, 0.0)
        got = _TASKS[key] = tuple(TaskSpec(i, Role.WORKER, demand, None) for i in range(workers))
    return got


def _strings(values, n: int, default=None) -> list:
    """Stripped text per row, `default` where empty or missing."""
    import pandas as pd
    if values is None:
        return [default] * n
    if isinstance(values, (pd.Series, np.ndarray)):
        # a trace repeats a few users and queues: one str object per distinct value (a million
        # rows of 500 users: 50 MB less than a str per row, and faster)
        s = pd.Series(values, copy=False)
        text = s.astype(str).str.strip().where(~s.isna(), "")
        codes, uniq = pd.factorize(text)
        labels = np.array([default if u in ("", "nan", "None") else str(u) for u in uniq.tolist()], dtype=object)
        return labels[codes].tolist()
    out = []
    for v in (values.tolist() if hasattr(values, "tolist") else values):
        t = None if v is None or v != v else str(v).strip()
        out.append(t if t else default)
    return out


def build_jobs(*, job_ids: list[str], submit: np.ndarray, duration: np.ndarray, workers: np.ndarray,
               gpus_per_worker: np.ndarray, lines: np.ndarray, users=None, queues=None, gpu_types=None,
               start: np.ndarray | None = None, end: np.ndarray | None = None, deadline: np.ndarray | None = None,
               extra: list | None = None, cpus_per_worker: np.ndarray | None = None,
               mem_gb_per_worker: np.ndarray | None = None, origin: float | None = None,
               allowed_types: list | None = None) -> list[tuple[int, JobSpec]]:
    """The (line, JobSpec) of each kept row. Times are on one clock: each is made seconds from
    `origin`, the earliest submission in the file (default: of the jobs kept), so that recorded_*
    stay comparable with submit_time_s. Workers are a gang of `workers` x `gpus_per_worker` GPUs
    (4 cores and 16 GB each unless given). `allowed_types`: per row, a tuple of the GPU types the
    job may run on (JobSpec.gpu_types), or None."""
    n = len(job_ids)
    if n == 0:
        return []
    _release_arrow()
    origin = float(np.min(submit)) if origin is None else origin

    def rel(a):
        if a is None:
            return [None] * n
        r = a - origin
        return r.tolist() if not np.isnan(r).any() else [None if x != x else x for x in r.tolist()]

    cpus = np.full(n, CPUS_PER_WORKER) if cpus_per_worker is None else cpus_per_worker
    mem = np.full(n, MEM_GB_PER_WORKER) if mem_gb_per_worker is None else mem_gb_per_worker
    # a trace repeats a few job shapes: build each shape's tasks once (each column factorised, the
    # codes combined into one int64: a MultiIndex's factorize builds a million tuples, +1 s)
    import pandas as pd
    code = np.zeros(n, dtype=np.int64)
    for col in (workers.astype(np.int64), gpus_per_worker.astype(np.float64), cpus.astype(np.float64),
                mem.astype(np.float64)):
        c, u = pd.factorize(col)
        code = pd.factorize(code * len(u) + c)[0]      # stays below n: no overflow
    _, first, codes = np.unique(code, return_index=True, return_inverse=True)
    built = [_tasks(int(workers[i]), float(gpus_per_worker[i]), float(cpus[i]), float(mem[i])) for i in first.tolist()]
    shapes = [built[i] for i in codes.tolist()]
    gc_was = gc.isenabled()
    gc.disable()            # a million new objects and no cycles: the collector would only rescan them
    try:
        return _specs(job_ids, submit, duration, shapes, users, queues, gpu_types, start, end, deadline, extra,
                      lines, rel, n, allowed_types)
    finally:
        if gc_was:
            gc.enable()


# JobSpec's fields in order, as _specs passes them by position (a frozen dataclass's keyword
# __init__ costs a third more: 1.3 s per million jobs); checked here, so a new field cannot
# silently shift them
_ORDER = ("job_id", "submit_time_s", "kind", "tasks", "user", "priority", "deadline_s", "model", "comm", "batch_size",
          "iterations", "duration_s", "gpu_type", "gpu_types", "data_gb", "launch_s", "save_s", "queue",
          "recorded_start_s", "recorded_end_s", "extra", "preemptible")
assert tuple(f.name for f in dataclasses.fields(JobSpec)) == _ORDER, "JobSpec's fields changed: update _ORDER"


def _specs(job_ids, submit, duration, shapes, users, queues, gpu_types, start, end, deadline, extra, lines, rel, n,
           allowed=None):
    return [(line, JobSpec(j, s, "dl", shape, u, 0, dl, None, "allreduce", None, None, d, g, a, None, None, 0.0, q,
                           rs, re, x))
            for j, s, d, shape, u, q, g, a, rs, re, dl, x, line in zip(
                job_ids, rel(submit), duration.tolist(), shapes, _strings(users, n, "default"),
                _strings(queues, n), _strings(gpu_types, n), allowed if allowed is not None else [None] * n,
                rel(start), rel(end), rel(deadline),
                extra if extra is not None else [None] * n, lines.tolist())]


def kept(frame, keep: np.ndarray, columns) -> "pandas.DataFrame":
    """The rows `keep` of the `columns` (those the frame has) still to be read, and the table
    emptied in place: it is read_trace's temporary, and what it held goes before a million job
    objects are made (170 MB of the peak at 1 M rows of Helios, benchmarks/bench_trace_read.py)."""
    want = list(dict.fromkeys(c for c in columns if c in frame.columns))
    f = frame.loc[keep, want]
    for col in list(frame.columns):      # (in place: `drop(inplace=True)` is deprecated in pandas 3.1)
        del frame[col]
    return f


def count(dropped: dict[str, int], reason: str, mask: np.ndarray) -> None:
    k = int(np.count_nonzero(mask))
    if k:
        dropped[reason] = dropped.get(reason, 0) + k


def origin(submit: np.ndarray) -> float | None:
    """The earliest submission of a file (over every row, dropped ones too): time 0."""
    finite = submit[np.isfinite(submit)]
    return float(finite.min()) if finite.size else None
