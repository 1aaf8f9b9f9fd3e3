"""The simulator calibrated from the real runtime: a calibration file (dlsched.runtime.calibration,
schema `dlsched-calibration` version 1) gives the simulated jobs of the models it measured their
iteration time per (GPU type, workers), and the simulator its start and restart delays.

What changes, and nothing else:
- speed: a DL job whose `model` the file names runs at the measured wall seconds per step
  (`iter_s`: a step plus what the runtime adds per step, the stop-flag all-reduce and the
  periodic checkpoints) for the GPU type(s) and the number of workers it is placed on;
  `CalibratedSpeedModel` is the speed model (dlsched.workload.speed.SpeedModel) with that table
  put in front of it. Such a job shares no links (the measured time has its communication in
  it) and is iteration-based. Jobs of other models keep the speed model.
    - workers that were measured: the measured time;
    - between two measured counts: linear in 1/workers (the shape of t = a + b / w);
    - outside them: t = a + b / w + c x w fitted to the measured counts by non-negative least
      squares (a + b / w with two counts, the one time with one);
    - GPU types: the time measured on that mix of types, else the slowest of the job's types
      (synchronous training waits for the slowest worker), a type that was not measured
      counting as the mean of the measured ones.
- switches: `start_delay_s` (a first start, plus the tail of a finish: both hold a job's GPUs
  without progress once per job) and `restart_delay_s` (resume, migrate, resize), the file's
  `simulator` block, are SimBackend's arguments of the same names.
- cluster: the file's `cluster` (the nodes the runtime's scheduler saw), unless one is given.

`simulate(cluster, jobs, policy, calibration, round_s=...)` runs one policy on it; the profile is
built with its runtime parameters, as the runtime's server builds it (Optimus then fits speed and
remaining work from what the backend reports, on both backends), and `round_s` overrides the
profile's round interval as the server's `--round-s` does. It imports the simulator inside the
function (sim imports workload, never the reverse at module level).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dlsched.cluster.topology import Cluster
from dlsched.core.types import GPU, JobSpec, NodeSpec, Role
from dlsched.workload.speed import JobComm, SpeedModel, SpeedParams

SCHEMA = "dlsched-calibration"
VERSION = 1


class Calibration:
    """A loaded calibration file: per model, GPU type and workers the measured seconds per step."""

    def __init__(self, data: dict, source: str = "calibration"):
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"{source}: not a {SCHEMA} file")
        if data.get("version") != VERSION:
            raise ValueError(f"{source}: version {data.get('version')!r}, this dlsched reads version {VERSION}")
        self.data = data
        self.source = source
        # model -> gpu type -> sorted [(workers, iter_s)]
        self.table: dict[str, dict[str, list[tuple[int, float]]]] = {}
        for model, per_type in (data.get("models") or {}).items():
            for gt, per_w in per_type.items():
                pts = sorted((int(w), float(c["iter_s"])) for w, c in per_w.items()
                             if c.get("iter_s") is not None and float(c["iter_s"]) > 0)
                if pts:
                    self.table.setdefault(str(model), {})[str(gt)] = pts
        sim = data.get("simulator") or {}
        self.start_delay_s = float(sim.get("start_delay_s") or 0.0)
        self.restart_delay_s = float(sim.get("restart_delay_s") or 0.0)
        self._fits: dict[tuple[str, str], np.ndarray] = {}

    def knows(self, model: str | None) -> bool:
        return model is not None and str(model) in self.table

    def iter_time(self, model: str, gpu_types, workers: int) -> float:
        """Seconds per step of `model` with `workers` workers on GPUs of `gpu_types`."""
        per_type = self.table[str(model)]
        types = sorted(set(gpu_types)) or ["*"]
        key = "+".join(types)
        if key in per_type:
            return self._at(model, key, workers)
        return max(self._type_time(model, t, workers) for t in types)

    def _type_time(self, model: str, gtype: str, workers: int) -> float:
        per_type = self.table[str(model)]
        if gtype in per_type:
            return self._at(model, gtype, workers)
        if "*" in per_type:
            return self._at(model, "*", workers)
        singles = [t for t in per_type if "+" not in t] or list(per_type)
        return float(np.mean([self._at(model, t, workers) for t in singles]))

    def _at(self, model: str, gtype: str, w: int) -> float:
        pts = self.table[str(model)][gtype]
        w = max(int(w), 1)
        ws = [p[0] for p in pts]
        if w in ws:
            return pts[ws.index(w)][1]
        if ws[0] < w < ws[-1]:                       # linear in 1/w between the neighbours
            i = next(k for k in range(len(ws)) if ws[k] > w)
            (w0, t0), (w1, t1) = pts[i - 1], pts[i]
            f = (1.0 / w - 1.0 / w0) / (1.0 / w1 - 1.0 / w0)
            return t0 + f * (t1 - t0)
        theta = self._fit(model, gtype)
        return float(max(theta @ np.array([1.0, 1.0 / w, float(w)]), 1e-6))

    def _fit(self, model: str, gtype: str) -> np.ndarray:
        """(a, b, c) of t = a + b / w + c w, non-negative, fitted to the measured counts."""
        key = (model, gtype)
        if key not in self._fits:
            pts = self.table[model][gtype]
            if len(pts) == 1:
                theta = np.array([pts[0][1], 0.0, 0.0])
            else:
                from scipy.optimize import nnls
                cols = 3 if len(pts) >= 3 else 2
                A = np.array([[1.0, 1.0 / w, float(w)][:cols] for w, _ in pts])
                b = np.array([t for _, t in pts])
                sol, _ = nnls(A, b)
                theta = np.zeros(3)
                theta[:cols] = sol
            self._fits[key] = theta
        return self._fits[key]

    def cluster(self) -> Cluster | None:
        """The runtime's cluster, as its scheduler saw it (None when the file has none)."""
        c = self.data.get("cluster")
        if not c:
            return None
        nodes = tuple(NodeSpec(**n) for n in c["nodes"])
        racks = c["racks"]
        return Cluster(name=str(c.get("name", "ray")), nodes=nodes,
                       rack_names=tuple(r["name"] for r in racks),
                       rack_domain=tuple(int(r["domain"]) for r in racks),
                       rack_uplink_gbps=tuple(float(r["uplink_gbps"]) for r in racks),
                       domain_names=tuple(c.get("domains") or ("d0",)))


