"""Start the simulator from a cluster caught mid-flight: "what if" from the live queue.

A state document says what runs where and what waits, now. `simulate_state` runs a policy from
it: the running jobs keep their placements (the policy may preempt or move them, as it would on
the cluster), the waiting jobs are queued in their submission order, and the run goes on until
every job is done. The live server writes such a document (`GET /state`, `dlsched whatif
--save-state`); a user can write one by hand.

Format (JSON or YAML), schema "dlsched-state", version 1. Times are seconds relative to now
(now is 0: the past is negative).

    schema: dlsched-state
    version: 1
    policy: fifo                     # the policy running now (whatif's default); optional
    cluster: pollux                  # a preset name, a cluster YAML file (relative to this one),
                                     # a cluster mapping (node_groups: ...), or the runtime's
                                     # form (nodes: [NodeSpec fields], racks, domains)
    calibration: null                # optional: a dlsched-calibration mapping or file (the
                                     # runtime's measured step times, dlsched.runtime.calibration);
                                     # without it the speed model gives the speeds
    jobs:                            # every job not finished: a common-schema row (see
      - job_id: j0007                # dlsched.workload.schema) whose work is what is LEFT, plus:
        submit_time_s: -340          #   when it was submitted (<= 0)
        workers: 2
        gpus_per_worker: 1
        duration_s: 420              #   seconds left at its ideal placement, or `iterations`
                                     #   left (a model of the zoo or of the calibration)
        state: running               #   running | waiting (default waiting)
        started_s: -200              #   running: when it first started (its wait ended)
        placement:                   #   running: each task's node (name or index) and GPUs
          - {task: 0, node: n0, gpus: [0]}
          - {task: 1, node: n1, gpus: [0]}
        attained_gpu_s: 400          #   optional: GPU-seconds of service so far (LAS, Tiresias);
                                     #   default: its GPUs x (0 - started_s)

Bad input gets one line naming the file, the job (by index) and the field.

What a run gives (`Prediction`): per job its predicted start and finish (seconds from now; a
running job's start is its `started_s`), and per policy the mean wait and JCT of the jobs in the
document (from their submission, so the past counts) and the GPU utilisation over the horizon.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlsched.core.errors import InputError

SCHEMA, VERSION = "dlsched-state", 1
MAX_JOBS = 100_000
_EXTRA = ("state", "started_s", "placement", "attained_gpu_s")
STATES = ("running", "waiting")


@dataclass
class Running:
    job_id: str
    placement: tuple                  # TaskPlacement per task
    started_s: float
    attained_gpu_s: float


@dataclass
class State:
    cluster: Any                      # a Cluster
    jobs: list                        # JobSpec, submit times <= 0
    running: list[Running]
    calibration: Any = None           # a Calibration or None
    policy: str | None = None


@dataclass
class Prediction:
    policy: str
    jobs: dict[str, dict]             # job -> {start_s, finish_s, wait_s, jct_s} (from now)
    mean_wait_s: float
    mean_jct_s: float
    utilisation: float                # GPUs held / GPUs, over [0, horizon]
    horizon_s: float
    makespan_s: float                 # when the last job finishes (from now)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def load_state(ref: str | Path | dict, *, base: Path | None = None) -> State:
    """A state document (a file or a parsed mapping) as a State; InputError on bad input."""
    file = None
    if isinstance(ref, dict):
        doc = ref
    else:
        path = Path(ref)
        file = str(path)
        base = path.parent
        if not path.is_file():
            raise InputError("no such file", file=file)
        import yaml
        try:
            text = path.read_text()
            doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as e:
            raise InputError(f"not JSON or YAML: {str(e).splitlines()[0]}", file=file) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise InputError(f"not a {SCHEMA} document (schema: {SCHEMA})", file=file, field="schema")
    if doc.get("version") != VERSION:
        raise InputError(f"version {doc.get('version')!r}; this dlsched reads version {VERSION}", file=file,
                         field="version")
    cluster = _cluster(doc.get("cluster"), file, base)
    cal = None
    if doc.get("calibration"):
        from dlsched.workload.calibrated import load_calibration
        c = doc["calibration"]
        try:
            cal = load_calibration(c if isinstance(c, dict) else (base or Path(".")) / str(c))
        except (ValueError, OSError) as e:
            raise InputError(str(e), file=file, field="calibration") from None
    rows = doc.get("jobs")
    if not isinstance(rows, list):
        raise InputError("must be a list of jobs", file=file, field="jobs")
    if len(rows) > MAX_JOBS:
        raise InputError(f"{len(rows)} jobs; at most {MAX_JOBS}", file=file, field="jobs")
    jobs, running = [], []
    names = {n.name: i for i, n in enumerate(cluster.nodes)}
    for i, row in enumerate(rows):
        spec, run = _job(row, i, file, names, cluster, cal)
        jobs.append(spec)
        if run is not None:
            running.append(run)
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        dup = next(j for j in ids if ids.count(j) > 1)
        raise InputError(f"job id {dup!r} appears twice", file=file, field="jobs")
    return State(cluster, jobs, running, cal, doc.get("policy"))


def _cluster(c, file, base):
    from dlsched.cluster.topology import Cluster, cluster_from_dict, load_cluster
    from dlsched.core.errors import DlschedError
    if c is None:
        raise InputError("is required (a preset, a file or a mapping)", file=file, field="cluster")
    try:
        if isinstance(c, str):
            p = (base or Path(".")) / c
            return load_cluster(str(p) if p.is_file() else c)
        if isinstance(c, dict) and "nodes" in c:           # the runtime's form (calibration's)
            from dlsched.core.types import NodeSpec
            racks = c.get("racks") or [{"name": "r0", "domain": 0, "uplink_gbps": 100.0}]
            return Cluster(name=str(c.get("name", "state")), nodes=tuple(NodeSpec(**n) for n in c["nodes"]),
                           rack_names=tuple(r["name"] for r in racks),
                           rack_domain=tuple(int(r["domain"]) for r in racks),
                           rack_uplink_gbps=tuple(float(r["uplink_gbps"]) for r in racks),
                           domain_names=tuple(c.get("domains") or ("d0",)))
        return cluster_from_dict(c, file=file)
    except InputError:
        raise
    except (DlschedError, TypeError, KeyError, ValueError) as e:
        raise InputError(f"cluster: {str(e).splitlines()[0]}", file=file, field="cluster") from None


def _job(row, i: int, file, names: dict, cluster, cal):
    """(JobSpec, Running or None) of the i-th job row."""
    from dlsched.core.types import TaskPlacement
    from dlsched.workload.models import get_model
    from dlsched.workload.schema import job_from_row
    where = f"jobs[{i}]"
    if not isinstance(row, dict):
        raise InputError("must be a mapping (a common-schema row)", file=file, field=where)
    base = {k: v for k, v in row.items() if k not in _EXTRA}
    submit = _number(base.get("submit_time_s"), file, f"{where}.submit_time_s", maximum=0.0)
    base["submit_time_s"] = 0.0
    model, iters = base.get("model"), base.get("iterations")
    own_model = iters is not None and model is not None and get_model(str(model)) is None
    if own_model:                      # a model the calibration measured, not of the zoo
        if cal is None or not cal.knows(str(model)):
            raise InputError(f"unknown model {model!r}: not in the zoo nor in the calibration", file=file,
                             field=f"{where}.model")
        base.pop("model")
        base.pop("iterations")
        base["duration_s"] = 1.0
    try:
        spec = job_from_row(base, file=file, line=None)
    except InputError as e:
        raise InputError(e.detail, file=file, field=f"{where}.{e.field}") from None
    spec = dataclasses.replace(spec, submit_time_s=submit)
    if own_model:
        spec = dataclasses.replace(spec, model=str(model), duration_s=None,
                                   iterations=_number(iters, file, f"{where}.iterations", minimum=1e-9))
    state = row.get("state", "waiting")
    if state not in STATES:
        raise InputError(f"must be one of {', '.join(STATES)}, got {state!r}", file=file, field=f"{where}.state")
    if state == "waiting":
        return spec, None
    started = _number(row.get("started_s"), file, f"{where}.started_s", maximum=0.0)
    pl = row.get("placement")
    if not isinstance(pl, list) or len(pl) != len(spec.tasks):
        raise InputError(f"must list each of the job's {len(spec.tasks)} tasks", file=file, field=f"{where}.placement")
    tps = []
    for k, p in enumerate(pl):
        f = f"{where}.placement[{k}]"
        if not isinstance(p, dict) or set(p) - {"task", "node", "gpus"}:
            raise InputError("must be {task, node, gpus}", file=file, field=f)
        task = p.get("task", k)
        node = p.get("node")
        n = names.get(node) if isinstance(node, str) else node
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n < len(cluster.nodes):
            raise InputError(f"unknown node {node!r}", file=file, field=f"{f}.node")
        gpus = p.get("gpus") or []
        if not isinstance(gpus, list) or any(not isinstance(g, int) or not 0 <= g < cluster.nodes[n].gpus for g in gpus):
            raise InputError(f"GPU ids of node {node!r}: 0 .. {cluster.nodes[n].gpus - 1}", file=file, field=f"{f}.gpus")
        if not isinstance(task, int) or not 0 <= task < len(spec.tasks):
            raise InputError(f"task index 0 .. {len(spec.tasks) - 1}", file=file, field=f"{f}.task")
        tps.append(TaskPlacement(task, n, tuple(gpus)))
    held = sum(t.demand[0] for t in spec.tasks)
    attained = row.get("attained_gpu_s")
    attained = held * -started if attained is None else _number(attained, file, f"{where}.attained_gpu_s")
    return spec, Running(spec.job_id, tuple(tps), started, attained)


def _number(v, file, field: str, *, minimum: float | None = None, maximum: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise InputError(f"must be a number, got {v!r}", file=file, field=field)
    if minimum is not None and v < minimum:
        raise InputError(f"must be >= {minimum:g}, got {v!r}", file=file, field=field)
    if maximum is not None and v > maximum:
        raise InputError(f"must be <= {maximum:g} (relative to now), got {v!r}", file=file, field=field)
    return float(v)


def simulate_state(state: State, policy: str, *, horizon_s: float = 6 * 3600.0, seed: int = 0,
                   runtime: bool = False, round_s: float | None = None, tenancy=None) -> Prediction:
    """Run `policy` from the state until every job is done. `runtime`: the profile as the
    runtime's server builds it (its runtime parameters: Optimus fits what it measures);
    `tenancy`: a dlsched.tenancy.engine.Tenancy (quotas over a queue tree), or None."""
    import importlib
    importlib.import_module("dlsched.policies")
    from dlsched.core.types import Launch, Plan
    from dlsched.scheduler.core import Scheduler, build_profile
    from dlsched.sim.backend import SimBackend
    from dlsched.sim.engine import P_ARRIVAL, Arrive
    over = {"round_s": float(round_s)} if round_s else None
    profile = build_profile(policy, over, runtime=runtime)
    cal = state.calibration
    backend = SimBackend(state.cluster, [], restart_delay_s=cal.restart_delay_s if cal else 30.0,
                         start_delay_s=cal.start_delay_s if cal else 0.0, record_rates=False)
    if cal is not None:
        from dlsched.workload.calibrated import CalibratedSpeedModel
        backend.speed = CalibratedSpeedModel(state.cluster, cal, None)
    sched = Scheduler(profile, seed=seed, tenancy=tenancy)
    sched.check_backend(backend)
    sched._stats = backend.job_stats
    for spec in state.jobs:                     # every job is known at 0 (in submission order)
        backend.heap.push(0.0, P_ARRIVAL, Arrive(spec))
    for e in backend.poll() or []:
        sched.handle(e, backend)
    if state.running:
        delay, backend.start_delay_s = backend.start_delay_s, 0.0   # they started long ago
        sched.execute(Plan([Launch(r.job_id, r.placement) for r in state.running]), backend)
        backend.start_delay_s = delay
        for r in state.running:
            rec = sched.jobs[r.job_id]
            rec.first_start_s = r.started_s
            rec.attained_gpu_s = r.attained_gpu_s
    backend.wake_at(0.0)                         # a round now, for the waiting jobs
    sched.run(backend)
    return _prediction(sched, state, policy, horizon_s)


def _prediction(sched, state: State, policy: str, horizon_s: float) -> Prediction:
    jobs = {}
    for spec in state.jobs:
        rec = sched.jobs[spec.job_id]
        start, finish = rec.first_start_s, rec.finish_s
        jobs[spec.job_id] = {"submit_s": spec.submit_time_s, "start_s": start, "finish_s": finish,
                             "wait_s": None if start is None else start - spec.submit_time_s,
                             "jct_s": None if finish is None else finish - spec.submit_time_s}
    waits = [j["wait_s"] for j in jobs.values() if j["wait_s"] is not None]
    jcts = [j["jct_s"] for j in jobs.values() if j["jct_s"] is not None]
    gpus = float(sum(n.gpus for n in state.cluster.nodes)) or 1.0
    # GPUs held over [0, horizon]: the scheduler's timeline is (time, allocated GPUs, ...) samples
    held, last_t, last_g = 0.0, 0.0, 0.0
    for t, g, *_ in sched.timeline:
        t = min(max(t, 0.0), horizon_s)
        held += last_g * (t - last_t)
        last_t, last_g = t, g
    held += last_g * (horizon_s - last_t)
    ends = [j["finish_s"] for j in jobs.values() if j["finish_s"] is not None]
    return Prediction(policy, jobs, sum(waits) / len(waits) if waits else 0.0,
                      sum(jcts) / len(jcts) if jcts else 0.0, held / (gpus * horizon_s) if horizon_s > 0 else 0.0,
                      horizon_s, max(ends) if ends else 0.0)
