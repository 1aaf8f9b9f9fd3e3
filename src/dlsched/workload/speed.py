"""The speed model: how fast a placed DL job trains.

    iteration time  t = compute + comm - overlap * min(compute, comm)

compute: the per-GPU share of the global batch times the model's per-sample time on the slowest
GPU type the job spans (synchronous training waits for the slowest worker), plus a fixed
per-iteration overhead.

comm (per iteration), two patterns:
- all-reduce over n participating GPUs moves 2(n-1)/n x model bytes over the slowest link the job
  spans: the GPU link inside one node; each NIC of the nodes it spans; each rack uplink when it
  spans racks.
- parameter servers: each worker pushes its gradient share (model bytes / #PS) to every PS and
  pulls the same back, so a PS NIC carries (#remote workers x model / #PS) each way per
  iteration. Larger batches mean fewer iterations per epoch, hence fewer exchanges (seed 000:
  AlexNet epoch 330 s at batch 16, 49 s at batch 128).

Links (NICs, rack uplinks) that running jobs share are divided max-min fairly among the jobs
using them (each job is one flow per link: progressive filling, `max_min_shares`). A link's
load is its busiest direction (links are full duplex). The GPU link inside a node is not shared.

Jobs sharing a GPU slow each other by an interference factor: a job's speed is multiplied by
`factor(model, other)` for each co-runner on its GPUs. An explicit table entry wins (overridable
per run: SpeedParams.interference, or `--speed-config`); otherwise the default comes from the
models' solo GPU utilisations u (models.py): two jobs whose utilisations add up to at most 1 fit
side by side, otherwise they share the GPU in proportion,

    factor = CONTENTION * min(1, 1 / (u_self + u_other))

with CONTENTION = 0.9 (cache and memory-bandwidth contention). Light models pack well (two VAEs:
0.9 each, 1.8x aggregate), heavy ones lose a little to time slicing (two ResNet-50s: 0.47 each),
the shape of Gandiva's Table 1 (seed 001).

Intra-server locality (GPU affinity groups, Gandiva's Figure 1): a node may split its GPUs
into affinity groups (`gpus_per_group`: GPUs under one PCIe switch or socket). An all-reduce
inside one node whose GPUs span several groups goes through the CPU interconnect at
CROSS_GROUP_FACTOR x the node's GPU link (0.4: about 4-5 GB/s across sockets against 10-12 GB/s
under one PCIe switch; our assumption), so a 2-GPU job within one group runs faster than across
groups. Nodes without groups (gpus_per_group 0, every preset) are unaffected.

Jobs whose work is a duration from a trace (run time at the ideal placement) progress at
rate ideal_t / t: 1.0 when packed on one node without contention, less when spread or
contended. Jobs with no known model progress at rate 1 whatever their placement: the model has
nothing to go on.

Measured speeds (SpeedParams.measured, default on): all-reduce jobs of the six Pollux
applications on T4 GPUs take their iteration time from Pollux's measurements instead of the
formula above (`dlsched.workload.measured`, which documents the semantics); their
communication is inside the measured time, so they do not share links max-min.
"""
from __future__ import annotations

import heapq
import math

from dataclasses import dataclass, field
import numpy as np

from dlsched.cluster.topology import Cluster
from dlsched.core.types import GPU, JobSpec, Role, TaskPlacement
from dlsched.workload.measured import measured_iter_time, packed_placement, uses_measured
from dlsched.workload.models import ModelProfile, get_model

GBPS = 1e9 / 8.0  # bytes/s per Gbps

# Explicit speed multipliers by (model, other model); "*" matches any model. Empty by default:
# the utilisation formula below applies. Jobs with no known model get UNKNOWN_FACTOR.
INTERFERENCE: dict[tuple[str, str], float] = {}
CONTENTION = 0.9
UNKNOWN_FACTOR = 0.5
CROSS_GROUP_FACTOR = 0.4   # GPU link across affinity groups of one node, relative to within one


