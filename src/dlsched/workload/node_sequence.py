"""Philly's recorded node activity, and the same series from a simulated run, minute by minute.

The recorded series (`philly_node_sequence.csv`, from the Helios SC'21 artifact,
S-Lab-System-Group/HeliosArtifact `framework/CES Service/data/`; the team's copy is
`traces/philly/philly_node_sequence.csv.gz`) is a CSV, gzipped or not:

    time,active,total
    2017-10-03 00:00:00,312,420

    - time: one row per minute, `YYYY-MM-DD HH:MM:SS` on a whole minute, strictly increasing
      (gaps allowed: the Helios file lacks 2017-10-25 14:01 .. 23:59)
    - active: nodes in use at that minute (an integer >= 0)
    - total: nodes online (optional; an integer >= active)

Times: the file carries no zone. Its span (2017-10-03 00:00 ..) is that of Philly's utilisation
logs, whose times are US Pacific wall clock (`2017-10-03 00:08:00 PDT`, msr-fiddle/philly-traces
README), and in the hour the clocks fell back (2017-11-05 01:00 .. 01:59) its `total` drops from
420 to 174 and `active` to about 126 for exactly those 60 minutes: the series was built on wall-
clock times with the zone dropped. The per-job trace's submission times (`timestamp`, read by
dlsched.workload.readers) are Philly log local time too, so both are read as naive local times
and aligned as they are; no zone conversion. (Run times are real seconds, so a job running across
2017-11-05 02:00 ends one wall-clock hour early here: one hour in 2.5 months.)

A simulation's t = 0 is the earliest submission of the trace file it read: `read_philly` sets
submit_time_s = timestamp - min(timestamp) over the file. `trace_origin` reads that minimum, and
simulated second s is calendar time origin + s.

Busy nodes: a node counts at a minute when at least one GPU of it is held by a task (sharing
included) -- at the minute's instant (`mode="instant"`, the default: like a per-minute sample)
or at any time within the minute (`mode="any"`). Where tasks were is read from the scheduler's
typed event log with the rules of dlsched.web.placements (the web view's Gantt chart).

Bad input is a ConfigError naming the file, the line (header = line 1) and the field.
"""
from __future__ import annotations

import csv
import functools
import gzip
import io
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlsched.core.errors import ConfigError

if TYPE_CHECKING:  # pandas is imported lazily, as in the readers
    import pandas

NODE_SEQUENCE_COLUMNS = ("time", "active", "total")
NODE_SEQUENCE_REQUIRED = ("time", "active")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
MODES = ("instant", "any")
MAX_BYTES = 256 * 1024 ** 2


# ----------------------------------------------------------------------------- the recorded series

def _open_text(path: Path) -> str:
    try:
        raw = path.read_bytes() if path.stat().st_size <= MAX_BYTES else None
    except FileNotFoundError:
        raise ConfigError("file", "no such file", file=str(path)) from None
    except IsADirectoryError:
        raise ConfigError("file", "is a folder, not a file", file=str(path)) from None
    except OSError as e:
        raise ConfigError("file", f"cannot read ({e.strerror or e})", file=str(path)) from None
    if raw is None:
        raise ConfigError("file", f"larger than {MAX_BYTES // 1024 ** 2} MiB", file=str(path))
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise ConfigError("file", f"not a valid gzip file ({e})", file=str(path)) from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError("file", f"not UTF-8 text (byte {e.start})", file=str(path)) from None