def load_calibration(ref) -> Calibration:
    """A Calibration from a file path, a dict, or a Calibration."""
    if isinstance(ref, Calibration):
        return ref
    if isinstance(ref, dict):
        return Calibration(ref)
    p = Path(ref)
    return Calibration(json.loads(p.read_text()), source=str(p))


class CalibratedSpeedModel(SpeedModel):
    """The speed model with the calibration's measured step times in front of it."""

    def __init__(self, cluster: Cluster, calibration, params: SpeedParams | None = None):
        super().__init__(cluster, params)
        self.calibration = load_calibration(calibration)

    def profile(self, job: JobSpec, placements, tasks=None) -> JobComm | None:
        cal = self.calibration
        if job.kind != "dl" or not placements or not cal.knows(job.model):
            return super().profile(job, placements, tasks)
        tasks = job.tasks if tasks is None else tasks
        workers = [p for p in placements if tasks[p.task].role is Role.WORKER]
        nodes = self.cluster.nodes
        types = {nodes[p.node].gpu_type for p in workers if tasks[p.task].demand[GPU] > 0} or \
            {nodes[p.node].gpu_type for p in workers}
        t = cal.iter_time(job.model, types, max(len(workers), 1))
        n0 = max(sum(1 for x in job.tasks if x.role is Role.WORKER), 1)
        ideal = cal.iter_time(job.model, types, n0)
        return JobComm(t, 0.0, {}, 0.0, ideal, 0.0, 0.0, iteration_based=job.iterations is not None,
                       measured=True)


def simulate(cluster: Cluster | str | None, jobs: list[JobSpec], policy: str, calibration, *,
             round_s: float | None = None, seed: int = 0, speed: SpeedParams | None = None,
             params: dict | None = None, runtime: bool = True):
    """Run `policy` on `jobs` in the simulator calibrated by `calibration` (a file, a dict or a
    Calibration); `cluster` None: the calibration's. `params`: component parameters over the
    profile's (as a policy config's `params`). Returns a SimResult."""
    import importlib
    importlib.import_module("dlsched.policies")          # registers the policies
    from dlsched.cluster.topology import load_cluster
    from dlsched.metrics.result import build_result
    from dlsched.scheduler.core import Scheduler, build_profile
    from dlsched.sim.backend import SimBackend
    cal = load_calibration(calibration)
    cl = cal.cluster() if cluster is None else (cluster if isinstance(cluster, Cluster) else load_cluster(cluster))
    if cl is None:
        raise ValueError(f"{cal.source}: no cluster in the calibration; give one")
    over: dict = {}
    if round_s:
        over["round_s"] = float(round_s)
    if params:
        over["params"] = dict(params)
    profile = build_profile(policy, over or None, runtime=runtime)
    backend = SimBackend(cl, list(jobs), speed=speed, restart_delay_s=cal.restart_delay_s,
                         start_delay_s=cal.start_delay_s)
    backend.speed = CalibratedSpeedModel(cl, cal, speed)
    sched = Scheduler(profile, seed=seed)
    sched.run(backend)
    return build_result(sched, backend, policy=policy, cluster_name=cl.name, workload_name="calibrated")


__all__ = ["Calibration", "CalibratedSpeedModel", "load_calibration", "simulate"]