@dataclass(frozen=True)
class SpeedParams:
    """Run-wide speed-model settings (overridable in a run's config)."""
    interference: dict = field(default_factory=lambda: dict(INTERFERENCE))
    overlap: float | None = None   # overrides every model's overlap when set
    # Measured speeds for the Pollux applications (workload/measured.py); False: analytic model.
    measured: bool = True
    # Model profiles by (lower-case) name, looked up before the zoo: a model the zoo does not
    # have, e.g. one whose per-sample time, overhead and size were fitted to a runtime's
    # measurements (experiment seed000-batch-size).
    models: dict = field(default_factory=dict)
    # A throughput table (dlsched.workload.throughputs): a job whose model is one of its job
    # types runs at the table's steps/s for its GPU count on its slowest GPU type, no network
    throughputs: object | None = None
    # Re-share windows (dlsched.sim.rates, docs/simulator.md "Re-share windows"): once one
    # change re-shares a region of hundreds of flows, link changes wait for the next multiple of
    # this many seconds and are applied together; 0: exact max-min shares at every event.
    reshare_window_s: float = 300.0

    def knows(self, name: str | None) -> bool:
        """Whether a job of model `name` has a speed that depends on where it runs."""
        t = self.throughputs
        return self.model(name) is not None or (t is not None and name is not None and t.has(name))

    def model(self, name: str | None) -> ModelProfile | None:
        """The profile of model `name`: this run's own (`models`), else the zoo's."""
        if name is not None and str(name).lower() in self.models:
            return self.models[str(name).lower()]
        return get_model(name)

    def factor(self, model: str | None, other: str | None) -> float:
        m, o = model or "*", other or "*"
        for key in ((m, o), (m, "*"), ("*", o), ("*", "*")):
            if key in self.interference:
                return float(self.interference[key])
        pm, po = self.model(model), self.model(other)
        if pm is None or po is None:
            return UNKNOWN_FACTOR
        return CONTENTION * min(1.0, 1.0 / (pm.gpu_util + po.gpu_util))


def load_speed_config(ref) -> SpeedParams:
    """A --speed-config YAML: {overlap: 0.5, measured: false, reshare_window_s: 0,
    interference: [{model: vae, other: "*", factor: 0.9}]}."""
    from dlsched.core.config import read_yaml
    from dlsched.core.errors import ConfigError
    file = str(ref)
    cfg = read_yaml(ref, "speed config") or {}
    if not isinstance(cfg, dict):
        raise ConfigError("speed", "must be a mapping", file=file)
    unknown = set(cfg) - {"overlap", "interference", "measured", "reshare_window_s"}
    if unknown:
        raise ConfigError(sorted(unknown)[0], "unknown key (allowed: overlap, interference, measured, "
                          "reshare_window_s)", file=file)
    window = cfg.get("reshare_window_s", SpeedParams.reshare_window_s)
    if isinstance(window, bool) or not isinstance(window, (int, float)) or not 0 <= window <= 86400:
        raise ConfigError("reshare_window_s", f"must be a number of seconds in [0, 86400], got {window!r}",
                          file=file)
    measured = cfg.get("measured", True)   # measured Pollux speeds on/off (workload/measured.py)
    if not isinstance(measured, bool):
        raise ConfigError("measured", f"must be true or false, got {measured!r}", file=file)
    overlap = cfg.get("overlap")
    if overlap is not None and (isinstance(overlap, bool) or not isinstance(overlap, (int, float))
                                or not 0 <= overlap <= 1):
        raise ConfigError("overlap", f"must be a number in [0, 1], got {overlap!r}", file=file)
    table = dict(INTERFERENCE)
    entries = cfg.get("interference") or []
    if not isinstance(entries, list):
        raise ConfigError("interference", "must be a list of {model, other, factor}", file=file)
    for i, e in enumerate(entries):
        path = f"interference[{i}]"
        if not isinstance(e, dict) or set(e) - {"model", "other", "factor"} or "factor" not in e:
            raise ConfigError(path, "must be a mapping with model, other (default *) and factor", file=file)
        f = e["factor"]
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 2:
            raise ConfigError(f"{path}.factor", f"must be a number in (0, 2], got {f!r}", file=file)
        for key in ("model", "other"):
            name = str(e.get(key, "*")).lower()
            if name != "*" and get_model(name) is None:
                raise ConfigError(f"{path}.{key}", f"unknown model {name!r}", file=file)
        table[(str(e.get("model", "*")).lower(), str(e.get("other", "*")).lower())] = float(f)
    return SpeedParams(interference=table, overlap=None if overlap is None else float(overlap),
                       measured=measured, reshare_window_s=float(window))


