"""Loading, saving and summarising workloads.

A workload reference (`load_workload(ref)`) is one of
- a generator name, possibly with parameters: `sample`, `seed000`, `poisson:jobs=500,rate=0.01`
  (see `dlsched.workload.generators`); a name without a path separator is tried as a
  generator first, so write `./sample` for a file called `sample`;
- a bundled workload: `pollux-1` .. `pollux-8` (Pollux OSDI'21, see `readers`);
- a file path.

Files
    Format (what the columns mean), recognised from the column names of the header / first
    record, whatever the extension:
      schema  the common schema (`dlsched.workload.schema`): has job_id and submit_time_s
      philly  Philly per-job CSV: timestamp, duration, num_gpus[, gpu_time, cluster]
      pollux  Pollux workload CSV: name, time, application, num_replicas, batch_size
    except a file whose name ends `.trace` or `.trace.gz`, which is read as
      gavel   Gavel's tab-separated trace, no header (`dlsched.workload.gavel_trace`)
    and the public traces as published (`dlsched.workload.formats`: tiresias, helios, acme,
    slurm, swf, pai, openb, spot, elasticflow, philly-raw), recognised from their header, name or first bytes; `mapping`
    (`--map`) reads any other table by the columns it names.
    Encoding, recognised from the content: Parquet (starts with `PAR1`), JSON lines (first
    character `{`), otherwise CSV; any of them may be gzipped (gzip magic bytes).
    `format=` overrides either: one of FORMATS, or csv / parquet / jsonl.

Line numbers in errors are 1-based: in CSV the header is line 1 and the first data row line 2
(a row whose quoted field spans lines counts as the line it ends on); in JSON lines the first
record is line 1; in Parquet the row index + 1. Rows whose every field is empty (blank lines) are
skipped. Every CSV row must have as many fields as the header: a row cut short (a truncated
file) or one with extra fields is an error naming its line and field, never a default.

Saving (`save_workload`) always writes the common schema; the encoding comes from the
extension: .csv, .csv.gz, .parquet, .jsonl, .jsonl.gz. The file is written next to its
destination under a temporary name and renamed, so an error never leaves half a file.

pandas and pyarrow are imported inside the functions that need them: the simulator core imports
this module and must start fast.
"""
from __future__ import annotations

import csv
import gzip
import io as _io
import json
import os
import tempfile
from collections import Counter
from operator import attrgetter
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from dlsched.core.errors import DlschedError, InputError
from dlsched.core.types import GPU, JobSpec
from dlsched.workload import formats, gavel_trace, readers
from dlsched.workload.formats.table import checked_rows
from dlsched.workload.generators import GENERATORS, generate
from dlsched.workload.schema import COLUMNS, job_to_row

FORMATS = ("schema", "philly", "pollux", "gavel") + formats.NAMES
ENCODINGS = ("csv", "parquet", "jsonl")
SAVE_SUFFIXES = {".csv": ("csv", False), ".csv.gz": ("csv", True), ".parquet": ("parquet", False),
                 ".jsonl": ("jsonl", False), ".jsonl.gz": ("jsonl", True)}

_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"


# ----------------------------------------------------------------------------- loading

def load_workload(ref: str | Path, *, format: str | None = None, seed: int = 0, mapping=None) -> list[JobSpec]:
    """The jobs a reference names (generator, bundled workload or file), sorted by
    (submit_time_s, job_id). `seed` feeds generators; `format` overrides file detection;
    `mapping` (`--map`: "submit=ts,gpus=n,..." or a YAML file, `formats.mapped`) reads a file
    by the columns it names."""
    return inspect_workload(ref, format=format, seed=seed, mapping=mapping)[0]


def inspect_workload(ref: str | Path, *, format: str | None = None, seed: int = 0, mapping=None
                     ) -> tuple[list[JobSpec], dict[str, Any]]:
    """load_workload's jobs and how they were read: {"format": ..., "dropped": {reason: rows}}."""
    if format is not None and format not in FORMATS + ENCODINGS:
        raise DlschedError(f"unknown workload format {format!r} (formats: {', '.join(FORMATS + ENCODINGS)})")
    named = _is_name(ref)
    if named:
        name = ref.partition(":")[0].strip()
        if name in GENERATORS:
            if format is not None or mapping is not None:
                what = f"format={format!r}" if format is not None else "--map"
                raise DlschedError(f"workload {ref!r} is a generator: {what} applies to files only")
            return _sorted(generate(ref, seed=seed)), {"format": "generator", "dropped": {}}
        bundled = readers.bundled_workload_path(ref)
        if bundled is not None:
            return inspect_workload(bundled, format=format, mapping=mapping)
    path = Path(ref).expanduser()
    if not path.exists():
        if named and (":" in ref or not Path(ref).suffix):
            raise DlschedError(
                f"{ref}: not a workload generator ({', '.join(GENERATORS)}), a bundled workload "
                f"(pollux-1 .. pollux-8, philly) or an existing file")
        raise DlschedError(f"{ref}: no such workload file")
    if not path.is_file():
        raise DlschedError(f"{path}: not a file")
    info: dict[str, Any] = {}
    jobs = _sorted([job for _, job in _load_pairs(path, format, mapping, info)])
    return jobs, info


