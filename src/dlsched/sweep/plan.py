"""`dlsched plan`: the smallest cluster, and the best policy on it, that meets a target.

One node group of the cluster (--group, default the first) is scaled; everything else stays. For
each policy (and each tenant with --tenant: the jobs of that user / Philly virtual cluster
alone), the smallest node count whose run meets the target is found by a parallel k-section on
Ray: each round simulates k sizes spread over the interval still open, for every search at once,
and keeps the smallest size that met the target and the largest that missed it. A run meets the
target when its metric does and every job finished (none rejected or left waiting). The metric is
assumed to improve (or stay) as nodes are added; where it does not, the answer is a size that
meets the target next to a smaller one that missed it.

If the cluster as given misses the target, the upper end doubles (up to --max-nodes) until it
meets it. The answer: the smallest size over the policies; between policies that meet the target
at that size, the one with the best metric there.
"""
from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from dlsched.core.errors import DlschedError

METRICS = ("mean_jct_s", "median_jct_s", "p95_jct_s", "p99_jct_s", "makespan_s", "mean_wait_s",
           "median_wait_s", "p95_wait_s", "p99_wait_s", "gpu_util", "effective_gpu_util")
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_NODES = 100_000


@dataclass(frozen=True)
class Target:
    metric: str
    op: str
    value: float

    def met(self, metrics: dict) -> bool:
        v = metrics.get(self.metric)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return False
        if metrics.get("rejected") or metrics.get("unfinished"):
            return False
        return v <= self.value if self.op == "<=" else v >= self.value

    def text(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


def parse_target(text: str) -> Target:
    """`p95_wait_s<=3600`, `p95_wait_s<=1h`, `mean_jct_s<=2d`, `gpu_util>=0.8`."""
    m = re.fullmatch(r"\s*([a-z0-9_]+)\s*(<=|>=)\s*([0-9.eE+-]+)\s*([smhd]?)\s*", text or "")
    if not m:
        raise DlschedError(f"--target {text!r}: give METRIC<=VALUE or METRIC>=VALUE, e.g. p95_wait_s<=1h")
    metric, op, num, unit = m.groups()
    if metric not in METRICS:
        raise DlschedError(f"--target {text!r}: unknown metric {metric!r} (metrics: {', '.join(METRICS)})")
    try:
        value = float(num) * UNITS.get(unit or "s", 1.0)
    except ValueError:
        raise DlschedError(f"--target {text!r}: {num!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise DlschedError(f"--target {text!r}: the value must be a finite number >= 0")
    if unit and metric.endswith("util"):
        raise DlschedError(f"--target {text!r}: {metric} is a fraction, it takes no time unit")
    return Target(metric, op, value)


def cluster_spec(ref: str) -> dict:
    """The spec (node groups) of a preset or a cluster YAML file, to scale a group of."""
    from dlsched.cluster.topology import is_preset, load_cluster, preset_spec
    from dlsched.core.config import read_yaml
    load_cluster(ref)                      # validates, with the usual errors
    return preset_spec(ref) if is_preset(ref) else read_yaml(ref, "cluster file")


def scaled(spec: dict, group: int, count: int, name: str):
    from dlsched.cluster.topology import cluster_from_dict
    s = copy.deepcopy(spec)
    s["node_groups"][group]["count"] = int(count)
    s["name"] = name
    return cluster_from_dict(s)


@dataclass
class Search:
    """One policy's (and tenant's) search: sizes tried and whether each met the target."""
    policy: str
    tenant: str | None
    lo: int                       # largest size known to miss (or min - 1)
    hi: int                       # smallest size known to meet (or None-like: cap + 1)
    cap: int
    probe: int = 0                # while the upper end is unknown: the next size to try
    upper_known: bool = False
    tried: dict[int, dict] = field(default_factory=dict)

    def active(self) -> bool:
        return self.hi - self.lo > 1 if self.upper_known else self.lo < self.cap

    def points(self, k: int) -> list[int]:
        """The sizes to try this round: the probe (doubling), then up to k k-section points."""
        pts = next_points(self, k) if self.upper_known else [self.probe]
        return [p for p in pts if p not in self.tried]

    def update(self) -> None:
        """Narrow (lo, hi) from what was tried; double the probe while it still misses."""
        if not self.upper_known:
            p = self.probe
            if p in self.tried and self.tried[p]["met"]:
                self.hi, self.upper_known = p, True
            elif p in self.tried:
                self.lo, self.probe = p, min(p * 2, self.cap)
            return
        self.hi = min([self.hi] + [n for n, t in self.tried.items() if t["met"]])
        self.lo = max([self.lo] + [n for n, t in self.tried.items() if not t["met"] and n < self.hi])

    def answer(self) -> int | None:
        return self.hi if self.hi in self.tried and self.tried[self.hi]["met"] else None


def next_points(s: Search, k: int) -> list[int]:
    """Up to k untried sizes spread evenly over (lo, hi)."""
    lo, hi = s.lo, min(s.hi, s.cap + 1)
    span = hi - lo - 1
    if span <= 0:
        return []
    if span <= k:
        pts = list(range(lo + 1, hi))
    else:
        pts = sorted({lo + max(1, round((i + 1) * (hi - lo) / (k + 1))) for i in range(k)})
    return [p for p in pts if lo < p < hi and p not in s.tried][:k]


@dataclass
class PlanOutcome:
    target: Target
    group: int
    group_name: str
    gpus_per_node: int
    searches: list[Search]

    def answers(self) -> dict:
        """Per tenant (None: the whole workload): {nodes, policy, metric} or None."""
        out: dict = {}
        for tenant in dict.fromkeys(s.tenant for s in self.searches):
            best = None
            for s in self.searches:
                if s.tenant != tenant or s.answer() is None:
                    continue
                n = s.answer()
                v = s.tried[n]["metrics"][self.target.metric]
                if best is None or n < best[0] or (n == best[0] and (v < best[2] if self.target.op == "<="
                                                                     else v > best[2])):
                    best = (n, s.policy, v)
            out[tenant] = None if best is None else {"nodes": best[0], "gpus": best[0] * self.gpus_per_node,
                                                     "policy": best[1], "metric": best[2]}
        return out

    def curve(self) -> list[dict]:
        rows = []
        for s in self.searches:
            for n in sorted(s.tried):
                t = s.tried[n]
                rows.append({"tenant": s.tenant or "", "policy": s.policy, "nodes": n,
                             "gpus": n * self.gpus_per_node, self.target.metric: t["metrics"].get(self.target.metric),
                             "finished": t["metrics"].get("finished"), "jobs": t["metrics"].get("jobs"),
                             "met": t["met"]})
        return rows


def run_plan(workload: str, cluster: str, policies: list[str], target: Target, *, group: int = 0,
             min_nodes: int = 1, max_nodes: int | None = None, tenants: list[str] | None = None,
             seed: int = 0, address: str | None = None, workers: int | None = None,
             progress=None, queues: str | None = None, tenancy: str | None = None) -> PlanOutcome:
    from dlsched.sweep.engine import _task, ray_session
    from dlsched.sweep.cells import error_line
    from dlsched.sweep.grid import Cell
    from dlsched.workload.io import load_workload
    spec = cluster_spec(cluster)
    groups = spec["node_groups"]
    if not 0 <= group < len(groups):
        raise DlschedError(f"--group {group}: the cluster has node groups 0..{len(groups) - 1}")
    g = groups[group]
    base = int(g.get("count") or 1)
    cap = min(max_nodes or MAX_NODES, MAX_NODES)
    if min_nodes < 1 or min_nodes > cap:
        raise DlschedError(f"--min-nodes {min_nodes}: must be 1..{cap} (--max-nodes)")
    jobs = load_workload(workload, seed=seed)
    params = _tenancy_params(queues, tenancy, jobs, workload)
    sets: dict[str | None, list] = {None: jobs}
    if tenants:
        users = {}
        for j in jobs:
            users.setdefault(j.user, []).append(j)
        missing = [t for t in tenants if t not in users]
        if missing:
            top = sorted(users, key=lambda u: -len(users[u]))[:8]
            raise DlschedError(f"--tenant {missing[0]}: no job of that user in the workload "
                               f"(the largest: {', '.join(map(str, top))})")
        sets = {t: users[t] for t in tenants}
    name = Path(str(cluster)).stem
    start = max(min(base, cap), min_nodes)
    searches = [Search(p, t, lo=min_nodes - 1, hi=cap + 1, cap=cap, probe=start) for t in sets for p in policies]
    with ray_session(address, workers) as ray:
        task = _task(ray)
        refs = {t: ray.put(js) for t, js in sets.items()}
        cpus = max(int(ray.cluster_resources().get("CPU", 1)), 1)
        rounds = 0
        while True:
            active = [s for s in searches if s.active()]
            if not active:
                break
            k = max(1, cpus // len(active)) if len(active) < cpus else 1
            batch = []
            for s in active:
                batch += [(s, p) for p in s.points(k)]
            if not batch:
                break
            clusters: dict[int, object] = {}
            futures = {}
            for s, n in batch:
                if n not in clusters:
                    clusters[n] = ray.put(scaled(spec, group, n, f"{name}-{n}"))
                cell = Cell(f"{name}-{n}", str(workload), s.policy, seed, params)
                futures[task.remote(cell, clusters[n], refs[s.tenant])] = (s, n)
            for ref, (s, n) in futures.items():
                try:
                    m = ray.get(ref)["metrics"]
                except Exception as e:
                    raise DlschedError(f"plan: {s.policy} on {n} nodes failed: {error_line(e)}") from None
                s.tried[n] = {"metrics": m, "met": target.met(m)}
            for s in active:
                s.update()
            rounds += 1
            if progress:
                progress(rounds, sum(len(s.tried) for s in searches))
    gpus = int(g.get("gpus") or 0)
    return PlanOutcome(target, group, str(g.get("name_prefix") or f"group {group}"), gpus, searches)


def _tenancy_params(queues: str | None, mode: str | None, jobs, workload: str) -> tuple:
    """The cells' `queues` and `tenancy` parameters (a file as an absolute path, for the Ray
    workers), checked against the jobs before any run."""
    from dlsched.cli.tenancy import load_tenancy
    from dlsched.tenancy.tree import BUNDLED
    tree, mode = load_tenancy(queues, mode, jobs, workload)
    if tree is None:
        return ()
    path = queues if queues in BUNDLED else str(Path(queues).resolve())
    return tuple(sorted({"queues": path, **({"tenancy": mode} if mode else {})}.items()))


def write_plan(o: PlanOutcome, out: Path) -> dict[str, Path]:
    import json

    import pandas as pd
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    rows = o.curve()
    paths = {"curve": out / "curve.csv", "plan": out / "plan.json", "plot": out / "curve.png"}
    pd.DataFrame(rows).to_csv(paths["curve"], index=False)
    answers = o.answers()
    paths["plan"].write_text(json.dumps({"target": o.target.text(), "group": o.group,
                                         "answers": {k or "": v for k, v in answers.items()},
                                         "curve": rows}, indent=1, default=str))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for s in o.searches:
        xs = sorted(s.tried)
        ys = [s.tried[n]["metrics"].get(o.target.metric) for n in xs]
        label = s.policy + (f" ({s.tenant})" if s.tenant else "")
        ax.plot(xs, ys, marker="o", label=label)
    ax.axhline(o.target.value, color="grey", linestyle="--", label=f"target {o.target.text()}")
    ax.set_xlabel(f"nodes in node group {o.group}")
    ax.set_ylabel(o.target.metric)
    ax.set_title("dlsched plan")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(paths["plot"], dpi=100)
    plt.close(fig)
    return paths
