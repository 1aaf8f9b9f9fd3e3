"""Throughput tables: steps/s of a job type per (GPU count, GPU type), alone and sharing a GPU.

A table answers first; the analytic speed model (`speed.py`) fills what it lacks. `steps_per_s`,
`pair` and `has` are one dict lookup on a hit (the simulator's hot path); None: no entry (the
job cannot run there). Values are steps/s of the whole job at that GPU count. GPU types are
dlsched's names, upper-case as nodes carry them (`cluster/topology.py`): the file's `v100` is
`V100` (a lookup in another case is retried upper-cased on a miss).

Two file forms (`ThroughputTable.load(path)`); bad input raises one `ConfigError` naming the
file, the CSV line or JSON key, and the field:

- **Gavel JSON** (`.json`, `.json.gz`), the shape of Gavel's `simulation_throughputs.json`
  (stanford-futuredata/gavel, MIT): `{worker_type: {"('<job_type>', <gpus>)": {"null": T_alone,
  "('<other>', <gpus>)": [T_self, T_other]}}}`. Keys are parsed by a strict regex (Python's
  tuple repr: single quotes, one space), never eval'd; a partner has the key's GPU count. The
  `*_unconsolidated` worker types are left out: Gavel's simulator never reads them (only the
  cluster spec's k80, p100, v100). Our one addition: an optional top-level
  `"reference": "<GPU type>"`; without it `reference` is None.
- **CSV** (ours): header `job_type,gpus,gpu_type,steps_per_s`, optionally plus
  `partner,partner_steps_per_s`; one row per entry. A row with an empty `partner` is the job
  alone; a row with one is the pair sharing a GPU (`steps_per_s` the job's own steps/s,
  `partner_steps_per_s` the partner's). `#` lines are comments; `# reference: V100` sets
  `reference`. Lines count as in the file (header included); a field may be quoted but not
  span lines. `ThroughputTable.to_csv` writes this form (floats exact).

Bundled tables:

- `gavel`: `dlsched/data/gavel/simulation_throughputs.json.gz`, Gavel's file unchanged (K80,
  P100, V100; 26 job types at 1 GPU, 19 at 2/4/8). `reference` V100: Gavel's trace generator
  sets a job's total steps = duration x its V100 throughput.
- `pollux-t4`: built at load from the Pollux measurements that ship in `dlsched/data/pollux`.
  job_type = application (bert, cifar10, ...), gpu_type T4, gpus = replicas of each single-node
  placement in its placements.csv (1-4), steps/s = 1 / `measured.measured_iter_time(app,
  (gpus,), ZOO[app].default_batch x gpus)` (the speed model's batch for a job without one;
  Pollux's batch plan applies: ncf's 1024 on 1 GPU takes one accumulation micro-step).
  `reference` T4 (the only type measured).

`load_throughputs(ref)` caches tables per bundled name or resolved path (and mtime, size).
"""
from __future__ import annotations

import csv
import gzip
import json
import math
import re
from pathlib import Path

from dlsched.core.errors import ConfigError

_KEY = re.compile(r"\('([^'\\]+)', ([1-9][0-9]*)\)")   # Gavel's "('<job_type>', <gpus>)"
_DATA = Path(__file__).resolve().parent.parent / "data"
BUNDLED: dict[str, str] = {"gavel": "gavel/simulation_throughputs.json.gz", "pollux-t4": ""}
CSV_COLUMNS = ("job_type", "gpus", "gpu_type", "steps_per_s", "partner", "partner_steps_per_s")
_REQUIRED = CSV_COLUMNS[:4]


def _gpu(name: str) -> str:
    return str(name).strip().upper()