def _is_name(ref) -> bool:
    return isinstance(ref, str) and "/" not in ref and os.sep not in ref


def is_named_workload(ref: str | Path) -> bool:
    """Whether `ref` is a generator or bundled workload name rather than a file (names win)."""
    return _is_name(ref) and (str(ref).partition(":")[0].strip() in GENERATORS
                              or readers.bundled_workload_path(str(ref)) is not None)


def _sorted(jobs: list[JobSpec]) -> list[JobSpec]:
    """By (submit_time_s, job_id). A trace is mostly in submission order already: then only the
    runs of equal submission times are sorted, by job_id (1 M jobs: 0.1 s, not the 1 s of a
    whole sort; benchmarks/bench_trace_read.py)."""
    import numpy as np
    n = len(jobs)
    t = np.fromiter((j.submit_time_s for j in jobs), dtype=np.float64, count=n)
    step = np.diff(t)
    if n < 2 or not (step >= 0).all():             # (NaN fails >= 0 too)
        return sorted(jobs, key=attrgetter("submit_time_s", "job_id"))
    out = list(jobs)
    tie = np.flatnonzero(step == 0)                 # jobs i and i + 1 were submitted together
    if tie.size:
        cut = np.flatnonzero(np.diff(tie) > 1) + 1
        by_id = attrgetter("job_id")
        for run in np.split(tie, cut):
            a, b = int(run[0]), int(run[-1]) + 2
            out[a:b] = sorted(out[a:b], key=by_id)
    return out


def _sniff(path: Path) -> tuple[str, bool]:
    """(encoding, gzipped) from the first bytes of the file."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4)
            gz = head[:2] == _GZIP_MAGIC
            if gz:
                fh.seek(0)
                try:
                    with gzip.GzipFile(fileobj=fh) as g:
                        head = g.read(4096)
                except (OSError, EOFError) as e:
                    raise DlschedError(f"{path}: not a valid gzip file ({e})") from None
            else:
                head += fh.read(4092)
    except OSError as e:
        raise DlschedError(f"{path}: cannot read ({e.strerror or e})") from None
    if head.startswith(_PARQUET_MAGIC):
        return "parquet", gz
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if not text:
        raise DlschedError(f"{path}: empty workload file")
    return ("jsonl" if text.startswith(b"{") else "csv"), gz


def load_workload_rows(path: str | Path, *, format: str | None = None, mapping=None) -> list[tuple[int, JobSpec]]:
    """(line, job) of each row of a workload file, in file order (for checks that name a line)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DlschedError(f"{path}: no such workload file")
    return _load_pairs(path, format, mapping)


def _gavel_v100(job_type: str, gpus: int) -> float | None:
    from dlsched.workload.throughputs import load_throughputs
    return load_throughputs("gavel").steps_per_s(job_type, gpus, "V100")


def _load_pairs(path: Path, format: str | None, mapping=None, info: dict | None = None) -> list[tuple[int, JobSpec]]:
    file = str(path)
    info = {} if info is None else info
    info.update(format=format, dropped={})
    if mapping is not None or format in formats.NAMES or (format is None and not gavel_trace.is_gavel_trace(path)
                                                          and formats.detect(path) is not None):
        trace = formats.read_trace(path, format, mapping)
        info.update(format=trace.format, dropped=trace.dropped)
        return _unique(trace.pairs, file)
    if format == "gavel" or (format is None and gavel_trace.is_gavel_trace(path)):
        # its job ids are unique by construction; an SLO is a multiple of the run time alone on a
        # V100, read from Gavel's own table (loaded only when a row has one)
        info["format"] = "gavel"
        return gavel_trace.read_gavel_trace(path, file=file, steps_per_s=_gavel_v100)
    encoding, gz = _sniff(path)
    if format in ENCODINGS:
        encoding, format = format, None
    if encoding == "parquet" and gz:
        raise DlschedError(f"{file}: gzipped Parquet is not supported (Parquet compresses itself)")

    # Read the rows: `columns` (header / first record), and either `records` (line, dict) or a
    # DataFrame `frame` with the line number of each row in `lines`.
    records: list[tuple[int, dict[str, Any]]] | None = None
    frame = None
    if encoding == "csv":
        frame, lines = _read_csv(path, gz)
        columns = list(frame.columns)
    elif encoding == "jsonl":
        records = _read_jsonl(path, gz)
        columns = list(records[0][1]) if records else []
    else:
        table = _read_parquet(path)
        columns = list(table.column_names)

    fmt = format or readers.detect_format(columns)
    if fmt is None:
        raise DlschedError(
            f"{file}: unrecognised workload columns ({', '.join(map(str, columns)) or 'none'}); expected "
            f"the dlsched schema (job_id, submit_time_s, ...), a Philly trace ({', '.join(readers.PHILLY_COLUMNS)}), "
            f"a Pollux workload ({', '.join(readers.POLLUX_COLUMNS)}) or a trace format "
            f"({', '.join(formats.NAMES[:-1])}); or name the columns with --map submit=COL,duration=COL,...")
    info["format"] = fmt

    if encoding == "parquet":
        if fmt == "schema":
            rows = table.to_pylist()
            records = [(i + 1, r) for i, r in enumerate(rows)]
        else:
            frame = table.to_pandas()
            lines = np.arange(1, len(frame) + 1)
    if fmt == "schema":
        if records is None:
            cols = [frame[c].tolist() for c in frame.columns]
            records = [(line, dict(zip(frame.columns, values)))
                       for line, values in zip(lines.tolist(), zip(*cols))]
        pairs = readers.read_schema_rows(records, file=file)
    else:
        if frame is None:
            frame, lines = _records_frame(records)
        reader = readers.read_philly if fmt == "philly" else readers.read_pollux
        pairs = reader(frame, lines, file=file)
    return _unique(pairs, file)


