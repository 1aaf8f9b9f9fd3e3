"""Any table, read through a column map: `--map submit=ts,gpus=num_gpu,queue=vc` or `--map FILE.yaml`
(a mapping of the same names to columns, e.g. `submit: ts`), so that an unknown CSV needs no code.

| name     | column holds                                              | JobSpec                    |
| ---      | ---                                                       | ---                        |
| submit   | submission time (required)                                | submit_time_s              |
| duration | run time, seconds (else end - start)                      | duration_s                 |
| gpus     | GPUs (default 1): a whole number, or a fraction below 1   | workers x 1 GPU, or 1 worker with the fraction |
| user     | owner                                                     | user                       |
| queue    | virtual cluster / account / partition                     | queue                      |
| job_id   | job id (default: `job-<i>`, i the 0-based row)            | job_id                     |
| gpu_type | GPU type                                                  | gpu_type                   |
| start, end | when it really started and ended                        | recorded_start_s, recorded_end_s |
| deadline | absolute deadline on the submit clock                     | deadline_s                 |

A time column may hold seconds (numbers) or timestamps (ISO 8601, `YYYY-MM-DD HH:MM:SS`); every
time column of a file must be of the same kind. Times become seconds from the earliest
submission. Columns not mapped go to `extra`. The delimiter is `|` when the header has one, else
`,`. Dropped (counted): rows with 0 GPUs (CPU jobs) and rows with no run time (no duration and
no start and end). Bad rows: a time that does not parse, a negative GPU count (or a fraction
above 1), a duration that is not a number >= 0; a mapped column the file lacks is an error at
line 1.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dlsched.core.errors import DlschedError, InputError
from dlsched.workload.formats import common as c

NAME = "mapped"
NAMES = ("submit", "duration", "gpus", "user", "queue", "job_id", "gpu_type", "start", "end", "deadline")
TIMES = ("submit", "start", "end", "deadline")


def parse_map(spec: str | dict) -> dict[str, str]:
    """{dlsched name: file column} from `a=b,c=d`, a YAML file of such pairs, or a dict."""
    where = "--map"
    if isinstance(spec, dict):
        raw = spec
    elif spec.strip().lower().endswith((".yaml", ".yml")) or Path(spec).is_file():
        from dlsched.core.yamlio import load_yaml_text, read_text_bounded
        where = f"--map {spec}"
        try:
            raw = load_yaml_text(read_text_bounded(spec, 1 << 20, "--map file"), file=spec)
        except OSError as e:
            raise DlschedError(f"{where}: cannot read ({e.strerror or e})") from None
        if not isinstance(raw, dict):
            raise DlschedError(f"{where}: expected a mapping of names to columns (submit: ts, ...)")
    else:
        raw = {}
        for part in (p for p in spec.split(",") if p.strip()):
            name, eq, col = part.partition("=")
            if not eq:
                raise DlschedError(f"{where}: expected name=column, got {part.strip()!r}")
            raw[name.strip()] = col.strip()
    out: dict[str, str] = {}
    for name, col in raw.items():
        name = str(name).strip()
        if name not in NAMES:
            raise DlschedError(f"{where}: unknown name {name!r} (names: {', '.join(NAMES)})")
        if col is None or not str(col).strip():
            raise DlschedError(f"{where}: {name}: give a column name")
        out[name] = str(col).strip()
    if "submit" not in out:
        raise DlschedError(f"{where}: submit=COLUMN is required")
    if "duration" not in out and not ("start" in out and "end" in out):
        raise DlschedError(f"{where}: give duration=COLUMN, or start=COLUMN and end=COLUMN")
    return out


def read(frame, lines: np.ndarray, mapping: dict[str, str], *, file=None) -> c.Trace:
    have = list(frame.columns)
    for name, col in mapping.items():
        if col not in have:
            raise InputError(f"--map {name}={col}: no such column (header has: {', '.join(map(str, have))})",
                             file=file, line=1, field=col)
    n = len(frame)
    checks, t, kinds = [], {}, {}
    for name in TIMES:
        if name in mapping:
            col = mapping[name]
            t[name], kinds[name] = c.times(frame, col)
            checks.append((col, c.bad_time(t[name], c.blank(frame, col), optional=name != "submit"),
                           "expected seconds or a time (ISO 8601, YYYY-MM-DD HH:MM:SS)"))
    dur = np.full(n, np.nan)
    if "duration" in mapping:
        col = mapping["duration"]
        dur = c.numbers(frame, col)
        checks.append((col, c.bad_number(dur, c.blank(frame, col), optional=True), "expected seconds >= 0"))
    gpus = np.ones(n)
    if "gpus" in mapping:
        col = mapping["gpus"]
        gpus = c.numbers(frame, col)
        with np.errstate(invalid="ignore"):
            frac = (gpus > 1) & (gpus != np.floor(gpus))
        checks.append((col, c.bad_number(gpus, c.blank(frame, col)) | frac,
                       "expected GPUs >= 0: a whole number, or a fraction below 1"))
    if "job_id" in mapping:
        col = mapping["job_id"]
        checks.append((col, (frame[col].astype(str).str.strip() == "").to_numpy(), "expected a job id"))
    c.first_bad(checks, frame, lines, file)
    clocks = {name for name, k in kinds.items() if k}
    if clocks and len(clocks) < len(kinds) and n:
        name = sorted(set(kinds) - clocks)[0]
        raise InputError(f"--map: {name}={mapping[name]} holds numbers while {sorted(clocks)[0]} holds timestamps; "
                         f"give every time column in one kind", file=file, line=int(lines[0]), field=mapping[name])
    if "start" in t and "end" in t:
        dur = np.where(np.isnan(dur), np.maximum(t["end"] - t["start"], 0.0), dur)
    dropped: dict[str, int] = {}
    cpu = gpus == 0
    no_run = ~cpu & np.isnan(dur)
    c.count(dropped, "0 GPUs (CPU job)", cpu)
    c.count(dropped, "no run time", no_run)
    keep = ~(cpu | no_run)
    rest = [x for x in frame.columns if x not in mapping.values()]
    f = c.kept(frame, keep, [mapping[k] for k in ("job_id", "user", "queue", "gpu_type") if k in mapping] + rest)
    g = gpus[keep]
    whole = g >= 1
    ids = (f[mapping["job_id"]].astype(str).str.strip().tolist() if "job_id" in mapping
           else [f"job-{i}" for i in np.flatnonzero(keep).tolist()])
    col = {name: (f[mapping[name]] if name in mapping else None) for name in ("user", "queue", "gpu_type")}
    pairs = c.build_jobs(origin=c.origin(t["submit"]),
        job_ids=ids, submit=t["submit"][keep], duration=dur[keep], workers=np.where(whole, g, 1.0),
        gpus_per_worker=np.where(whole, 1.0, g), lines=lines[keep], users=col["user"], queues=col["queue"],
        gpu_types=col["gpu_type"], start=t["start"][keep] if "start" in t else None,
        end=t["end"][keep] if "end" in t else None, deadline=t["deadline"][keep] if "deadline" in t else None,
        extra=c.extra_json(f, rest))
    return c.Trace(NAME, pairs, dropped)
