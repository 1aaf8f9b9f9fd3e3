"""Measured speeds: iteration times of the six Pollux applications from Pollux's own profiles.

Pollux (Qiao et al., OSDI'21) measured, on its testbed (nodes of 4 NVIDIA T4s), the step time and
the all-reduce sync time of each application (bert, cifar10, deepspeech2, imagenet, ncf, yolov3)
for every placement of up to 4 nodes x 4 GPUs and a range of per-GPU batch sizes
(`app-profiles/<app>/placements.csv`), plus larger clusters of 6-16 nodes
(`scalability.csv`). For jobs of these applications the speed model (`speed.py`) takes the
iteration time from these measurements instead of its analytic compute + communication formula
when `SpeedParams.measured` is on (the default). The lookup mirrors the Pollux simulator's
`Application.get_throughput` (simulator/applications.py in petuum/adaptdl) and its jobs'
gradient-accumulation rule; the code is ours.

Semantic notes (what the numbers mean and where we had to choose)

- **Placement** = the GPUs per node of the job's workers, nodes in the order the job's tasks
  list them (Pollux: the order of its allocation list), e.g. (2, 1, 1). Node GPU counts come
  from the workers' GPU demands (at least one per worker). A placement is normalised to its
  lexicographically smallest rotation, as Pollux does, so (1, 2) and (2, 1) are one placement
  (but (1, 2, 3) and (1, 3, 2) are not: the profiles tell them apart).
- **Batch**: local batch = ceil(global batch / replicas), replicas = GPUs. When it exceeds the
  application's largest profiled local batch (`max_local_bsz`: the largest `local_bsz` in its
  placements.csv; yolov3: 8, as in Pollux) the job accumulates gradients:
  accum = ceil(local / max_local_bsz) - 1 extra micro-steps of atomic = ceil(local / (accum + 1))
  samples each, and

      iteration time = step(atomic) + accum x (step(atomic) - sync(atomic))

  (the extra micro-steps compute but do not synchronise). As Pollux's simulated jobs do
  (`batch_plan`), a single-GPU job whose batch exceeds the application's initial batch size
  accumulates at least once, and the per-GPU batch is clamped so that the trained batch stays
  within the largest profiled one: our fidelity target is Pollux's simulator.
- **Profiled placement** (in placements.csv): step and sync time are interpolated linearly in
  local_bsz between that placement's rows (exact at the rows).
- **Other placements** (more than 4 nodes, a node with more than 4 GPUs, ...): linear
  interpolation over (num_nodes, num_replicas, local_bsz) of placements.csv averaged per
  (num_nodes, num_replicas, local_bsz) together with scalability.csv; num_nodes is capped at
  16, as in Pollux. This is scipy's LinearNDInterpolator computed by hand: the same Delaunay
  triangulation (scipy.spatial.Delaunay, which LinearNDInterpolator builds with the same
  options), barycentric weights in the simplex holding the point. Importing scipy.spatial
  alone costs about half of importing scipy.interpolate (and scipy's lazily computed
  barycentric transforms another 0.1-0.2 s per application), and the first N-D lookup of a
  process pays it. The values are LinearNDInterpolator's but for one tie: the profiles are
  grid-like, so many of their points are cospherical and qhull's Delaunay triangulation is
  degenerate; on a few faces the simplices on either side disagree (the interpolant jumps, by
  up to ~15 %). A point on such a face (num_nodes and num_replicas are integers, so it
  happens) gets, from scipy, the simplex its point-location walk reaches first; here it gets
  the first containing simplex in the triangulation's order. Both are one of the two one-sided
  values (a test checks it against LinearNDInterpolator).
- **Clamping** (Pollux's own interpolators raise or return NaN outside the data; a simulator
  must give every placement a time): a local batch outside the profiled range is clamped into
  it, so a job running 16 samples per GPU where the smallest profiled batch is 32 is charged
  the 32-sample step time. For a profiled placement the range is that placement's rows; in the
  N-D case the range of the N-D data, and, when the point is still outside the data's convex
  hull, the local_bsz range inside the hull for that (num_nodes, num_replicas). A
  (num_nodes, num_replicas) outside the hull altogether (e.g. a node with more GPUs than
  Pollux's 4) gets the nearest measured configuration (each axis scaled to [0, 1]).
- **Measurements are T4 times**: they are used only when every GPU the job's workers use is
  a T4 (MEASURED_GPU_TYPES; the `pollux` and `liquid-N` presets), and only for all-reduce
  jobs (or single-GPU jobs without communication): Pollux measured PyTorch DDP all-reduce.
  Other jobs of these models keep the analytic model.
- **Communication is already in the measured step time**, so measured jobs take no part in the
  max-min sharing of NICs and rack uplinks (their profile has no link bytes: they neither slow
  down when others use their links nor slow others down). Their traffic is still counted with
  the analytic model's volumes (nic_bytes, cross_rack_bytes per iteration), so the traffic
  metrics keep their meaning. GPU-sharing interference still applies (it multiplies the rate).
- **Trace durations**: a duration-based job's ideal iteration time is the measured time on the
  packed placement (its GPUs on as few nodes as possible, full nodes first).

Caching: each application's profiles are read once (csv module, no pandas) and its N-D
triangulation is built on first use; results are cached per (app, placement, local_bsz) and
per (app, placement, batch), so a simulator (re)placement costs a dictionary lookup after the
first time. scipy is imported only when an N-D interpolation is first needed (about 0.4 s,
once per process).
"""
from __future__ import annotations