def load_node_sequence(path: str | Path) -> pandas.DataFrame:
    """The recorded per-minute node counts of `path` (CSV, gzipped or not; see the module doc) as a
    DataFrame indexed by `time` (naive Philly local time, whole minutes, increasing) with an
    int64 column `active` and, when the file has it, `total`."""
    import pandas as pd

    p = Path(path).expanduser()
    file = str(path)
    reader = csv.reader(io.StringIO(_open_text(p)))
    try:
        header = next(reader)
    except StopIteration:
        raise ConfigError("time", "empty file: expected the header time,active[,total]", file=file, line=1) from None
    except csv.Error as e:
        raise ConfigError("time", f"not CSV ({e})", file=file, line=1) from None
    cols = [c.strip() for c in header]
    for c in NODE_SEQUENCE_REQUIRED:
        if c not in cols:
            raise ConfigError(c, f"missing column (header has: {', '.join(cols)})", file=file, line=1)
    keep = [c for c in NODE_SEQUENCE_COLUMNS if c in cols]
    idx = [cols.index(c) for c in keep]
    values: dict[str, list] = {c: [] for c in keep}
    lines: list[int] = []
    try:
        for row in reader:
            if not row or all(not f.strip() for f in row):
                continue                                   # a blank line
            lines.append(reader.line_num)
            for c, i in zip(keep, idx):
                values[c].append(row[i].strip() if i < len(row) else "")
    except csv.Error as e:
        raise ConfigError("time", f"not CSV ({e})", file=file, line=reader.line_num) from None
    if not lines:
        raise ConfigError("time", "no rows after the header", file=file, line=1)
    line = np.asarray(lines)

    t = pd.to_datetime(pd.Series(values["time"]), format=TIME_FORMAT, errors="coerce").to_numpy()
    bad = np.isnat(t)
    _fail_first(bad, line, file, "time", values["time"], f"expected a time {TIME_FORMAT!r}")
    ns = t.astype("datetime64[ns]").astype(np.int64)
    _fail_first(ns % 60_000_000_000 != 0, line, file, "time", values["time"], "expected a whole minute (seconds 00)")
    back = np.zeros(len(ns), dtype=bool)
    back[1:] = np.diff(ns) <= 0
    _fail_first(back, line, file, "time", values["time"],
                "expected times strictly increasing (one row per minute, oldest first)")
    counts = {}
    for c in keep[1:]:
        v = pd.to_numeric(pd.Series(values[c]), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            _fail_first(~np.isfinite(v) | (v < 0) | (v != np.floor(v)), line, file, c, values[c],
                        "expected an integer >= 0")
        counts[c] = v.astype(np.int64)
    if "total" in counts:
        over = counts["active"] > counts["total"]
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise ConfigError("active", f"{counts['active'][i]} nodes active, more than the {counts['total'][i]} "
                              "online (total)", file=file, line=int(line[i]))
    frame = pd.DataFrame(counts, index=pd.DatetimeIndex(t, name="time"))
    return frame


def _fail_first(mask: np.ndarray, line: np.ndarray, file: str, field: str, raw: list, why: str) -> None:
    if mask.any():
        i = int(np.flatnonzero(mask)[0])
        raise ConfigError(field, f"{why}, got {raw[i]!r}", file=file, line=int(line[i]))


# ----------------------------------------------------------------------------- the simulated series

@functools.lru_cache(maxsize=8)
def _origin_of(path: str) -> pandas.Timestamp:
    import pandas as pd

    from dlsched.workload.readers import PHILLY_TIME_FORMAT
    try:
        ts = pd.read_csv(path, usecols=["timestamp"])["timestamp"]
    except FileNotFoundError:
        raise ConfigError("file", "no such file", file=path) from None
    except ValueError as e:
        raise ConfigError("timestamp", f"not a Philly per-job CSV ({e})", file=path, line=1) from None
    t = pd.to_datetime(ts.astype(str).str.strip(), format=PHILLY_TIME_FORMAT, errors="coerce")
    if t.isna().any():
        i = int(np.flatnonzero(t.isna().to_numpy())[0])
        raise ConfigError("timestamp", f"expected a time {PHILLY_TIME_FORMAT!r}, got {ts.iloc[i]!r}",
                          file=path, line=i + 2)
    if t.empty:
        raise ConfigError("timestamp", "no rows after the header", file=path, line=1)
    return t.min()


def trace_origin(path: str | Path | None = None) -> pandas.Timestamp:
    """The calendar time of a simulation's t = 0 when it replays the Philly per-job CSV `path`
    (default: the bundled trace, `-w philly`): its earliest submission (2017-09-04 10:30:41 for
    the bundled one), naive Philly local time."""
    from dlsched.workload.readers import bundled_workload_path
    return _origin_of(str(path if path is not None else bundled_workload_path("philly")))


def _log_rows(result: Any):
    """The scheduler's typed log of `result` as rows for dlsched.web.placements.intervals: a
    SimResult (its `decisions`), an output folder of `dlsched simulate` (its log.parquet), or a
    DataFrame with log.parquet's columns."""
    from dlsched.web.placements import KINDS
    kinds = frozenset(KINDS)
    if isinstance(result, (str, Path)):
        import pandas as pd
        f = Path(result) / "log.parquet" if Path(result).is_dir() else Path(result)
        if not f.is_file():
            raise ConfigError("log.parquet", "no such file (the output folder of `dlsched simulate`)", file=str(f))
        result = pd.read_parquet(f, columns=["time_s", "kind", "job_id", "detail", "placements"])
    if hasattr(result, "columns") and hasattr(result, "itertuples"):       # a DataFrame
        end = float(result["time_s"].max()) if len(result) else 0.0
        sel = result[result["kind"].isin(kinds)]
        rows = ({"time_s": t, "kind": k, "job_id": j, "detail": d, "placements": p}
                for t, k, j, d, p in zip(sel["time_s"], sel["kind"], sel["job_id"], sel["detail"],
                                         sel["placements"]))
        return rows, end
    log = getattr(result, "decisions", result)
    if getattr(log, "compact", False):
        t, k, j, d, pl, _ = log.placement_columns(drop="stats")
    else:
        recs = [r for r in log if r[1] != "stats"]
        t, k, j = [r[0] for r in recs], [r[1] for r in recs], [r[2] for r in recs]
        d = [r[3] if len(r) > 3 else "" for r in recs]
        pl = [r[4] if len(r) > 4 else () for r in recs]
    end = max((x for x in t if isinstance(x, (int, float)) and math.isfinite(x)), default=0.0)
    rows = ({"time_s": ti, "kind": ki, "job_id": ji, "detail": di,
             "placements": [_triple(p) for p in pi]}
            for ti, ki, ji, di, pi in zip(t, k, j, d, pl) if ki in kinds)
    return rows, float(end)


def _triple(p) -> tuple:
    """(task, node, GPU ids) of a TaskPlacement (or of such a triple already)."""
    if hasattr(p, "task"):
        return p.task, p.node, tuple(p.gpu_ids)
    task, node, gpus = p
    return task, node, tuple(gpus)


def busy_nodes_per_minute(result: Any, origin: Any = None, *, mode: str = "instant") -> pandas.Series:
    """Nodes with at least one GPU held, per calendar minute, of a finished run: `result` is a
    SimResult (`dlsched.simulate`), an output folder of `dlsched simulate` or its log.parquet
    as a DataFrame. `origin`: the calendar time of the run's t = 0 (a pandas/`datetime`
    timestamp or `YYYY-MM-DD HH:MM:SS`; default `trace_origin()`, the bundled Philly trace's).

    Returns an int64 Series named `busy`, indexed by `time` (every whole minute from the one at or
    before `origin` to the last release, gaps included as 0), to compare with
    `load_node_sequence(...)["active"]`. A task still placed when the log ends holds its node
    until the log's last record."""
    import pandas as pd

    from dlsched.web.placements import intervals
    if mode not in MODES:
        raise ConfigError("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
    try:
        t0 = pd.Timestamp(trace_origin() if origin is None else origin)
    except (ValueError, TypeError) as e:
        raise ConfigError("origin", f"expected a time {TIME_FORMAT!r}, got {origin!r} ({e})") from None
    if t0.tzinfo is not None:
        t0 = t0.tz_localize(None)                          # compared with naive local times
    base = t0.floor("min")
    offset = (t0 - base).total_seconds()                   # run second s = base + offset + s
    rows, end = _log_rows(result)
    ivs = [iv for iv in intervals(rows, range(2 ** 62)) if iv["gpus"]]
    if not ivs:
        return pd.Series(np.zeros(1, dtype=np.int64), index=pd.DatetimeIndex([base], name="time"), name="busy")
    node = np.fromiter((iv["node"] for iv in ivs), dtype=np.int64, count=len(ivs))
    start = np.fromiter((iv["start"] for iv in ivs), dtype=np.float64, count=len(ivs)) + offset
    stop = np.fromiter((end if iv["end"] is None else iv["end"] for iv in ivs), dtype=np.float64,
                       count=len(ivs)) + offset
    lo = np.ceil(start / 60.0) if mode == "instant" else np.floor(start / 60.0)
    hi = np.ceil(stop / 60.0)
    keep = hi > lo if mode == "instant" else stop > start
    node, lo, hi = node[keep], lo[keep].astype(np.int64), hi[keep].astype(np.int64)
    n = int(hi.max()) + 1 if hi.size else 1
    counts = np.zeros(n + 1, dtype=np.int64)
    if hi.size:
        s_lo, s_hi = _union_per_node(node, lo, hi)
        np.add.at(counts, s_lo, 1)
        np.add.at(counts, s_hi, -1)
    busy = np.cumsum(counts[:n])
    index = pd.date_range(base, periods=n, freq="min", name="time")
    return pd.Series(busy, index=index, name="busy")


def _union_per_node(node: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The minute ranges [lo, hi) merged per node: a node held by two tasks at once counts once."""
    order = np.lexsort((lo, node))
    node, lo, hi = node[order], lo[order], hi[order]
    big = int(hi.max()) + 1
    run = np.maximum.accumulate(node * big + hi) - node * big   # furthest end so far on this node
    new = np.ones(len(lo), dtype=bool)
    new[1:] = (node[1:] != node[:-1]) | (lo[1:] > run[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(lo)) - 1
    return lo[first], run[last]


# ----------------------------------------------------------------------------- the comparison

def compare(sim_series: Any, recorded: Any, *, start: Any = None, end: Any = None) -> dict:
    """How closely a simulated per-minute node series follows the recorded one, over the minutes
    both have (and within [start, end] when given). `sim_series`: busy_nodes_per_minute's Series
    (or a DataFrame with a `busy` column); `recorded`: load_node_sequence's DataFrame (its
    `active` column) or a Series.

    Returns {minutes, start, end, sim_mean, recorded_mean, bias (mean of sim - recorded),
    mae (mean |sim - recorded|), mean_rel_error (mean |sim - recorded| / recorded over the
    minutes where recorded > 0), rel_minutes (how many those are), corr (Pearson; NaN when
    either side is constant or fewer than 2 minutes overlap)}."""
    import pandas as pd

    sim = _as_series(sim_series, "busy", "sim_series")
    rec = _as_series(recorded, "active", "recorded")
    both = pd.concat([sim.rename("sim"), rec.rename("rec")], axis=1, join="inner").dropna()
    if start is not None:
        both = both[both.index >= pd.Timestamp(start)]
    if end is not None:
        both = both[both.index <= pd.Timestamp(end)]
    s = both["sim"].to_numpy(dtype=np.float64)
    r = both["rec"].to_numpy(dtype=np.float64)
    nan = float("nan")
    if not len(s):
        return {"minutes": 0, "start": None, "end": None, "sim_mean": nan, "recorded_mean": nan, "bias": nan,
                "mae": nan, "mean_rel_error": nan, "rel_minutes": 0, "corr": nan}
    diff = s - r
    pos = r > 0
    corr = nan
    if len(s) >= 2 and s.std() > 0 and r.std() > 0:
        corr = float(np.corrcoef(s, r)[0, 1])
    return {"minutes": len(s), "start": str(both.index[0]), "end": str(both.index[-1]),
            "sim_mean": float(s.mean()), "recorded_mean": float(r.mean()), "bias": float(diff.mean()),
            "mae": float(np.abs(diff).mean()),
            "mean_rel_error": float((np.abs(diff[pos]) / r[pos]).mean()) if pos.any() else nan,
            "rel_minutes": int(pos.sum()), "corr": corr}


def _as_series(x: Any, column: str, what: str) -> pandas.Series:
    import pandas as pd
    if isinstance(x, pd.DataFrame):
        if column not in x.columns:
            raise ConfigError(what, f"a table without a {column!r} column (has: {', '.join(map(str, x.columns))})")
        x = x[column]
    if not isinstance(x, pd.Series) or not isinstance(x.index, pd.DatetimeIndex):
        raise ConfigError(what, "expected a Series (or DataFrame) indexed by time")
    return x


__all__ = ["NODE_SEQUENCE_COLUMNS", "busy_nodes_per_minute", "compare", "load_node_sequence", "trace_origin"]
