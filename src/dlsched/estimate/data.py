"""Training data of the estimator: jobs (Liquid's features), the vector each user requested, and
the label the law of diminishing marginal utility gives (dlsched.estimate.label).

Three sources, one rule:

- `synthetic:jobs=N` (default 2000): Liquid's offline training. Job parameters are drawn at random
  (model, communication, batch size, iterations, parameter servers) and so is the allocation the
  user asks for (workers, bandwidth); each job is then tried on every GPU count 1 .. MAX_GPUS by
  the speed model (label.Oracle) and labelled.
- a workload file in the common schema whose rows are finished jobs with their measured run time
  in `duration_s` (one row per run: the workers, GPUs per worker and bandwidth it ran with).
- the runtime's SQLite store (`<state dir>/dlsched.db`, or the state dir): its finished jobs, their
  specs, and their step records; a job's execution time is iterations x its median step interval
  (the wall time between consecutive step records of a run, as dlsched.runtime.calibration's
  iter_s; the SDK's own step_s where a job has a single record).

In a history (file or store) the runs of one job - the same model, communication, batch size,
iterations and parameter servers - are grouped: their GPU label is the rule over the GPU counts
they ran with (each count's fastest run), their bandwidth label the rule over the bandwidths of
the runs at that count, their memory the memory model at that count. A job run at one size only
is labelled with that size: a history can only tell what it tried. Every run is a row (its own
request, its job's label), and a held-out split keeps a job's runs together (`Dataset.split`).
"""
from __future__ import annotations

import json
import math
import sqlite3
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dlsched.core.errors import DlschedError, InputError
from dlsched.estimate.label import BANDWIDTH_GRID_GBPS, JobParams, Oracle, gpu_mem_need_gb, smallest_sufficient

SYNTHETIC = "synthetic"
SYNTHETIC_JOBS = 2000
# Models of Liquid's own workload (the `liquid` generator) and Pollux's six applications.
SYNTHETIC_MODELS = ("alexnet", "vgg16", "resnet18", "resnet50", "inception3", "googlenet", "mobilenet",
                    "lstm", "bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
BATCH_MULTIPLES = (1, 2, 3, 4, 6, 8)
SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass
class Dataset:
    """Rows of (job, requested vector, label vector); `groups`: the job each row is a run of."""
    jobs: list[JobParams]
    requested: np.ndarray                 # n x 3: GPUs, GPU memory per GPU (GB), bandwidth per worker
    labels: np.ndarray                    # n x 3, the same units
    groups: np.ndarray                    # n: job key index (rows of one job share it)
    source: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.jobs)

    def take(self, rows: np.ndarray) -> "Dataset":
        return Dataset([self.jobs[i] for i in rows], self.requested[rows], self.labels[rows],
                       self.groups[rows], self.source)

    def split(self, test_fraction: float, seed: int) -> tuple["Dataset", "Dataset"]:
        """(train, held-out test): whole jobs (groups) drawn at random for the test part."""
        keys = np.unique(self.groups)
        if len(keys) < 2:
            raise DlschedError(f"{self.source.get('name', 'data')}: {len(keys)} distinct job(s); "
                               "training and a held-out test need at least 2")
        rng = np.random.default_rng(seed)
        n_test = min(max(int(round(test_fraction * len(keys))), 1), len(keys) - 1)
        test_keys = rng.permutation(keys)[:n_test]
        test = np.isin(self.groups, test_keys)
        return self.take(np.flatnonzero(~test)), self.take(np.flatnonzero(test))


def load_data(ref: str, *, seed: int = 0, oracle: Oracle | None = None) -> Dataset:
    """The dataset a reference names: `synthetic[:jobs=N]`, a workload file, a store or state dir."""
    oracle = oracle or Oracle()
    name, _, params = str(ref).partition(":")
    if name == SYNTHETIC:
        return synthetic(_synthetic_jobs(ref, params), seed, oracle)
    path = Path(ref).expanduser()
    if path.is_dir() and (path / "dlsched.db").is_file():
        path = path / "dlsched.db"
    if not path.exists():
        raise DlschedError(f"{ref}: not '{SYNTHETIC}[:jobs=N]', a workload file, a runtime store or state dir")
    if not path.is_file():
        raise DlschedError(f"{path}: not a file (nor a state dir holding dlsched.db)")
    with path.open("rb") as fh:
        head = fh.read(len(SQLITE_MAGIC))
    if head == SQLITE_MAGIC:
        return from_history(store_runs(path), str(path), "store", oracle)
    return from_history(workload_runs(path), str(path), "workload", oracle)


