"""Liquid's network cost and its immediate (best-fit) placement strategy.

Source: Gu et al., "Liquid: Intelligent Resource Estimation and Network-Efficient Scheduling for
Deep Learning Jobs on Distributed GPU Clusters", IEEE TPDS 2021, as summarised in seed 003 (the
Liquid reading-group slides). The batch strategy (group genetic algorithm) is
`dlsched.policies.actions.liquid_batch`; both share the cost defined here.

Network cost between the nodes of two instances (containers) of a job:

    Cost(n1, n2) = 0                              same node
                 = number of nodes in the rack    same rack
                 = number of nodes in the domain  different racks of one domain
                 = number of nodes in the cluster different domains (our extension: the slides
                                                  know one domain; the next scope up is the cluster)

Score of job kappa (smaller is better):

    Score_k   = lam * Cost_k + (1 - lam) * sum_{j in beta_k} Fitness_j
    Cost_k    = sum_{m <= numps} sum_{n <= numw} Cost(PS_m, W_n)      (parameter-server jobs)
    Fitness_j = -(ReqGPU_j + UsedGPU_j) / TotalGPU_j                  (fuller node -> smaller)

For an all-reduce job (no PS) every pair of instances communicates, so Cost_k sums Cost over all
pairs; a bag of independent tasks (or comm = none) communicates nothing: Cost_k = 0.

Immediate strategy (best fit, the slides' algorithm): for each instance of the job, among the
nodes that can take it (the `fits` filter), place it where Score is smallest. The incremental
Score of putting one instance on node n is

    S(n) = lam * Cost(n) + (1 - lam) * Fitness(n)

with Cost(n) the sum of Cost(n, m) over the job's already placed partners m (this round's
reservations and the instances the job already holds; for a PS job a worker's partners are the
PS and a PS's partners are the workers - the increments add up to Cost_k above; for an
all-reduce job every placed instance is a partner), and Fitness(n) = -(ReqGPU + UsedGPU(n)) /
TotalGPU(n), UsedGPU = capacity - free in the round's transaction (0 on a node without GPUs).

The framework takes the node with the LARGEST score in [0, 1], so the scorer returns the
decreasing affine map of S over the bounds of S for this call:

    lo = -(1 - lam)                 (Fitness >= -1, Cost >= 0)
    hi = lam * k * Cmax             (k partners, Cmax the largest pair cost of the cluster)
    score(n) = (hi - S(n)) / (hi - lo)      (all ones when hi == lo: nothing to distinguish)

One affine map for all candidates of a call keeps the order of S exactly (argmin S = argmax
score, ties to the lowest node id by the framework). Cost and Fitness must not be normalised
separately: that would change their relative weight and so Liquid's choice.

Pre-scheduling data transmission (parameter `prescheduling`, default false; set it in the
profile's params: `liquid: {prescheduling: true}`, for `liquid` and `liquid-immediate`). When a
job reaches its saving phase, the next job may be placed on its GPUs and run its launch phase
(data and model transfer) while the first one saves. The scorer only asks for it: the instance
then needs the backend capability `prescheduling`, which the simulator carries out
(dlsched.sim.phases) and so does the real runtime (dlsched.runtime.runs: the next jobs'
programs and data are loaded into the warm workers of a saving job's nodes).
The placement itself is unchanged: the GPUs of a saving job are simply free in the snapshot.
"""
from __future__ import annotations

import weakref

import numpy as np

from dlsched.cluster.topology import Cluster
from dlsched.core.types import GPU, JobSpec, Role
from dlsched.scheduler.framework import ProfileSpec, register, register_profile, Score

SOURCE = "seed 003 (Liquid, Gu et al., IEEE TPDS 2021)"


