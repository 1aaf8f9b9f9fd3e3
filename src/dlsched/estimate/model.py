"""Liquid's requirement estimator: a random forest from a job's type and key parameters to its
requirement vector <N x GPU, GMem, Bandwidth> (seed 003), with the two baselines its figure is
read against, and the metrics.

Features (FEATURES), one row per job: the model as a one-hot over the models seen in training (a
model never seen is all zeros), whether it trains with parameter servers, then batch_size,
iterations, num_ps and num_workers as numbers (num_workers: what the user asked for). The forest
(scikit-learn's RandomForestRegressor, multi-output, n_jobs=1, seeded) predicts the three targets
at once.

Baselines, as in Liquid's figure:
- `linear`: ordinary least squares on the same features (fitted on the same training rows);
- `request`: the user's own request taken as the estimate (GPUs asked for, a whole GPU's memory
  per GPU, the bandwidth reserved per worker).

Metrics per target on held-out jobs: RMSE (smaller is better) and R^2 (larger is better; 1 is
perfect, 0 is no better than the mean, negative is worse), plus R^2 averaged over the targets.
"""
from __future__ import annotations

import numpy as np

from dlsched.estimate.data import Dataset
from dlsched.estimate.label import TARGETS, JobParams

FEATURES = ("model", "comm", "batch_size", "iterations", "num_ps", "num_workers")
METHODS = ("forest", "linear", "request")
N_TREES = 100


def encode(jobs: list[JobParams], vocab: tuple[str, ...]) -> np.ndarray:
    """The feature matrix of `jobs` (module docstring)."""
    col = {m: i for i, m in enumerate(vocab)}
    X = np.zeros((len(jobs), len(vocab) + 5), dtype=np.float64)
    for r, j in enumerate(jobs):
        if j.model in col:
            X[r, col[j.model]] = 1.0
        X[r, len(vocab):] = (j.comm == "ps", j.batch_size, j.iterations, j.num_ps, j.num_workers)
    return X


class RequirementEstimator:
    """The forest and the linear baseline, fitted on the same rows."""

    def __init__(self, seed: int = 0, n_trees: int = N_TREES):
        self.seed = int(seed)
        self.n_trees = int(n_trees)
        self.vocab: tuple[str, ...] = ()
        self.forest = None
        self.linear = None

    def fit(self, data: Dataset) -> "RequirementEstimator":
        from sklearn.ensemble import RandomForestRegressor
        from sklearn.linear_model import LinearRegression
        self.vocab = tuple(sorted({j.model for j in data.jobs}))
        X = encode(data.jobs, self.vocab)
        self.forest = RandomForestRegressor(n_estimators=self.n_trees, random_state=self.seed, n_jobs=1)
        self.forest.fit(X, data.labels)
        self.linear = LinearRegression().fit(X, data.labels)
        return self

    def predict(self, jobs: list[JobParams], method: str = "forest") -> np.ndarray:
        """n x 3 estimates (GPUs, GPU memory GB, bandwidth Gbps) by `method` (forest or linear)."""
        if self.forest is None:
            raise ValueError("the estimator is not fitted")
        reg = {"forest": self.forest, "linear": self.linear}[method]
        return np.asarray(reg.predict(encode(jobs, self.vocab)), dtype=np.float64).reshape(len(jobs), -1)


def scores(y: np.ndarray, pred: np.ndarray) -> dict:
    """RMSE and R^2 per target, and R^2 averaged over the targets."""
    out = {}
    r2s = []
    for i, t in enumerate(TARGETS):
        err = pred[:, i] - y[:, i]
        ss_tot = float(((y[:, i] - y[:, i].mean()) ** 2).sum())
        r2 = 1.0 - float((err ** 2).sum()) / ss_tot if ss_tot > 0 else (1.0 if not err.any() else 0.0)
        out[t] = {"rmse": float(np.sqrt((err ** 2).mean())), "r2": r2}
        r2s.append(r2)
    out["mean_r2"] = float(np.mean(r2s))
    return out


def evaluate(est: RequirementEstimator, data: Dataset) -> dict:
    """method -> scores on `data`: the forest, the linear baseline and the users' requests."""
    return {"forest": scores(data.labels, est.predict(data.jobs, "forest")),
            "linear": scores(data.labels, est.predict(data.jobs, "linear")),
            "request": scores(data.labels, data.requested)}
