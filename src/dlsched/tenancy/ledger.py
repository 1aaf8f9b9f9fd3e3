"""The usage ledger: decayed usage per queue and per user (one implementation, four readings).

    form: integral   U(t) = sum over time of held GPUs * 0.5^((t - s) / half_life) ds, in GPU-
                     seconds (Slurm's PriorityDecayHalfLife, default 7 days; KAI's time-based
                     fairshare; Volcano's fairshare plugin, 4 h). half_life 0: no decay.
          ema        every sample_s: consumed <- (1 - a) consumed + a * held, a = 1 - 0.5^(sample_s
                     / half_life), in GPUs (Kueue's admission fair sharing; default sample 5 min).
    entry_penalty    on each admission add a(sample_s) * the job's GPUs at once (Kueue), so a burst
                     of submissions cannot all slip in before the next sample.
    window_s         a tumbling window: usage starts again from 0 every window_s (KAI's
                     `tumbling`); None: no window. KAI's default sliding window is not built
                     (with a half-life the old usage has decayed anyway).
    normalise        "capacity": U divided by the cluster's GPUs times the time counted so far
                     (KAI: 24 GPU-hours on 10 GPUs over 10 hours is 0.24); "none": as kept.

Keys are "queue:<name>" and "user:<name>". The runtime saves state() in its store and loads it
when it starts again, so usage survives a restart.
"""
from __future__ import annotations

import math

from dlsched.scheduler.framework import register
from dlsched.tenancy.points import Ledger


def alpha(sample_s: float, half_life_s: float) -> float:
    """Kueue's decay factor for one sample: 1 - 0.5^(sample / half-life); 0 without a half-life."""
    if half_life_s <= 0:
        return 0.0
    return 1.0 - 0.5 ** (sample_s / half_life_s)


@register("ledger", "decayed", source="Kueue KEP-4136; KAI time-based fairshare; Slurm priority/multifactor")
class DecayedLedger(Ledger):
    """Decayed usage per queue and user (integral or Kueue's EMA), with an entry penalty."""

    def __init__(self, half_life_s: float = 7 * 86400.0, form: str = "integral", sample_s: float = 300.0,
                 entry_penalty: bool = False, window_s: float | None = None, normalise: str = "none") -> None:
        if half_life_s < 0 or sample_s <= 0 or (window_s is not None and window_s <= 0):
            raise ValueError("half_life_s must be >= 0, sample_s and window_s > 0")
        if form not in ("integral", "ema"):
            raise ValueError(f"form must be 'integral' or 'ema', got {form!r}")
        if normalise not in ("none", "capacity"):
            raise ValueError(f"normalise must be 'none' or 'capacity', got {normalise!r}")
        self.half_life_s, self.form, self.sample_s = float(half_life_s), form, float(sample_s)
        self.entry_penalty, self.window_s, self.normalise = bool(entry_penalty), window_s, normalise
        self.capacity = 0.0          # the cluster's GPUs (the engine sets it)
        self.t: float | None = None  # the time of the last advance
        self.t0 = 0.0                # the start of the counted span (the window's start)
        self.u: dict[str, float] = {}

    def advance(self, now: float, held: dict[str, float]) -> None:
        if self.t is None:
            self.t = self.t0 = now
            return
        if self.window_s is not None and now >= self.t0 + self.window_s:
            self.u.clear()          # a tumbling window starts again
            self.t0 = self.t = self.t0 + math.floor((now - self.t0) / self.window_s) * self.window_s
        dt = now - self.t
        if dt <= 0:
            return
        if self.form == "integral":
            h = self.half_life_s
            keep = 0.5 ** (dt / h) if h > 0 else 1.0
            gain = h / math.log(2) * (1.0 - keep) if h > 0 else dt
            for k in set(self.u) | set(held):
                self.u[k] = self.u.get(k, 0.0) * keep + held.get(k, 0.0) * gain
        else:
            k_samples = math.floor(now / self.sample_s) - math.floor(self.t / self.sample_s)
            if k_samples > 0:
                keep = (1.0 - alpha(self.sample_s, self.half_life_s)) ** k_samples
                for k in set(self.u) | set(held):
                    self.u[k] = self.u.get(k, 0.0) * keep + held.get(k, 0.0) * (1.0 - keep)
        self.t = now

    def admit(self, key: str, gpus: float) -> None:
        if self.entry_penalty:
            a = alpha(self.sample_s, self.half_life_s)
            self.u[key] = self.u.get(key, 0.0) + a * gpus * (self.sample_s if self.form == "integral" else 1.0)

    def value(self, key: str) -> float:
        u = self.u.get(key, 0.0)
        if self.normalise == "capacity":
            span = (self.t - self.t0) if self.t is not None else 0.0
            return u / (self.capacity * span) if self.capacity > 0 and span > 0 else 0.0
        return u

    def state(self) -> dict:
        return {"t": self.t, "t0": self.t0, "u": dict(self.u), "capacity": self.capacity}

    def load(self, state: dict) -> None:
        self.t, self.t0 = state.get("t"), float(state.get("t0", 0.0))
        self.capacity = float(state.get("capacity", self.capacity) or 0.0)
        self.u = {str(k): float(v) for k, v in (state.get("u") or {}).items()}