def _synthetic_jobs(ref: str, params: str) -> int:
    if not params:
        return SYNTHETIC_JOBS
    key, _, value = params.partition("=")
    if key.strip() != "jobs" or not value.strip().isdigit() or int(value) < 2:
        raise DlschedError(f"{ref}: expected {SYNTHETIC}:jobs=N with N >= 2")
    return int(value)


# ----------------------------------------------------------------------------- synthetic
def synthetic(n_jobs: int, seed: int, oracle: Oracle) -> Dataset:
    """Random jobs and random requests, labelled by the oracle (module docstring)."""
    from dlsched.workload.models import get_model
    rng = np.random.default_rng(seed)
    jobs, req, lab = [], [], []
    for _ in range(n_jobs):
        model = SYNTHETIC_MODELS[rng.integers(len(SYNTHETIC_MODELS))]
        ps = int(rng.integers(1, 5)) if rng.random() < 0.5 else 0
        batch = get_model(model).default_batch * int(rng.choice(BATCH_MULTIPLES))
        iterations = float(round(10 ** rng.uniform(2.0, 4.5)))
        workers = int(rng.integers(1, oracle.max_gpus + 1))
        bw = float(rng.choice((0.0,) + BANDWIDTH_GRID_GBPS[:11]))
        job = JobParams(model, "ps" if ps else "allreduce", batch, iterations, ps, workers)
        jobs.append(job)
        req.append((workers, oracle.gpu_mem_gb, bw))
        lab.append(oracle.label(job))
    return Dataset(jobs, np.array(req, dtype=np.float64), np.array(lab, dtype=np.float64),
                   np.arange(n_jobs), {"kind": "synthetic", "name": f"{SYNTHETIC}:jobs={n_jobs}",
                                       "jobs": n_jobs, "reference_cluster": oracle.cluster.name})


# ----------------------------------------------------------------------------- histories
@dataclass(frozen=True)
class Run:
    """One finished run of a job: where it came from, what it ran with, how long it took."""
    where: tuple[str, int | str]          # (file, line) or (store, job id), for error messages
    job: JobParams
    gpus: float
    gpu_share: float                      # GPUs per worker (a whole GPU's memory x this is requested)
    bw_gbps: float
    exec_s: float


def workload_runs(path: Path) -> list[Run]:
    """The runs of a common-schema workload file whose rows carry measured `duration_s`."""
    from dlsched.core.types import Role
    from dlsched.workload.io import load_workload_rows
    file = str(path)
    out = []
    for line, job in load_workload_rows(path, format="schema"):
        def need(value, fld):
            if value is None:
                raise InputError("is required to train the estimator", file=file, line=line, field=fld)
            return value
        if job.kind != "dl":
            raise InputError("the estimator learns from dl jobs only", file=file, line=line, field="kind")
        need(job.model, "model")
        need(job.batch_size, "batch_size")
        exec_s = need(job.duration_s, "duration_s")
        if exec_s <= 0:
            raise InputError("a measured run time must be > 0", file=file, line=line, field="duration_s")
        w = next(t for t in job.tasks if t.role is Role.WORKER)
        if w.gpus <= 0:
            raise InputError("must be > 0 (the estimator sizes GPU jobs)", file=file, line=line,
                             field="gpus_per_worker")
        params = JobParams(job.model, job.comm, int(job.batch_size), float(job.iterations or 0.0),
                           job.num_ps, job.num_workers)
        out.append(Run((file, line), params, job.gpus, w.gpus, w.demand[4], float(exec_s)))
    return out


