"""Public trace formats, read as they are (docs/workloads/trace-formats.md has every mapping).

| format     | module        | recognised by                                                     |
| ---        | ---           | ---                                                               |
| elasticflow| elasticflow.py| header job_id, submission_time, duration, num_gpu (ITP, raw or augmented); or Tiresias's columns and ddl |
| tiresias   | tiresias.py   | header job_id, num_gpu, submit_time, duration                     |
| acme       | acme.py       | header job_id, user, gpu_num, submit_time, duration, gpu_time, type |
| helios     | helios.py     | header job_id, vc, gpu_num, submit_time, duration                 |
| openb      | openb.py      | header name, num_gpu, gpu_milli, creation_time, deletion_time     |
| spot       | spot.py       | header job_name, gpu_request, worker_num, submit_time, duration   |
| slurm      | slurm.py      | a `|`-separated header with JobID, Submit, State (sacct --parsable2) |
| swf        | swf.py        | a name ending .swf / .swf.gz, or a first line starting with `;`   |
| pai        | pai.py        | a name starting pai_job_table, or its header (headerless: `--format pai`) |
| philly-raw | philly_raw.py | JSON whose first job has jobid, submitted_time and attempts       |
| mapped     | mapped.py     | `--map` (any CSV or `|` table)                                    |

The dlsched schema, the Philly per-job CSV, Pollux workloads and Gavel traces keep their readers
(`dlsched.workload.readers`, `gavel_trace`); `detect` leaves their files to them. Every reader
returns a `common.Trace`: (line, JobSpec) pairs in file order and the rows it dropped by reason.
"""
from __future__ import annotations

import re
from pathlib import Path

from dlsched.core.errors import DlschedError
from dlsched.workload.formats import (acme, elasticflow, helios, mapped, openb, pai, philly_raw, slurm, spot, swf,
                                      tiresias)
from dlsched.workload.formats.common import Trace
from dlsched.workload.formats.table import head_text, read_table

# header formats, checked in this order: the columns whose presence identifies each (a module's
# SIGNATURES, else its COLUMNS); elasticflow's generator layout is Tiresias's columns and a ddl
HEADER_FORMATS = {m.NAME: m for m in (elasticflow, tiresias, acme, helios, openb, spot, slurm)}
NAMES = ("tiresias", "helios", "acme", "slurm", "swf", "pai", "openb", "spot", "elasticflow", "philly-raw", "mapped")


def _signatures(module) -> tuple[tuple[str, ...], ...]:
    return getattr(module, "SIGNATURES", (module.COLUMNS,))


def _header(head: str) -> tuple[list[str], str]:
    import csv
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    delim = "|" if "|" in first else ","
    return [c.strip() for c in next(csv.reader([first], delimiter=delim), [])], delim


def detect(path: Path) -> str | None:
    """The format of a file from its name and first bytes, or None (the older readers' files and
    anything unknown)."""
    name = path.name.lower()
    if name.endswith((".swf", ".swf.gz")):
        return "swf"
    if name.startswith("pai_job_table"):
        return "pai"
    head = head_text(path)
    text = head.lstrip()
    if text.startswith(";"):
        return "swf"
    if text.startswith("[") or (text.startswith("{") and re.search(r'"attempts"\s*:', head)
                                and re.search(r'"submitted_time"\s*:', head)):
        return "philly-raw"
    if text.startswith("{"):
        return None
    cols, delim = _header(head)
    if delim == ",":
        from dlsched.workload.readers import detect_format
        if detect_format(cols) is not None:
            return None
    if cols[:len(pai.JOB_COLUMNS)] == list(pai.JOB_COLUMNS):
        return "pai"
    for fmt, module in HEADER_FORMATS.items():
        if any(all(c in cols for c in sig) for sig in _signatures(module)):
            return fmt
    return None


def read_trace(path: Path, format: str | None = None, mapping=None) -> Trace:
    """Read `path` as `format` (None: `detect`), or through a column map (`mapped.parse_map`)."""
    file = str(path)
    if mapping is not None:
        if format not in (None, "mapped"):
            raise DlschedError(f"--map reads any table by its columns; it does not go with --format {format}")
        m = mapping if isinstance(mapping, dict) else mapped.parse_map(mapping)
        _, delim = _header(head_text(path))
        frame, lines = read_table(path, delimiter=delim)
        return mapped.read(frame, lines, m, file=file)
    fmt = format or detect(path)
    if fmt is None or fmt not in NAMES:
        raise DlschedError(f"{file}: not a known trace format (formats: {', '.join(NAMES)})")
    if fmt == "mapped":
        raise DlschedError("--format mapped needs --map name=column,...")
    if fmt == "swf":
        frame, lines = swf.load(path)
        return swf.read(frame, lines, file=file)
    if fmt == "philly-raw":
        return philly_raw.read(philly_raw.load(path), file=file)
    if fmt == "pai":
        return pai.read(path)
    module = HEADER_FORMATS[fmt]
    _, delim = _header(head_text(path))
    frame, lines = read_table(path, delimiter=delim)
    return module.read(frame, lines, file=file)


__all__ = ["NAMES", "Trace", "detect", "read_trace"]