class ThroughputTable:
    """Steps/s per (job type, GPUs, GPU type) alone, and per pair sharing a GPU."""

    __slots__ = ("_alone", "_canon", "_counts", "_gpu_types", "_pairs", "name", "reference")

    def __init__(self, name: str, reference: str | None,
                 alone: dict[tuple[str, int, str], float],
                 pairs: dict[tuple[str, int, str, str], tuple[float, float]] | None = None):
        self.name, self.reference = name, reference
        self._alone, self._pairs = alone, pairs or {}
        counts: dict[str, set[int]] = {}
        for key in (*self._alone, *self._pairs):
            counts.setdefault(key[0], set()).add(key[1])
        self._gpu_types = sorted({key[-1] for key in (*self._alone, *self._pairs)})
        self._counts = {j: sorted(c) for j, c in counts.items()}
        # job types are matched case-insensitively on a miss (the common schema lower-cases a
        # workload's model names: "resnet-50 (batch size 64)" is Gavel's "ResNet-50 (batch size 64)")
        self._canon = {j.lower(): j for j in self._counts}

    def _job(self, job_type: str) -> str:
        return job_type if job_type in self._counts else self._canon.get(str(job_type).lower(), job_type)

    @classmethod
    def load(cls, ref: str | Path) -> ThroughputTable:
        """A bundled name (`gavel`, `pollux-t4`) or a file (.json, .json.gz, .csv)."""
        if isinstance(ref, str) and ref in BUNDLED:
            return _pollux_t4() if ref == "pollux-t4" else _read_json(_DATA / BUNDLED[ref], name=ref, reference="V100")
        path, low = Path(ref), str(ref).lower()
        if not path.is_file():
            raise ConfigError(str(ref), f"no such file, and not a bundled table ({', '.join(BUNDLED)})")
        if low.endswith((".json", ".json.gz")):
            return _read_json(path, name=str(ref))
        if low.endswith(".csv"):
            return _read_csv(path)
        raise ConfigError(str(ref), "unknown table format: give a .json, .json.gz or .csv file")

    # -- lookups (hot path: one dict lookup on a hit) ----------------------------------------------
    def steps_per_s(self, job_type: str, gpus: int, gpu_type: str) -> float | None:
        """Steps/s of the whole job alone on `gpus` GPUs of `gpu_type`; None: no entry."""
        v = self._alone.get((job_type, gpus, gpu_type))
        if v is None:
            return self._alone.get((self._job(job_type), gpus, _gpu(gpu_type)))
        return v

    def pair(self, job_type: str, gpus: int, other: str, gpu_type: str) -> tuple[float, float] | None:
        """(self, other) steps/s of `job_type` sharing its GPUs with `other` (same GPU count)."""
        v = self._pairs.get((job_type, gpus, other, gpu_type))
        if v is None:
            return self._pairs.get((self._job(job_type), gpus, self._job(other), _gpu(gpu_type)))
        return v

    def has(self, job_type: str | None) -> bool:
        return job_type is not None and (job_type in self._counts or str(job_type).lower() in self._canon)

    def job_types(self) -> list[str]:
        return sorted(self._counts)

    def gpu_types(self) -> list[str]:
        return list(self._gpu_types)

    def gpu_counts(self, job_type: str) -> list[int]:
        return list(self._counts.get(self._job(job_type), ()))

    def __repr__(self) -> str:
        return f"ThroughputTable({self.name!r}, reference={self.reference!r}, gpu types {self._gpu_types})"

    def to_csv(self, path: str | Path) -> None:
        """Write the table in the CSV form (floats as repr: a reload gives the same values)."""
        with Path(path).open("w", newline="", encoding="utf-8") as fh:
            if self.reference is not None:
                fh.write(f"# reference: {self.reference}\n")
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(CSV_COLUMNS if self._pairs else _REQUIRED)
            for (j, g, t), v in sorted(self._alone.items()):
                w.writerow([j, g, t, repr(v)] + (["", ""] if self._pairs else []))
            for (j, g, o, t), (a, b) in sorted(self._pairs.items()):
                w.writerow([j, g, t, repr(a), o, repr(b)])


# -- readers --------------------------------------------------------------------------------------
def _number(v: object, text: bool = False) -> float | None:
    """v (a JSON number, or CSV text when `text`) as a finite float >= 0, or None."""
    try:
        x = float(v) if isinstance(v, str if text else (int, float)) and not isinstance(v, bool) else math.nan
    except (ValueError, OverflowError):
        return None
    return x if math.isfinite(x) and x >= 0 else None


