"""The Python API: `dlsched.simulate(cluster, workload, policy)` for scripts and notebooks."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import dlsched.policies  # noqa: F401  (every policy registers itself on import)
from dlsched.cluster.topology import Cluster, load_cluster
from dlsched.core.config import read_yaml
from dlsched.core.errors import ConfigError, DlschedError
from dlsched.core.types import JobSpec
from dlsched.metrics.result import SimResult, build_result
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.scheduler.framework import REGISTRY
from dlsched.sim.backend import SimBackend
from dlsched.workload.speed import SpeedParams


def load_policy_config(ref: str | Path | dict | None) -> dict:
    """Parse a --policy-config YAML: {policies: {<profile>: {gang, blocking, round_s, params}}}."""
    if ref is None:
        return {}
    file = None
    if isinstance(ref, dict):
        cfg = ref
    else:
        file = str(ref)
        cfg = read_yaml(ref, "policy config") or {}
    if not isinstance(cfg, dict) or set(cfg) - {"policies"}:
        bad = min(set(cfg) - {"policies"}) if isinstance(cfg, dict) else "(top level)"
        raise ConfigError(bad, "unknown key (the file holds `policies: {<profile>: {...}}`)", file=file)
    pol = cfg.get("policies") or {}
    if not isinstance(pol, dict):
        raise ConfigError("policies", "must be a mapping of profile name to settings", file=file)
    for name, settings in pol.items():
        if name not in REGISTRY.names("profile"):
            raise ConfigError(f"policies.{name}", f"unknown policy (registered: {', '.join(REGISTRY.names('profile'))})", file=file)
        if not isinstance(settings, dict):
            raise ConfigError(f"policies.{name}", "must be a mapping", file=file)
        try:
            build_profile(name, settings)   # validate now, before any run starts
        except ConfigError as e:
            raise ConfigError(e.path, e.detail, file=file) from None
    return pol


def make_tenancy(queues, mode: str | None = None, settings: dict | None = None, jobs=(), workload_file=None):
    """The Tenancy for a queue file or tree (None: None), its jobs' queues checked."""
    if queues is None:
        return None
    from dlsched.tenancy import QueueTree, load_queues
    from dlsched.tenancy.engine import Tenancy
    tree = queues if isinstance(queues, QueueTree) else load_queues(queues)
    t = Tenancy(tree, mode, settings)
    t.check_jobs(jobs, workload_file)
    return t


def with_throughputs(ref, speed: SpeedParams | None, jobs: list[JobSpec]) -> tuple[SpeedParams, list[JobSpec]]:
    """The speed settings with the table, and the jobs with the GPU types each may run on: those
    with an entry for its GPU count (or a smaller one) in the table, for the jobs whose model the
    table has (a job with no such type is rejected at arrival: no node of its types)."""
    import dataclasses

    from dlsched.workload.speed import table_rate
    from dlsched.workload.throughputs import ThroughputTable, load_throughputs
    table = ref if isinstance(ref, ThroughputTable) else load_throughputs(ref)
    speed = dataclasses.replace(speed or SpeedParams(), throughputs=table)
    out, kept = [], {}
    types = table.gpu_types()
    for j in jobs:
        if j.kind != "dl" or j.gpu_type is not None or not table.has(j.model):
            out.append(j)
            continue
        g = max(int(round(j.gpus)), 1)
        key = (j.model, g)
        allowed = kept.get(key)
        if allowed is None:
            # the types it runs on at a speed above 0 (Gavel's table has 0.0 where a job does not fit)
            allowed = kept[key] = tuple(t for t in types if (table_rate(table, j.model, g, t) or 0.0) > 0)
        out.append(dataclasses.replace(j, gpu_types=allowed))
    return speed, out


def check_work(jobs: list[JobSpec], speed: SpeedParams | None) -> None:
    """Every job given in iterations of a named model has one the speed model knows (the zoo, or
    the run's throughput table): otherwise its iterations have no duration. One DlschedError
    naming the first such job."""
    from dlsched.core.errors import DlschedError
    speed = speed or SpeedParams()
    known: dict = {}
    for j in jobs:
        if j.iterations is None or j.kind != "dl" or j.model is None:
            continue                  # (no model: the backend's own measure of a step, the runtime's)
        ok = known.get(j.model)
        if ok is None:
            ok = known[j.model] = speed.knows(j.model)
        if not ok:
            raise DlschedError(f"job {j.job_id}: its {j.iterations:g} iterations need a model the speed model knows; "
                               f"{j.model!r} is in neither the model zoo nor a throughput table (--throughputs)")