@dataclass
class JobComm:
    """A placed job's per-iteration profile, before link sharing."""
    compute_s: float
    local_comm_s: float                 # inside one node, unshared
    link_bytes: dict[int, float]        # link id -> bytes per iteration (busiest direction)
    overlap: float
    ideal_iter_s: float
    nic_bytes: float                    # bytes sent over NICs per iteration
    cross_rack_bytes: float             # bytes crossing rack uplinks per iteration
    iteration_based: bool               # work in iterations (True) or ideal seconds (False)
    measured: bool = False              # compute_s is a measured iteration time (measured.py)
    # the most bytes on one link (rate_at), once link_bytes is known
    max_link_bytes: float = field(default=0.0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.max_link_bytes = max(self.link_bytes.values(), default=0.0)

    def iter_time(self, shares: dict[int, float] | None) -> float:
        comm = self.local_comm_s
        if self.link_bytes:
            comm += max(b / shares[link] for link, b in self.link_bytes.items()) if shares else \
                float("inf")
        c = self.compute_s
        return c + comm - self.overlap * min(c, comm)

    def rate(self, shares: dict[int, float] | None) -> float:
        """Work units per second: iterations/s, or ideal-seconds per second."""
        t = self.iter_time(shares)
        return 1.0 / t if self.iteration_based else self.ideal_iter_s / t

    def rate_at(self, share: float) -> float:
        """rate({link: share for every link}) for a job with link_bytes, the same float: one
        max-min flow has one rate on all its links, and b / share grows with b (IEEE division
        is monotonic), so the slowest link is the one with the most bytes. The simulator's
        re-rate after a re-share, without a dict per job."""
        comm = self.local_comm_s
        comm += self.max_link_bytes / share
        c = self.compute_s
        t = c + comm - self.overlap * min(c, comm)
        return 1.0 / t if self.iteration_based else self.ideal_iter_s / t


class SpeedModel:
    """Builds JobComm profiles for placements on one cluster; holds the link capacities.

    Link ids: NIC of node n is link n; the uplink of rack r is link (num_nodes + r)."""

    def __init__(self, cluster: Cluster, params: SpeedParams | None = None):
        self.cluster = cluster
        self.params = params or SpeedParams()
        n = cluster.num_nodes
        caps = [node.nic_gbps * GBPS for node in cluster.nodes]
        caps += [u * GBPS for u in cluster.rack_uplink_gbps]
        self.link_capacity = np.array(caps, dtype=np.float64)
        self.num_nodes = n
        self._rack = cluster.node_rack
        # Python floats, not a numpy array: a job's times made from them would be numpy floats,
        # and so would every event time that follows from them (its finish, the records at it)
        self._gpu_link = [float(node.gpu_link_gbps * GBPS) for node in cluster.nodes]
        # the widest GPU link and NIC (an ideal placement's), as Python floats, read per profile
        self._gpu_link_max = max(self._gpu_link) if n else 0.0
        self._nic_max = float(self.link_capacity[:n].max()) if n else 0.0
        self._gpus_per_node = max(cluster.max_gpus_per_node, 1)
        # A rack uplink at least as wide as its rack's NICs together can never limit a job: each
        # job crossing it also crosses a NIC of that rack, so its capacity constraint is implied
        # by theirs (a non-blocking fabric). The max-min solver may leave such links out, which
        # keeps the components it solves to the jobs that really share something.
        nic_sum = np.zeros(len(cluster.rack_uplink_gbps))
        np.add.at(nic_sum, self._rack, self.link_capacity[:n])
        self.implied_links = frozenset(n + r for r in range(len(nic_sum))
                                       if self.link_capacity[n + r] >= nic_sum[r])

    def solver_links(self, prof: JobComm) -> tuple[int, ...]:
        """The links of `prof` that can limit it (see implied_links), for the max-min solver."""
        links = tuple(link for link in prof.link_bytes if link not in self.implied_links)
        return links or tuple(prof.link_bytes)

    # -- profile of one placement ------------------------------------------------------------
    def profile(self, job: JobSpec, placements: tuple[TaskPlacement, ...],
                tasks: tuple | None = None) -> JobComm | None:
        """None when the job's speed does not depend on placement (no model, or not a DL job).
        `tasks`: the job's current tasks when a Resize changed them (default: as submitted)."""
        table = self.params.throughputs
        if table is not None and job.kind == "dl" and placements and table.has(job.model):
            return table_profile(table, self.cluster, job, placements, job.tasks if tasks is None else tasks)
        model = self.params.model(job.model)
        if model is None or job.kind != "dl" or not placements:
            return None
        tasks = job.tasks if tasks is None else tasks
        workers = [p for p in placements if tasks[p.task].role is Role.WORKER]
        ps = [p for p in placements if tasks[p.task].role is Role.PS]
        nodes = self.cluster.nodes
        gpus = sum(max(tasks[p.task].demand[GPU], 0.0) for p in workers)
        participants = max(int(round(gpus)), len(workers), 1)
        batch = job.batch_size or model.default_batch * participants
        local_bsz = batch / participants
        slow_type = max((nodes[p.node].gpu_type for p in workers),
                        key=lambda t: model.sample_time_s(t), default="none")
        compute = model.overhead_ms / 1000.0 + local_bsz * model.sample_time_s(slow_type)
        overlap = self.params.overlap if self.params.overlap is not None else model.overlap
        M = model.param_bytes
        link_bytes: dict[int, float] = {}
        local = 0.0
        nic_bytes = cross = 0.0
        if job.comm == "ps" and ps:
            P = len(ps)
            share = M / P
            w_nodes: dict[int, int] = {}
            for p in workers:
                w_nodes[p.node] = w_nodes.get(p.node, 0) + 1
            p_nodes: dict[int, int] = {}
            for p in ps:
                p_nodes[p.node] = p_nodes.get(p.node, 0) + 1
            send: dict[int, float] = {}
            for a, wa in w_nodes.items():
                for b, pb in p_nodes.items():
                    vol = wa * pb * share        # each way: push a->b, pull b->a
                    if a == b:
                        local = max(local, 2 * vol / self._gpu_link[a])
                        continue
                    send[a] = send.get(a, 0.0) + vol
                    send[b] = send.get(b, 0.0) + vol
                    nic_bytes += 2 * vol
                    ra, rb = int(self._rack[a]), int(self._rack[b])
                    if ra != rb:
                        for r in (ra, rb):
                            key = self.num_nodes + r
                            link_bytes[key] = link_bytes.get(key, 0.0) + vol
                        cross += 2 * vol
            link_bytes.update(send)
        elif job.comm != "none" and participants > 1:
            vol = 2.0 * (participants - 1) / participants * M
            span = sorted({p.node for p in placements})
            if len(span) == 1:
                local = vol / self._gpu_link[span[0]]
                if nodes[span[0]].gpus_per_group and len(self.cluster.gpu_groups(
                        span[0], [g for p in workers for g in p.gpu_ids])) > 1:
                    local /= CROSS_GROUP_FACTOR    # across affinity groups (sockets)
            else:
                for n in span:
                    link_bytes[n] = vol
                nic_bytes = vol * len(span)
                racks = sorted({int(self._rack[n]) for n in span})
                if len(racks) > 1:
                    for r in racks:
                        link_bytes[self.num_nodes + r] = vol
                    cross = vol * len(racks)
        if self.params.measured:
            # Measured speeds (workload/measured.py): the measured step time includes the
            # all-reduce, so no link_bytes (no max-min sharing); nic_bytes / cross_rack_bytes
            # above are kept for the traffic metrics.
            prof = self._measured_profile(model, job, workers, tasks, nic_bytes, cross)
            if prof is not None:
                return prof
        ideal = self._ideal_iter_s(model, job, participants, compute, overlap, M)
        # A trace duration is the run time at the *submitted* size; a resized job's ideal stays that.
        return JobComm(compute, local, link_bytes, overlap, ideal, nic_bytes, cross,
                       iteration_based=job.iterations is not None)

    def _measured_profile(self, model: ModelProfile, job: JobSpec, workers, tasks,
                          nic_bytes: float, cross: float) -> JobComm | None:
        """The measured-speed profile of a Pollux application's placement, or None when the
        measurements do not apply (see measured.uses_measured)."""
        per_node: dict[int, int] = {}     # node -> GPUs (replicas), in task order
        for p in sorted(workers, key=lambda p: p.task):
            g = max(int(round(tasks[p.task].demand[GPU])), 1)
            per_node[p.node] = per_node.get(p.node, 0) + g
        replicas = sum(per_node.values())
        nodes = self.cluster.nodes
        if not uses_measured(model.name, job.comm, (nodes[n].gpu_type for n in per_node), replicas):
            return None
        batch = job.batch_size or model.default_batch * replicas
        t = measured_iter_time(model.name, tuple(per_node.values()), batch)
        # Ideal (trace durations): the measured time packed on as few nodes as possible, at the
        # submitted size.
        n0 = max(int(round(sum(max(w.demand[GPU], 0.0) for w in job.tasks if w.role is Role.WORKER))),
                 sum(1 for w in job.tasks if w.role is Role.WORKER), 1)
        ideal = measured_iter_time(model.name, packed_placement(n0, self._gpus_per_node),
                                   job.batch_size or model.default_batch * n0)
        return JobComm(t, 0.0, {}, 0.0, ideal, nic_bytes, cross,
                       iteration_based=job.iterations is not None, measured=True)

    def _ideal_iter_s(self, model: ModelProfile, job: JobSpec, n: int, compute: float,
                      overlap: float, M: float) -> float:
        """Iteration time packed on as few nodes as possible with no contention (what a trace's
        duration is taken to mean)."""
        if job.comm == "none" or n <= 1:
            comm = 0.0
        elif job.comm == "ps":
            comm = 2.0 * M / self._gpu_link_max
        else:
            vol = 2.0 * (n - 1) / n * M
            if n <= self._gpus_per_node:
                comm = vol / self._gpu_link_max
            else:
                comm = vol / self._nic_max
        return compute + comm - overlap * min(compute, comm)

    def isolated_iter_time(self, job: JobSpec, placements: tuple[TaskPlacement, ...]) -> float:
        """Iteration time with the job alone on the cluster (full link capacities)."""
        prof = self.profile(job, placements)
        if prof is None:
            raise ValueError(f"job {job.job_id} has no speed profile (model {job.model!r})")
        shares = {link: float(self.link_capacity[link]) for link in prof.link_bytes}
        return prof.iter_time(shares)


def table_rate(table, model: str, gpus: int, gpu_type: str) -> float | None:
    """Steps/s at `gpus` on `gpu_type`; a count the table lacks runs at the largest count below
    it that the table has (a resize to 3 GPUs where it knows 1, 2 and 4 runs as 2)."""
    r = table.steps_per_s(model, gpus, gpu_type)
    if r is None:
        below = [c for c in table.gpu_counts(model) if c < gpus]
        r = table.steps_per_s(model, max(below), gpu_type) if below else None
    return r if r is not None and r > 0 else None        # 0 steps/s: the job cannot run there


def table_profile(table, cluster: Cluster, job: JobSpec, placements, tasks) -> JobComm:
    """A job's profile from a throughput table: one iteration (step) takes 1 / steps/s of its
    GPU count on the slowest GPU type it holds; nothing on the network (the table's speeds
    include the job's communication). A duration_s is run time on the table's reference type
    at the submitted count. A type with no entry gives a rate of 0 (the placement filter keeps
    jobs off such types: JobSpec.gpu_types)."""
    nodes = cluster.nodes
    workers = [p for p in placements if tasks[p.task].role is Role.WORKER] or list(placements)
    gpus = max(int(round(sum(max(tasks[p.task].demand[GPU], 0.0) for p in workers))), 1)
    rates = [table_rate(table, job.model, gpus, t) for t in {nodes[p.node].gpu_type for p in workers}]
    step = min((r for r in rates if r is not None), default=0.0) if None not in rates else 0.0
    t = 1.0 / step if step > 0 else math.inf
    n0 = max(int(round(sum(max(w.demand[GPU], 0.0) for w in job.tasks if w.role is Role.WORKER))), 1)
    ref = table.reference
    r0 = table_rate(table, job.model, n0, ref) if ref is not None else None
    ideal = 1.0 / r0 if r0 else (t if math.isfinite(t) else 1.0)
    return JobComm(t, 0.0, {}, 0.0, ideal, 0.0, 0.0, iteration_based=job.iterations is not None, measured=True)


def max_min_shares(flows: dict[str, tuple[int, ...]], capacity,
                   frozen_at: dict[str, int] | None = None) -> dict[str, float]:
    """Max-min fair rate of each flow (bytes/s) by progressive filling.

    `flows` maps a flow id to the links it crosses; every flow is an elephant (it takes all the
    bandwidth it is given). Returns the rate each flow gets; a flow gets the same rate on every
    link it crosses (its bottleneck's fair share). `frozen_at`, if given, gets the link at which
    each flow froze (its bottleneck).

    The most constrained link (least remaining capacity per unfrozen flow) is taken from a heap
    whose stale entries are skipped, so a solve costs O(I log L) for I flow-link incidences and L
    links (the first version rescanned every link per frozen link: O(L^2 F)). A link's share only
    grows as flows elsewhere freeze, so the heap's newest entry for a link is its current one."""
    users: dict[int, list[str]] = {}
    for f, links in flows.items():
        for link in links:
            lst = users.get(link)
            if lst is None:
                users[link] = [f]
            else:
                lst.append(f)
    remaining = {link: float(capacity[link]) for link in users}
    count = {link: len(fs) for link, fs in users.items()}
    heap = [(remaining[link] / n, link) for link, n in count.items()]
    heapq.heapify(heap)
    rate: dict[str, float] = {}
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        share, link = pop(heap)
        n = count[link]
        if n == 0 or share != remaining[link] / n:
            continue   # stale: the link's flows froze elsewhere since this entry
        for f in users[link]:
            if f in rate:
                continue
            rate[f] = share
            if frozen_at is not None:
                frozen_at[f] = link
            for other in flows[f]:
                left = remaining[other] - share
                remaining[other] = left if left > 0.0 else 0.0
                count[other] -= 1
                if other != link and count[other] > 0:
                    push(heap, (remaining[other] / count[other], other))
        count[link] = 0
    return rate