def _read_json(path: Path, *, name: str, reference: str | None = None) -> ThroughputTable:
    file = str(path)

    def bad(where: str, why: str) -> ConfigError:
        return ConfigError(where, why, file=file, line=0)   # line=0: no line lookup (not YAML)

    def unique(items: list) -> dict:                      # JSON objects: a key given twice is an error
        if len(out := dict(items)) < len(items):
            dup = next(k for i, (k, _) in enumerate(items) if any(k == j for j, _ in items[:i]))
            raise bad(dup, "duplicate key (an entry given twice)")
        return out

    try:
        raw = path.read_bytes()
        data = json.loads(gzip.decompress(raw) if file.lower().endswith(".gz") else raw,
                          object_pairs_hook=unique)
    except (OSError, EOFError) as e:             # gzip.BadGzipFile is an OSError
        raise bad("file", f"cannot read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise ConfigError("file", f"not JSON ({e.msg}, column {e.colno})", file=file, line=e.lineno) from None
    except UnicodeDecodeError as e:
        raise bad("file", f"not JSON (not UTF-8 text: {e.reason})") from None
    if not isinstance(data, dict):
        raise bad("file", "must be a JSON object {worker_type: {\"('<job_type>', <gpus>)\": {...}}}")
    if data.get("schema") == "dlsched-calibration":
        return _from_calibration(data, name, file, bad)
    alone: dict[tuple[str, int, str], float] = {}
    pairs: dict[tuple[str, int, str, str], tuple[float, float]] = {}
    parsed: dict[str, tuple[str, int] | None] = {}   # partner keys recur: parse each once
    types: set[str] = set()
    for wt, entries in data.items():
        if wt == "reference":
            if not isinstance(entries, str) or not entries.strip():
                raise bad("reference", f"must be a GPU type name, got {entries!r}")
            reference = _gpu(entries)
            continue
        if wt.endswith("_unconsolidated"):
            continue
        gt = _gpu(wt)
        if not gt or not isinstance(entries, dict):
            raise bad(wt, "must be a worker type naming an object of job keys")
        if gt in types:
            raise bad(wt, f"duplicate entry: worker type {gt} given twice")
        types.add(gt)
        for jk, row in entries.items():
            for k in (jk, *row) if isinstance(row, dict) else (jk,):
                if k not in parsed:
                    m = _KEY.fullmatch(k)
                    parsed[k] = (m.group(1), int(m.group(2))) if m else None
            where, job = f"{wt}.{jk}", parsed[jk]
            if job is None:
                raise bad(where, "bad key: expected \"('<job_type>', <gpus>)\"")
            if not isinstance(row, dict):
                raise bad(where, "must be an object {\"null\": steps/s, \"('<other>', <gpus>)\": [self, other]}")
            for pk, v in row.items():
                if pk == "null":
                    if (x := _number(v)) is None:
                        raise bad(f"{where}.null", f"throughput must be a number >= 0, got {v!r}")
                    alone[(job[0], job[1], gt)] = x
                    continue
                if (partner := parsed[pk]) is None or partner[1] != job[1]:
                    raise bad(f"{where}.{pk}", f"bad key: expected \"null\" or \"('<job_type>', {job[1]})\"")
                xs = [_number(x) for x in v] if isinstance(v, list) and len(v) == 2 else [None]
                if None in xs:
                    raise bad(f"{where}.{pk}", f"must be [self, other] steps/s, numbers >= 0, got {v!r}")
                pairs[(job[0], job[1], partner[0], gt)] = (xs[0], xs[1])
    return ThroughputTable(name, reference, alone, pairs)


def _read_csv(path: Path) -> ThroughputTable:
    file = str(path)

    def bad(field: str, why: str, line: int) -> ConfigError:
        return ConfigError(field, why, file=file, line=line)

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise bad("file", f"not CSV (not UTF-8 text: {e.reason})", 1) from None
    reference, cols = None, {}
    alone: dict[tuple[str, int, str], float] = {}
    pairs: dict[tuple[str, int, str, str], tuple[float, float]] = {}
    seen: dict[tuple, int] = {}
    for n, text in enumerate(lines, 1):
        if m := re.fullmatch(r"#\s*reference\s*:\s*(\S*)\s*", s := text.strip()):
            if not m.group(1) or reference is not None:
                raise bad("reference", "give one '# reference: <GPU type>' line", n)
            reference = _gpu(m.group(1))
        if not s or s.startswith("#"):
            continue
        try:
            row = [f.strip() for f in next(csv.reader([text], strict=True))]
        except csv.Error as e:
            raise bad("file", f"not CSV ({e})", n) from None
        if not cols:                                  # the header
            for c in row:
                if c not in CSV_COLUMNS or c in cols:
                    raise bad(c, "column named twice" if c in cols else
                              f"unknown column (allowed: {', '.join(CSV_COLUMNS)})", n)
                cols[c] = len(cols)
            for c in _REQUIRED + (CSV_COLUMNS[4:] if len(cols) > 4 else ()):
                if c not in cols:
                    raise bad(c, f"missing column (header has: {', '.join(row)})", n)
            continue
        if len(row) != len(cols):
            raise bad("file", f"expected {len(cols)} fields, got {len(row)}", n)
        f = {c: row[i] for c, i in cols.items()}
        if missing := next((c for c in ("job_type", "gpu_type") if not f[c]), None):
            raise bad(missing, "is required", n)
        if not re.fullmatch(r"[1-9][0-9]*", f["gpus"]):
            raise bad("gpus", f"must be an integer >= 1, got {f['gpus']!r}", n)
        partner, other = f.get("partner", ""), f.get("partner_steps_per_s", "")
        if bool(partner) != bool(other):
            raise bad("partner_steps_per_s" if partner else "partner",
                      "is required in a pair row (partner and partner_steps_per_s)", n)
        for c in ("steps_per_s", "partner_steps_per_s") if partner else ("steps_per_s",):
            if _number(f[c], text=True) is None:
                raise bad(c, f"must be a number >= 0, got {f[c]!r}", n)
        g, t, x = int(f["gpus"]), _gpu(f["gpu_type"]), float(f["steps_per_s"])
        k = (f["job_type"], g, partner, t) if partner else (f["job_type"], g, t)
        if k in seen:
            raise bad("job_type", f"duplicate entry {k} (first on line {seen[k]})", n)
        seen[k] = n
        (pairs if partner else alone)[k] = (x, float(other)) if partner else x
    if not seen:
        raise bad("file", "no entries (expected the header " + ",".join(_REQUIRED) + " and rows)",
                  len(lines) or 1)
    return ThroughputTable(file, reference, alone, pairs)


def _pollux_t4() -> ThroughputTable:
    """The `pollux-t4` table from the shipped Pollux measurements (rule: module docstring)."""
    from dlsched.workload import measured
    from dlsched.workload.models import ZOO
    (t4,) = measured.MEASURED_GPU_TYPES
    alone = {}
    for app in measured.POLLUX_APPS:
        batch = ZOO[app].default_batch
        for g in sorted(p[0] for p in measured.app_profile(app).rows if len(p) == 1):
            alone[(app, g, t4)] = 1.0 / measured.measured_iter_time(app, (g,), batch * g)
    return ThroughputTable("pollux-t4", t4, alone)


_CACHE: dict[tuple, ThroughputTable] = {}


def load_throughputs(ref: str | Path) -> ThroughputTable:
    """ThroughputTable.load, cached per bundled name or per resolved path (and mtime, size)."""
    key: tuple = ("bundled", ref)
    if not (isinstance(ref, str) and ref in BUNDLED):
        if not (p := Path(ref).resolve()).is_file():
            return ThroughputTable.load(ref)      # raises the missing-file error
        key = (str(p), p.stat().st_mtime_ns, p.stat().st_size)
    table = _CACHE.get(key)
    if table is None:
        table = _CACHE[key] = ThroughputTable.load(ref)
    return table


def _from_calibration(data: dict, name: str, file: str, bad) -> ThroughputTable:
    """A runtime's calibration file (dlsched.runtime.calibration: what its jobs' steps cost per
    model, GPU type and worker count, measured) as a table: steps/s = 1 / iter_s of each measured
    (model, workers, GPU type). No reference type: durations cannot be read as run times."""
    models = data.get("models")
    if not isinstance(models, dict):
        raise bad("models", "a calibration file must hold `models: {model: {gpu_type: {workers: {...}}}}`")
    alone: dict[tuple[str, int, str], float] = {}
    for model, by_type in models.items():
        for gt, by_n in (by_type or {}).items():
            for n, row in (by_n or {}).items():
                it = row.get("iter_s") if isinstance(row, dict) else None
                if not (isinstance(it, (int, float)) and it > 0 and str(n).isdigit()):
                    raise bad(f"models.{model}.{gt}.{n}", f"must give iter_s > 0 seconds, got {it!r}")
                alone[(str(model), int(n), _gpu(gt))] = 1.0 / float(it)
    if not alone:
        raise bad("models", "no measured step time (run jobs on the runtime first)")
    return ThroughputTable(name, None, alone)