class NetworkCost:
    """Liquid's Cost(n1, n2) for one cluster, vectorised over node arrays."""

    def __init__(self, cluster: Cluster):
        n = cluster.num_nodes
        self.num_nodes = n
        self.rack = np.asarray(cluster.node_rack, dtype=np.int64)
        self.domain = np.asarray(cluster.node_domain, dtype=np.int64)
        self.num_racks = int(self.rack.max()) + 1 if n else 0
        self.num_domains = int(self.domain.max()) + 1 if n else 0
        rack_nodes = np.bincount(self.rack, minlength=self.num_racks)
        dom_nodes = np.bincount(self.domain, minlength=self.num_domains)
        # Per node: the cost to a partner on another node of its rack / domain.
        self.rack_cost = rack_nodes[self.rack].astype(np.float64)
        self.domain_cost = dom_nodes[self.domain].astype(np.float64)
        self.cluster_cost = float(n)
        # The largest cost two distinct nodes can have: the bound the scorer normalises by.
        racks_per_dom = np.bincount(np.asarray(cluster.rack_domain, dtype=np.int64),
                                    minlength=self.num_domains)
        if self.num_domains > 1:
            cmax = float(n)
        elif (racks_per_dom > 1).any():
            cmax = float(dom_nodes[racks_per_dom > 1].max())
        elif (rack_nodes > 1).any():
            cmax = float(rack_nodes.max())
        else:
            cmax = 0.0      # a single node: no two instances can be apart
        self.max_pair = cmax

    def pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Cost(a[i], b[i]) elementwise (broadcasting), as float64."""
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        return np.where(a == b, 0.0,
                        np.where(self.rack[a] == self.rack[b], self.rack_cost[a],
                                 np.where(self.domain[a] == self.domain[b], self.domain_cost[a],
                                          self.cluster_cost)))

    def sum_to(self, cands: np.ndarray, partners) -> np.ndarray:
        """sum_m Cost(c, partners[m]) for every candidate node c, in O(cands + partners).

        Counts the partners on the candidate's node, rack and domain instead of forming the
        (candidates x partners) matrix: each partner off the node but in the rack costs the rack
        size, and so on outwards."""
        cands = np.asarray(cands, dtype=np.int64)
        p = np.asarray(partners, dtype=np.int64)
        if p.size == 0:
            return np.zeros(cands.shape, dtype=np.float64)
        on_node = np.bincount(p, minlength=self.num_nodes)[cands]
        in_rack = np.bincount(self.rack[p], minlength=self.num_racks)[self.rack[cands]]
        in_dom = np.bincount(self.domain[p], minlength=self.num_domains)[self.domain[cands]]
        return ((in_rack - on_node) * self.rack_cost[cands]
                + (in_dom - in_rack) * self.domain_cost[cands]
                + (p.size - in_dom) * self.cluster_cost)


# One NetworkCost per live Cluster. Keyed by id (hashing a frozen Cluster hashes every node);
# the weak reference drops the entry when its cluster goes away, before its id can be reused.
_COSTS: dict[int, tuple[weakref.ref, NetworkCost]] = {}


def network_cost(cluster: Cluster) -> NetworkCost:
    """The cached NetworkCost of `cluster`."""
    key = id(cluster)
    hit = _COSTS.get(key)
    if hit is not None and hit[0]() is cluster:
        return hit[1]
    nc = NetworkCost(cluster)
    _COSTS[key] = (weakref.ref(cluster, lambda _ref, k=key: _COSTS.pop(k, None)), nc)
    return nc


def communicates(job: JobSpec, tasks) -> str:
    """'ps' (bipartite PS x worker traffic), 'all' (all-reduce: every pair) or 'none'."""
    if job.kind != "dl" or job.comm == "none":
        return "none"
    return "ps" if any(t.role is Role.PS for t in tasks) else "all"


def partner_nodes(ctx, job: JobSpec, role: Role) -> np.ndarray:
    """Nodes of the instances a new instance of `role` communicates with: the job's
    reservations in this round plus the tasks it already holds."""
    rec = ctx.jobs.get(job.job_id) if ctx.jobs else None
    # a job resized by the round's allocation (Liquid's estimate) is placed with those tasks
    tasks = ctx.allocation.get(job.job_id) or (rec.tasks if rec is not None else job.tasks)
    mode = communicates(job, tasks)
    if mode == "none":
        return np.zeros(0, dtype=np.int64)
    placed = list(ctx.txn.reserved(job.job_id))
    if rec is not None:
        placed.extend(rec.placed.values())
    if not placed:
        return np.zeros(0, dtype=np.int64)
    if mode == "all":
        return np.fromiter((tp.node for tp in placed), dtype=np.int64, count=len(placed))
    is_ps = {t.index: t.role is Role.PS for t in tasks}
    want_ps = role is not Role.PS          # workers talk to PS, PS talk to workers
    return np.array([tp.node for tp in placed if is_ps.get(tp.task, False) == want_ps], dtype=np.int64)


def gpu_fitness(capacity: np.ndarray, free: np.ndarray, nodes: np.ndarray, req_gpu: float) -> np.ndarray:
    """Fitness = -(ReqGPU + UsedGPU) / TotalGPU per node; 0 on a node without GPUs.

    Clipped to [-1, 0]: on the nodes a filter lets through Req + Used <= Total already; the clip
    only keeps a node that cannot take the task (scored anyway by a caller) inside the bounds."""
    total = capacity[nodes, GPU]
    used = total - free[nodes, GPU]
    fit = np.where(total > 0, -(req_gpu + used) / np.where(total > 0, total, 1.0), 0.0)
    return np.clip(fit, -1.0, 0.0)


def check_lam(lam: float) -> float:
    """lam, Liquid's weight of network cost against GPU fitness, as a float in [0, 1]."""
    lam = float(lam)
    if not np.isfinite(lam) or not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam!r}")
    return lam