def _unique(pairs, file: str) -> list[tuple[int, JobSpec]]:
    pairs = pairs if isinstance(pairs, list) else list(pairs)
    if len({job.job_id for _, job in pairs}) == len(pairs):     # the usual case, in one C-speed pass
        return pairs
    seen: dict[str, int] = {}
    for line, job in pairs:
        if job.job_id in seen:
            raise InputError(f"duplicate job_id {job.job_id!r} (first on line {seen[job.job_id]})",
                             file=file, line=line, field="job_id")
        seen[job.job_id] = line
    return pairs


def _read_csv(path: Path, gz: bool):
    """All cells as strings, and the line number of each kept row. Every row must have as many
    fields as the header: a row cut short (a truncated file) or one with extra fields is an
    InputError naming its line and the first missing (or the last) field."""
    import pandas as pd

    file = str(path)
    reader = None
    try:
        with (gzip.open if gz else open)(path, "rt", encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh)
            header = [c.strip() for c in next((r for r in reader if "".join(r).strip()), [])]
            if not header:
                raise DlschedError(f"{file}: empty workload file")
            for c in header:
                if header.count(c) > 1:
                    raise InputError("duplicate column", file=file, line=reader.line_num, field=c)
            rows, lines = checked_rows(reader, header, file)
    except csv.Error as e:
        raise InputError(f"malformed CSV ({e})", file=file, line=reader.line_num if reader else None) from None
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text ({e.reason})", file=file) from None
    except (OSError, EOFError) as e:
        raise DlschedError(f"{file}: cannot read ({e}; a truncated file?)") from None
    return pd.DataFrame(rows, columns=header, dtype=object), np.asarray(lines, dtype=np.int64)


def _read_jsonl(path: Path, gz: bool) -> list[tuple[int, dict[str, Any]]]:
    file = str(path)
    out = []
    opener = gzip.open if gz else open
    try:
        with opener(path, "rt", encoding="utf-8-sig") as fh:
            for line, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as e:
                    raise InputError(f"invalid JSON ({e.msg}, column {e.colno})", file=file, line=line) from None
                if not isinstance(record, dict):
                    raise InputError("expected a JSON object per line", file=file, line=line)
                out.append((line, {str(k).strip(): v for k, v in record.items()}))
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text ({e.reason})", file=file) from None
    except (OSError, EOFError) as e:
        raise DlschedError(f"{file}: cannot read ({e})") from None
    return out