def store_runs(path: Path) -> list[Run]:
    """The finished jobs of a runtime store (dlsched.runtime.store), read only."""
    file = str(path)
    try:
        db = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise DlschedError(f"{file}: cannot open the store ({e})") from None
    try:
        db.row_factory = sqlite3.Row
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for t in ("jobs", "stats"):
            if t not in tables:
                raise InputError(f"not a dlsched runtime store (no table '{t}')", file=file, field=t)
        jobs = db.execute("SELECT job_id, spec, step FROM jobs WHERE state='done' ORDER BY seq").fetchall()
        out = [_store_run(file, db, r) for r in jobs]
    except sqlite3.Error as e:
        raise DlschedError(f"{file}: cannot read the store ({e})") from None
    finally:
        db.close()
    return [r for r in out if r is not None]


def _store_run(file: str, db, row) -> Run | None:
    """One finished job of the store as a Run; None when it recorded fewer than two steps."""
    job_id = row["job_id"]
    where = f"job {job_id}"
    try:
        spec = json.loads(row["spec"])
    except (TypeError, ValueError):
        raise InputError("spec is not JSON", file=file, line=None, field=f"{where}.spec") from None
    if not isinstance(spec, dict):
        raise InputError("spec is not a mapping", file=file, field=f"{where}.spec")
    steps = db.execute("SELECT step, step_s, time FROM stats WHERE job_id=? ORDER BY step", (job_id,)).fetchall()
    if len(steps) < 2:
        return None
    gaps = [b["time"] - a["time"] for a, b in zip(steps, steps[1:])
            if b["step"] == a["step"] + 1 and b["time"] is not None and a["time"] is not None
            and b["time"] > a["time"]]
    step_s = statistics.median(gaps) if gaps else statistics.median(
        s["step_s"] for s in steps if s["step_s"] is not None)

    def num(key, default=None, integer=False):
        v = spec.get(key, default)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not ok or (integer and v != int(v)) or v < 0:
            raise InputError(f"expected a number >= 0, got {v!r}", file=file, field=f"{where}.spec.{key}")
        return int(v) if integer else float(v)
    workers = num("workers", 1, True)
    ps = num("ps", 0, True)
    gpw = num("gpus_per_worker", 1.0)
    batch = num("batch_size", None, True)
    iterations = float(spec.get("iterations") or row["step"] or len(steps))
    model = str(spec.get("model") or spec.get("name") or "")
    params = JobParams(model, "ps" if ps else "allreduce", batch, iterations, ps, workers)
    return Run((file, job_id), params, workers * gpw, gpw, 0.0, iterations * float(step_s))


def _key(job: JobParams) -> tuple:
    return (job.model, job.comm, job.batch_size, job.iterations, job.num_ps)


def from_history(runs: list[Run], name: str, kind: str, oracle: Oracle) -> Dataset:
    """Label each job of a history by its own runs (module docstring), with the oracle's tolerance
    and its GPUs' memory."""
    if not runs:
        raise DlschedError(f"{name}: no finished runs to learn from")
    tol = oracle.tol
    keys: dict[tuple, list[Run]] = {}
    for r in runs:
        keys.setdefault(_key(r.job), []).append(r)
    labels: dict[tuple, tuple[float, float, float]] = {}
    for k, rs in keys.items():
        sizes = sorted({r.gpus for r in rs})
        n = smallest_sufficient(sizes, [min(r.exec_s for r in rs if r.gpus == g) for g in sizes], tol)
        at_n = [r for r in rs if r.gpus == n]
        bw = smallest_sufficient([r.bw_gbps for r in at_n], [r.exec_s for r in at_n], tol)
        mem = min(gpu_mem_need_gb(k[0], math.ceil(k[2] / max(n, 1.0))), oracle.gpu_mem_gb)
        labels[k] = (n, mem, bw)
    index = {k: i for i, k in enumerate(keys)}
    return Dataset([r.job for r in runs],
                   np.array([(r.gpus, r.gpu_share * oracle.gpu_mem_gb, r.bw_gbps) for r in runs]),
                   np.array([labels[_key(r.job)] for r in runs]),
                   np.array([index[_key(r.job)] for r in runs]),
                   {"kind": kind, "name": name, "runs": len(runs), "jobs": len(keys),
                    "reference_cluster": oracle.cluster.name})