import csv
import functools
import math
from typing import Iterable

import numpy as np

from dlsched.core.errors import DlschedError
from dlsched.workload.pollux_data import pollux_data_dir

POLLUX_APPS: tuple[str, ...] = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
# Largest local (per-GPU) batch before gradient accumulation; default: largest profiled local_bsz.
MAX_LOCAL_BSZ_OVERRIDE: dict[str, int] = {"yolov3": 8}
# The GPU type Pollux's measurements were taken on (its testbed: g4dn.12xlarge, 4 T4 each).
MEASURED_GPU_TYPES: frozenset[str] = frozenset({"T4"})
ND_MAX_NODES = 16  # Pollux caps num_nodes here for the N-D interpolation


def normalize_placement(placement: Iterable[int]) -> tuple[int, ...]:
    """Drop empty nodes and rotate to the lexicographically smallest rotation."""
    p = tuple(int(x) for x in placement if int(x) > 0)
    if not p:
        return p
    return min(p[i:] + p[:i] for i in range(len(p)))


class _AppProfile:
    """One application's measurements and interpolators."""

    def __init__(self, app: str):
        folder = pollux_data_dir() / "app-profiles" / app
        self.name = app
        rows: dict[tuple[int, ...], list[tuple[int, float, float]]] = {}
        try:
            with (folder / "placements.csv").open(newline="") as fh:
                for r in csv.DictReader(fh):
                    key = tuple(int(c) for c in r["placement"].strip())
                    rows.setdefault(key, []).append(
                        (int(r["local_bsz"]), float(r["step_time"]), float(r["sync_time"])))
            with (folder / "scalability.csv").open(newline="") as fh:
                scal = [(int(r["num_nodes"]), int(r["num_replicas"]), int(r["local_bsz"]),
                         float(r["step_time"]), float(r["sync_time"])) for r in csv.DictReader(fh)]
        except FileNotFoundError as e:
            raise DlschedError(f"{folder}: Pollux profile missing ({e.filename})") from None
        # Per profiled placement: local_bsz ascending, step and sync times (1-D interpolation).
        self.rows: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for key, lst in rows.items():
            lst.sort()
            a = np.array(lst, dtype=np.float64)
            self.rows[key] = (a[:, 0], a[:, 1], a[:, 2])
        self.min_local_bsz = int(min(x[0][0] for x in self.rows.values()))
        self.max_local_bsz = MAX_LOCAL_BSZ_OVERRIDE.get(
            app, int(max(x[0][-1] for x in self.rows.values())))
        # Pollux's Application: init_batch_size / max_batch_size = the smallest / largest batch
        # size with a validation profile (validation-<bsz>.csv).
        vals = sorted(int(f.stem.split("-")[1]) for f in folder.glob("validation-*.csv"))
        if not vals:
            raise DlschedError(f"{folder}: no validation-*.csv profiles (bundled data missing?)")
        self.init_batch_size, self.max_batch_size = vals[0], vals[-1]
        # N-D data: placements averaged per (num_nodes, num_replicas, local_bsz) in sorted key
        # order, then scalability.csv in file order (Pollux's order: with degenerate data the
        # order of the points decides qhull's triangulation).
        groups: dict[tuple[int, int, int], list[tuple[float, float]]] = {}
        for key, lst in rows.items():
            for bsz, step, sync in lst:
                groups.setdefault((len(key), sum(key), bsz), []).append((step, sync))
        keys = sorted(groups)
        pts = keys + [s[:3] for s in scal]
        vals = [tuple(np.mean(groups[k], axis=0)) for k in keys] + [s[3:] for s in scal]
        self.nd_points = np.array(pts, dtype=np.float64)
        self.nd_values = np.array(vals, dtype=np.float64)
        self.nd_bsz = np.unique(self.nd_points[:, 2])
        self._tri = None

    # -- interpolation ---------------------------------------------------------------------------
    def _triangulation(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Delaunay simplices of the N-D data (scipy.spatial.Delaunay, the triangulation
        LinearNDInterpolator builds) and, per simplex, its first vertex and the inverse of its
        edge matrix (barycentric transform). Computed here with numpy: scipy's own lazy
        transform costs ~0.1-0.2 s per application on first use."""
        if self._tri is None:
            from scipy.spatial import Delaunay
            simplices = Delaunay(self.nd_points).simplices
            v = self.nd_points[simplices]                       # (k, 4, 3)
            edges = (v[:, :3, :] - v[:, 3:4, :]).transpose(0, 2, 1)  # columns: v_i - v_3
            det = np.linalg.det(edges)
            scale = np.abs(edges).max(axis=(1, 2)) ** 3
            keep = np.abs(det) > 1e-12 * scale                  # drop flat simplices
            simplices, v, edges = simplices[keep], v[keep], edges[keep]
            self._tri = (simplices, v[:, 3, :], np.linalg.inv(edges))
        return self._tri

    def linear_nd(self, q) -> np.ndarray:
        """Linear interpolation of (step, sync) at the rows of q (k x 3: num_nodes,
        num_replicas, local_bsz) on the Delaunay triangulation of the N-D data; NaN outside
        its convex hull (as scipy's LinearNDInterpolator)."""
        simplices, origin, inv = self._triangulation()
        q = np.atleast_2d(np.asarray(q, dtype=np.float64))
        out = np.full((q.shape[0], self.nd_values.shape[1]), np.nan)
        for i, x in enumerate(q):
            c = np.einsum("kij,kj->ki", inv, x - origin)       # weights of vertices 0..2
            w = np.column_stack([c, 1.0 - c.sum(axis=1)])
            hit = np.flatnonzero((w >= -1e-10).all(axis=1))
            if hit.size:
                k = hit[0]   # the first containing simplex (ties: see the module docstring)
                out[i] = w[k] @ self.nd_values[simplices[k]]
        return out

    def _nearest(self, q: np.ndarray) -> np.ndarray:
        """The measured N-D point nearest to q, each axis scaled to [0, 1]."""
        lo, hi = self.nd_points.min(axis=0), self.nd_points.max(axis=0)
        span = np.where(hi > lo, hi - lo, 1.0)
        d = (((self.nd_points - q) / span) ** 2).sum(axis=1)
        return self.nd_values[int(np.argmin(d))]

    def throughput(self, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        """(step_time, sync_time) in seconds of a normalised placement at a per-GPU batch."""
        prof = self.rows.get(placement)
        if prof is not None:
            xs, steps, syncs = prof
            # np.interp holds the end values outside [xs[0], xs[-1]]: the documented clamping.
            return float(np.interp(local_bsz, xs, steps)), float(np.interp(local_bsz, xs, syncs))
        n = float(min(len(placement), ND_MAX_NODES))
        r = float(sum(placement))
        b = float(np.clip(local_bsz, self.nd_bsz[0], self.nd_bsz[-1]))
        f = self.linear_nd
        out = f([[n, r, b]])[0]
        if np.all(np.isfinite(out)):
            return float(out[0]), float(out[1])
        # Outside the convex hull at this batch: clamp the batch into the hull's range along the
        # local_bsz axis at this (n, r) (the hull meets that line in one segment).
        grid = f(np.column_stack([np.full(self.nd_bsz.size, n), np.full(self.nd_bsz.size, r), self.nd_bsz]))
        inside = np.flatnonzero(np.all(np.isfinite(grid), axis=1))
        if inside.size:
            lo, hi = self.nd_bsz[inside[0]], self.nd_bsz[inside[-1]]
            out = f([[n, r, float(np.clip(b, lo, hi))]])[0]
            if np.all(np.isfinite(out)):
                return float(out[0]), float(out[1])
        # (n, r) outside everything measured: the nearest measured configuration.
        out = self._nearest(np.array([n, r, b]))
        return float(out[0]), float(out[1])


@functools.lru_cache(maxsize=None)
def app_profile(app: str) -> _AppProfile:
    """The (cached) measurements of one Pollux application."""
    name = str(app).lower()
    if name not in POLLUX_APPS:
        raise DlschedError(f"no measured speeds for {app!r} (known: {', '.join(POLLUX_APPS)})")
    return _AppProfile(name)


@functools.lru_cache(maxsize=65536)
def measured_throughput(app: str, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
    """(step_time, sync_time) of `app` on `placement` at a per-GPU batch (no accumulation);
    `placement` is normalised here. Cached per (app, placement, local_bsz)."""
    norm = normalize_placement(placement)
    if not norm:
        raise ValueError(f"empty placement {placement!r}")
    if norm != placement:
        return measured_throughput(app, norm, local_bsz)
    return app_profile(app).throughput(norm, local_bsz)


def accumulation(app: str, local_bsz: int) -> tuple[int, int]:
    """(accum_steps, atomic_bsz) for a per-GPU batch: extra micro-steps once local_bsz exceeds
    the application's max local batch."""
    max_local = app_profile(app).max_local_bsz
    accum = max(-(-local_bsz // max_local) - 1, 0)
    atomic = -(-local_bsz // (accum + 1))
    return accum, atomic


@functools.lru_cache(maxsize=65536)
def batch_plan(app: str, batch_size: int, replicas: int) -> tuple[int, int]:
    """(accum_steps, atomic_bsz) of a job of `app` training with global batch `batch_size` on
    `replicas` GPUs, as Pollux's simulated jobs choose them (simulator.py,
    `Job.update_local_bsz` with a target batch size):

        local  = ceil(batch / replicas)
        accum  = ceil(local / max_local_bsz) - 1;  a single replica whose batch exceeds the
                 application's initial batch size accumulates at least once
        atomic = min(ceil(local / (accum + 1)), floor(max_batch_size / (replicas x (accum + 1))))

    The trained batch is replicas x atomic x (accum + 1) (>= the target by rounding, clamped
    to the largest profiled batch)."""
    prof = app_profile(app)
    r = max(int(replicas), 1)
    local = max(-(-int(batch_size) // r), 1)
    accum, atomic = accumulation(app, local)
    if r == 1 and batch_size > prof.init_batch_size:
        accum = max(accum, 1)
        atomic = -(-local // (accum + 1))
    atomic = max(min(atomic, prof.max_batch_size // (r * (accum + 1))), 1)
    return accum, atomic


def trained_batch(app: str, batch_size: int, replicas: int) -> int:
    """The global batch Pollux's job actually trains with (see batch_plan)."""
    accum, atomic = batch_plan(str(app).lower(), int(batch_size), int(replicas))
    return max(int(replicas), 1) * atomic * (accum + 1)


@functools.lru_cache(maxsize=65536)
def _iter_time(app: str, placement: tuple[int, ...], batch_size: int) -> float:
    accum, atomic = batch_plan(app, batch_size, sum(placement))
    step, sync = measured_throughput(app, placement, atomic)
    # max(.., 0): an interpolated sync can never make an accumulation micro-step negative.
    return step + accum * max(step - sync, 0.0)


def measured_iter_time(app: str, placement: tuple[int, ...], batch_size: int) -> float:
    """Seconds per iteration of a Pollux application `app` with global batch `batch_size` on
    `placement` (GPUs per node, e.g. (2, 1, 1)), from Pollux's measurements: interpolated step
    time at the per-GPU batch, plus gradient-accumulation micro-steps when that batch exceeds
    the application's max local batch (see the module docstring)."""
    norm = normalize_placement(placement)
    if not norm:
        raise ValueError(f"empty placement {placement!r}")
    b = int(math.ceil(batch_size))
    if b < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    return _iter_time(str(app).lower(), norm, b)


def packed_placement(gpus: int, gpus_per_node: int) -> tuple[int, ...]:
    """`gpus` GPUs on as few nodes as possible, full nodes first."""
    g = max(int(gpus_per_node), 1)
    q, rem = divmod(max(int(gpus), 1), g)
    return (g,) * q + ((rem,) if rem else ())


def uses_measured(model: str | None, comm: str, gpu_types: Iterable[str], replicas: int) -> bool:
    """Whether a job's iteration time comes from the measurements (see the module docstring)."""
    if model is None or str(model).lower() not in POLLUX_APPS:
        return False
    if not (comm == "allreduce" or (comm == "none" and replicas <= 1)):
        return False
    types = set(gpu_types)
    return bool(types) and types <= MEASURED_GPU_TYPES