def _read_parquet(path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise DlschedError(f"{path}: cannot read Parquet ({e})") from None


def _records_frame(records: list[tuple[int, dict[str, Any]]]):
    import pandas as pd

    frame = pd.DataFrame.from_records([r for _, r in records])
    return frame, np.array([line for line, _ in records], dtype=np.int64)


# ----------------------------------------------------------------------------- saving

def save_kind(path: Path) -> tuple[str, bool]:
    """(encoding, gzipped) that `save_workload` writes to `path`, from its extension."""
    name = path.name.lower()
    for suffix in sorted(SAVE_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return SAVE_SUFFIXES[suffix]
    raise DlschedError(f"{path}: cannot tell the format from the extension "
                       f"(use one of {', '.join(SAVE_SUFFIXES)})")


def save_workload(jobs: Iterable[JobSpec], path: str | Path) -> Path:
    """Write jobs in the common schema; encoding from the extension (.csv[.gz], .parquet,
    .jsonl[.gz]). Atomic: written to a temporary file in the same folder, then renamed."""
    path = Path(path)
    encoding, gz = save_kind(path)
    rows = [job_to_row(j) for j in jobs]
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise DlschedError(f"{path}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw:
            if encoding == "parquet":
                _write_parquet(rows, raw)
            else:
                # mtime=0: the same jobs always give the same bytes
                out = gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) if gz else raw
                text = _io.TextIOWrapper(out, encoding="utf-8", newline="")
                (_write_csv if encoding == "csv" else _write_jsonl)(rows, text)
                text.flush()
                text.detach()
                if gz:
                    out.close()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def _write_csv(rows: list[dict[str, Any]], fh) -> None:
    # csv writes floats with repr(), which reads back to the same float.
    writer = csv.DictWriter(fh, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})


def _write_jsonl(rows: list[dict[str, Any]], fh) -> None:
    for row in rows:
        fh.write(json.dumps(_plain(row), separators=(",", ":")) + "\n")


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    # numpy scalars (from user-built jobs) are not JSON serialisable
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}


def _write_parquet(rows: list[dict[str, Any]], fh) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"str": pa.string(), "float": pa.float64(), "int": pa.int64()}
    schema = pa.schema([(c, types[kind]) for c, (kind, _) in COLUMNS.items()])
    table = pa.Table.from_pylist([_plain(r) for r in rows], schema=schema)
    pq.write_table(table, fh)


# ----------------------------------------------------------------------------- describing

def describe_workload(jobs: Iterable[JobSpec]) -> dict[str, Any]:
    """Summary counts of a workload (JSON-friendly).

    jobs, dl_jobs, tasks_jobs, tasks (all tasks incl. parameter servers), gpus_requested (sum),
    gpus_per_job ({gpus: jobs}), first_submit_s, last_submit_s, span_s, jobs_with_duration,
    gpu_seconds (GPUs x duration over jobs with a known duration; per task for `tasks` jobs),
    jobs_with_iterations, jobs_with_deadline, users, queues (distinct, None left out), gpu_types
    ({type: jobs}), gpu_type_sets ({"A|B": jobs} of the jobs that may run on any of several types,
    JobSpec.gpu_types; gpu_type unset), time_span ("Dd HH:MM:SS" of the submissions), jobs_with_recorded_start,
    models ({model: jobs}, None left out)."""
    jobs = list(jobs)
    gpus_hist: Counter = Counter()
    models: Counter = Counter()
    gpu_seconds = 0.0
    with_duration = 0
    for j in jobs:
        g = j.gpus
        gpus_hist[int(g) if float(g).is_integer() else g] += 1
        if j.model is not None:
            models[j.model] += 1
        if j.kind == "tasks":
            known = [t for t in j.tasks if t.duration_s is not None]
            if known:
                with_duration += 1
                gpu_seconds += sum(t.demand[GPU] * t.duration_s for t in known)
        elif j.duration_s is not None:
            with_duration += 1
            gpu_seconds += g * j.duration_s
    submits = [j.submit_time_s for j in jobs]
    first = min(submits) if submits else 0.0
    last = max(submits) if submits else 0.0
    days, rest = divmod(int(round(last - first)), 86400)
    types = Counter(j.gpu_type for j in jobs if j.gpu_type is not None)
    sets = Counter("|".join(j.gpu_types) for j in jobs if j.gpu_type is None and j.gpu_types)
    return {
        "jobs": len(jobs),
        "users": len({j.user for j in jobs}),
        "queues": len({j.queue for j in jobs if j.queue is not None}),
        "gpu_types": dict(sorted(types.items())),
        "gpu_type_sets": dict(sorted(sets.items())),
        "time_span": f"{days}d {rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}",
        "dl_jobs": sum(1 for j in jobs if j.kind == "dl"),
        "tasks_jobs": sum(1 for j in jobs if j.kind == "tasks"),
        "tasks": sum(len(j.tasks) for j in jobs),
        "gpus_requested": float(sum(j.gpus for j in jobs)),
        "gpus_per_job": dict(sorted(gpus_hist.items())),
        "first_submit_s": first,
        "last_submit_s": last,
        "span_s": last - first,
        "jobs_with_duration": with_duration,
        "gpu_seconds": gpu_seconds,
        "jobs_with_iterations": sum(1 for j in jobs if j.iterations is not None),
        "jobs_with_deadline": sum(1 for j in jobs if j.deadline_s is not None),
        "jobs_with_recorded_start": sum(1 for j in jobs if j.recorded_start_s is not None),
        "models": dict(sorted(models.items())),
    }


__all__ = ["load_workload", "save_workload", "describe_workload", "FORMATS", "ENCODINGS"]