@register("score", "liquid", source=SOURCE)
class LiquidScorer(Score):
    """Liquid best fit: lam * network cost to the job's placed instances + (1 - lam) * GPU fitness."""

    def __init__(self, lam: float = 0.5, prescheduling: bool = False):
        self.lam = check_lam(lam)
        if not isinstance(prescheduling, bool):
            raise ValueError(f"prescheduling must be true or false, got {prescheduling!r}")
        self.needs = frozenset(("prescheduling",)) if prescheduling else frozenset()

    def raw(self, ctx, job, task, free, nodes) -> tuple[np.ndarray, int]:
        """Liquid's S(n) for each node (smaller is better) and the number of partners."""
        nodes = np.asarray(nodes, dtype=np.int64)
        partners = partner_nodes(ctx, job, task.role)
        cost = network_cost(ctx.snap.cluster).sum_to(nodes, partners)
        fit = gpu_fitness(ctx.snap.cluster.capacity, free, nodes, task.demand[GPU])
        return self.lam * cost + (1.0 - self.lam) * fit, len(partners)

    def score(self, ctx, job, task, free, nodes) -> np.ndarray:
        """(hi - S) / (hi - lo) over the bounds of S (module docstring): argmax = Liquid's argmin."""
        s, k = self.raw(ctx, job, task, free, nodes)
        lo = -(1.0 - self.lam)
        hi = self.lam * k * network_cost(ctx.snap.cluster).max_pair
        if hi - lo <= 0.0:
            return np.ones(len(s))
        return np.clip((hi - s) / (hi - lo), 0.0, 1.0)


register_profile(ProfileSpec(
    name="liquid-immediate", source=SOURCE,
    description="Liquid's immediate strategy: FIFO, gang, each instance on the node with the "
                "smallest lam*network cost + (1-lam)*GPU fitness (best fit near the job's other "
                "instances); non-blocking, since Liquid places each job as it comes and lets a "
                "later job start when an earlier one does not fit; with liquid_estimate's "
                "estimate: true, jobs are placed by their estimated requirement vector",
    order="fifo", allocate="liquid_estimate", filters=("fits",), scores=(("liquid", 1.0),),
    placers=("liquid_resize",), gang=True, blocking=False))