def simulate(cluster: str | Path | Cluster, workload: str | Path | list[JobSpec], policy: str = "fifo", *,
             seed: int = 0, policy_config: str | Path | dict | None = None, restart_delay_s: float = 30.0,
             speed: SpeedParams | None = None, node_events=(), workload_format: str | None = None,
             progress: Callable[[float, int], None] | None = None, record_rates: bool = True,
             start_delay_s: float = 0.0, queues=None, tenancy: str | None = None,
             tenancy_settings: dict | None = None, throughputs=None, semantics: str = "native",
             window: tuple[int, int] | None = None) -> SimResult:
    """Run `policy` on `workload` over `cluster` and return its metrics.

    cluster: a preset name or YAML path; workload: a file (any supported format), a generator
    name, or a list of JobSpec; policy: a registered profile name (`dlsched policies`); queues: a
    queue file (YAML) or a QueueTree, enforced in the tenancy mode `tenancy` (dlsched.tenancy.
    modes) with `tenancy_settings`; None: one tenant, no quotas. throughputs: a throughput table
    (a bundled name such as `gavel`, a file, or a ThroughputTable; dlsched.workload.throughputs)
    that sets the speed of every job whose model is one of its job types. semantics: "native"
    (this engine) or "gavel" (Gavel's round mechanism, dlsched.sim.gavel: a gavel-* policy, the
    table `throughputs` or Gavel's, and `window`: the positions of the jobs that must finish) or
    "tiresias" (the Tiresias simulator's rules, dlsched.sim.tiresias: fifo or tiresias, no
    (re)start cost - restart_delay_s and start_delay_s are not used) or "pollux" (the Pollux
    simulator's settings, dlsched.sim.pollux: tiresias or optimus, a 30 s (re)start delay - the
    two delays given are not used -, rounds at multiples of 60 s, Optimus early_factor 1.0)."""
    if semantics not in ("native", "gavel", "tiresias", "pollux"):
        raise DlschedError(f"semantics: must be native, gavel, tiresias or pollux, got {semantics!r}")
    if semantics == "tiresias":
        from dlsched.sim import tiresias as tsem
        tsem.check_policy(policy)
        restart_delay_s, start_delay_s = tsem.RESTART_DELAY_S, tsem.START_DELAY_S
    if semantics == "pollux":
        from dlsched.sim import pollux as psem
        psem.check_policy(policy)
        restart_delay_s, start_delay_s = psem.RESTART_DELAY_S, psem.START_DELAY_S
    cl = load_cluster(cluster)
    if isinstance(workload, (list, tuple)):
        jobs, wname = list(workload), "jobs"
    else:
        from dlsched.workload.io import load_workload
        jobs, wname = load_workload(workload, format=workload_format, seed=seed), Path(str(workload)).name
    if semantics == "gavel":
        from dlsched.sim.gavel import simulate_gavel
        from dlsched.workload.throughputs import ThroughputTable, load_throughputs
        table = throughputs if isinstance(throughputs, ThroughputTable) else load_throughputs(throughputs or "gavel")
        return simulate_gavel(cl, jobs, policy, table, seed=seed, window=window, workload_name=wname, progress=progress)
    if throughputs is not None:
        speed, jobs = with_throughputs(throughputs, speed, jobs)
    check_work(jobs, speed)
    settings = load_policy_config(policy_config).get(policy, {})
    if semantics == "tiresias":
        profile = tsem.profile(policy, settings)
    elif semantics == "pollux":
        profile = psem.profile(policy, settings)
    else:
        profile = build_profile(policy, settings)
    backend = SimBackend(cl, jobs, speed=speed, restart_delay_s=restart_delay_s, node_events=node_events,
                         record_rates=record_rates, start_delay_s=start_delay_s)
    sched = Scheduler(profile, seed=seed, tenancy=make_tenancy(queues, tenancy, tenancy_settings, jobs,
                                                               None if isinstance(workload, (list, tuple)) else str(workload)))
    sched.run(backend, progress=progress)
    return build_result(sched, backend, policy=policy, cluster_name=cl.name, workload_name=wname, release=True)
