"""Saved estimators: a model file and its provenance sidecar, found by name in the user's cache.

    <cache>/estimators/NAME.joblib   the fitted RequirementEstimator (joblib)
    <cache>/estimators/NAME.json     its provenance: schema, name, created, source (kind, name, rows,
                                     jobs, reference cluster), seed, tolerance, features, targets,
                                     train / test rows, metrics on the held-out jobs, library
                                     versions, and the sha256 of the model file

<cache> is $DLSCHED_CACHE_DIR, else $XDG_CACHE_HOME/dlsched, else ~/.cache/dlsched. A model is
named by a NAME (letters, digits, '.', '_', '-': a file of the cache) or by a path ending in
.joblib (its sidecar beside it). Both files are written private to their owner (0600 from
creation on) and atomically (a temporary file in the same folder, then a rename): a reader sees
the old pair or the new one. Writing the model first and the sidecar last, and checking the
model's sha256 against the sidecar's on load, means a half-replaced pair is refused rather than
used. joblib unpickles: load only models you trained (the cache is yours alone).

The default model, `default`, is not shipped (a forest of 100 trees): the first use
trains it on `synthetic:jobs=2000` (seed 0, tolerance 5 %, the reference cluster liquid-20), in
a few seconds (3 s on 2 cores), and saves it in the cache (about 2 MB compressed).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import os
import platform
import re
from pathlib import Path

from dlsched.core.errors import DlschedError
from dlsched.estimate.data import SYNTHETIC, SYNTHETIC_JOBS, load_data
from dlsched.estimate.label import TARGETS, Oracle
from dlsched.estimate.model import FEATURES, RequirementEstimator, evaluate

SCHEMA = "dlsched-estimator"
VERSION = 1
DEFAULT = "default"
TEST_FRACTION = 0.2
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def cache_dir() -> Path:
    base = os.environ.get("DLSCHED_CACHE_DIR")
    if base:
        return Path(base).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "dlsched"


def model_path(ref: str | Path) -> Path:
    """The model file a name or a path names."""
    s = str(ref)
    if s.endswith(".joblib"):
        return Path(s).expanduser()
    if not _NAME.match(s):
        raise DlschedError(f"estimator name {s!r}: use letters, digits, '.', '_' and '-', "
                           "or give a path ending in .joblib")
    return cache_dir() / "estimators" / f"{s}.joblib"


def sidecar_path(model: Path) -> Path:
    return model.with_suffix(".json")


def write_private(path: Path, data: bytes) -> None:
    """`data` into `path`, readable by its owner only, atomically (module docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)                 # whatever the umask was
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def versions() -> dict:
    import joblib
    import numpy
    import sklearn

    import dlsched
    return {"dlsched": dlsched.__version__, "scikit-learn": sklearn.__version__, "numpy": numpy.__version__,
            "joblib": joblib.__version__, "python": platform.python_version()}


def train(source: str, *, seed: int = 0, tolerance: float | None = None, cluster: str | None = None,
          n_trees: int | None = None) -> tuple[RequirementEstimator, dict]:
    """Fit on the training part of `source` (data.load_data) and score on its held-out jobs;
    returns the estimator and its provenance (without the file's sha256)."""
    oracle = Oracle(**{k: v for k, v in (("cluster", cluster), ("tol", tolerance)) if v is not None})
    data = load_data(source, seed=seed, oracle=oracle)
    train_set, test_set = data.split(TEST_FRACTION, seed)
    est = RequirementEstimator(seed, **({"n_trees": n_trees} if n_trees else {})).fit(train_set)
    prov = {"schema": SCHEMA, "version": VERSION,
            "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "source": data.source, "rows": len(data), "train_rows": len(train_set),
            "test_rows": len(test_set), "seed": seed, "tolerance": oracle.tol,
            "features": list(FEATURES), "targets": list(TARGETS), "n_trees": est.n_trees,
            "metrics": evaluate(est, test_set), "versions": versions()}
    return est, prov


def save(est: RequirementEstimator, ref: str | Path, provenance: dict) -> Path:
    """Write the model and its sidecar (module docstring); returns the model's path."""
    import joblib
    path = model_path(ref)
    buf = io.BytesIO()
    joblib.dump(est, buf, compress=3)
    data = buf.getvalue()
    side = {**provenance, "name": path.stem, "model_file": path.name,
            "sha256": hashlib.sha256(data).hexdigest()}
    write_private(path, data)
    write_private(sidecar_path(path), (json.dumps(side, indent=2) + "\n").encode())
    return path


def load(ref: str | Path = DEFAULT) -> tuple[RequirementEstimator, dict]:
    """The estimator a name or path names, and its provenance; `default` is trained on first use."""
    path = model_path(ref)
    if str(ref) == DEFAULT and not path.exists():
        est, prov = train(f"{SYNTHETIC}:jobs={SYNTHETIC_JOBS}")
        save(est, DEFAULT, prov)
    side = sidecar_path(path)
    if not path.is_file():
        raise DlschedError(f"estimator {ref}: no model at {path} (train one: dlsched estimator train)")
    try:
        prov = json.loads(side.read_text())
    except FileNotFoundError:
        raise DlschedError(f"{path}: its provenance sidecar {side.name} is missing") from None
    except ValueError as e:
        raise DlschedError(f"{side}: not valid JSON ({e})") from None
    if not isinstance(prov, dict) or prov.get("schema") != SCHEMA:
        raise DlschedError(f"{side}: not a dlsched estimator sidecar")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != prov.get("sha256"):
        raise DlschedError(f"{path}: does not match the sha256 in {side.name} (replaced or damaged); retrain it")
    import joblib
    est = joblib.load(io.BytesIO(data))
    if not isinstance(est, RequirementEstimator):
        raise DlschedError(f"{path}: not a dlsched requirement estimator")
    return est, prov
