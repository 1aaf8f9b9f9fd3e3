"""Training-loss curves of DL jobs, for convergence estimation (Optimus, seed 001).

Optimus (Peng et al., EuroSys 2018) estimates how many steps a job still needs by fitting its
observed training loss to

    loss(k) = 1 / (beta0 * k + beta1) + beta2          (k = steps done; beta >= 0)

and solving for the step where the job converges. The simulator gives every iteration-based DL
job such a curve, so that the estimate has something to fit:

- per model (the zoo's names, workload/models.py): the loss at step 0, L0, and the floor the
  loss tends to, beta2 (`CURVES`; `DEFAULT_CURVE` for a model not listed). Values are ours,
  chosen to be typical: classification starts at ln(classes) (ImageNet 6.9, CIFAR-10 2.3),
  language models at ln(vocabulary); floors are typical final training losses.
- convergence criterion (documented, shared by the simulator and the estimator): a job has
  converged at the first step K where its excess loss over the floor is at most
  CONVERGED_FRAC (5 %) of its excess at step 0:

      loss(K) - beta2 <= CONVERGED_FRAC * (L0 - beta2)

  With beta1 = 1 / (L0 - beta2) this gives K = beta1 * (1 / CONVERGED_FRAC - 1) / beta0, so a
  job's true curve takes beta0 = beta1 * (1 / CONVERGED_FRAC - 1) / iterations: it converges
  exactly at its total iterations (the simulator's job length).
- noise: the observed loss is loss(k) * (1 + NOISE_REL * z), z standard normal from a hash of
  (crc32(job_id), round(k)) (two splitmix64 uniforms, Box-Muller): the same job at the same step
  always reports the same loss, so runs are deterministic whatever the order of queries. (The
  simulator reports the loss with every job_stats call, so the draw must be cheap: a seeded
  numpy Generator per call cost 50 us.)
"""
from __future__ import annotations

import math
import zlib

import numpy as np

CONVERGED_FRAC = 0.05
NOISE_REL = 0.02

# model -> (loss at step 0, floor beta2). Ours, typical values.
_IMAGENET = (math.log(1000.0), 1.0)
CURVES: dict[str, tuple[float, float]] = {
    **{m: _IMAGENET for m in ("imagenet", "resnet50", "resnet101", "resnext50", "vgg16", "alexnet",
                              "inception3", "googlenet", "densenet121", "mobilenet")},
    "cifar10": (math.log(10.0), 0.05),
    "resnet18": (math.log(10.0), 0.05),
    "lstm": (math.log(10_000.0), 4.0),          # word-level language model (PTB-sized vocabulary)
    "transformer": (math.log(32_000.0), 1.5),   # translation, 32k sub-word vocabulary
    "gpt2": (math.log(50_257.0), 3.0),
    "bert": (math.log(2.0), 0.2),               # fine-tuning, binary classification
    "ncf": (math.log(2.0), 0.1),
    "deepspeech2": (200.0, 15.0),               # CTC loss per utterance
    "deepspeech": (200.0, 15.0),
    "yolov3": (40.0, 3.0),
    "vae": (550.0, 100.0),
    "superresolution": (0.1, 0.002),
    "dcgan": (5.0, 1.0),
}
DEFAULT_CURVE = (math.log(10.0), 0.1)


def curve_params(model: str | None) -> tuple[float, float]:
    """(L0, beta2) of a model (DEFAULT_CURVE for None or a model not listed)."""
    return CURVES.get(str(model or "").lower(), DEFAULT_CURVE)


def true_betas(model: str | None, iterations: float) -> tuple[float, float, float]:
    """(beta0, beta1, beta2) of the noiseless curve of a job that converges at `iterations`."""
    l0, b2 = curve_params(model)
    b1 = 1.0 / (l0 - b2)
    b0 = b1 * (1.0 / CONVERGED_FRAC - 1.0) / max(float(iterations), 1.0)
    return b0, b1, b2


def curve(betas, k):
    """loss(k) = 1 / (beta0 k + beta1) + beta2 (k a number or an array)."""
    b0, b1, b2 = betas
    return 1.0 / (b0 * np.asarray(k, dtype=float) + b1) + b2


def converged_step(betas) -> float:
    """The step where the curve meets the convergence criterion (see the module docstring)."""
    b0, b1, _ = betas
    if b0 <= 0:
        return math.inf
    return b1 * (1.0 / CONVERGED_FRAC - 1.0) / b0


def observed_loss(spec, step: float) -> float | None:
    """The loss job `spec` reports after `step` iterations (its curve plus seeded noise); None
    when the job has no iteration count (a trace's duration: no curve)."""
    if spec.iterations is None:
        return None
    b0, b1, b2 = true_betas(spec.model, spec.iterations)
    k = max(float(step), 0.0)
    z = _normal(zlib.crc32(spec.job_id.encode()), int(round(k)))
    return (1.0 / (b0 * k + b1) + b2) * (1.0 + NOISE_REL * z)


_M64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _normal(a: int, b: int) -> float:
    """A standard normal draw determined by the pair (a, b)."""
    h1 = _splitmix64((a << 32) ^ (b & 0xFFFFFFFF) ^ ((b >> 32) * 0x632BE59BD9B4E019))
    h2 = _splitmix64(h1)
    u1 = ((h1 >> 11) + 0.5) / float(1 << 53)          # in (0, 1)
    u2 = (h2 >> 11) / float(1 << 53)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
