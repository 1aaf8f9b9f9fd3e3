"""What each queue got, waited and lost: the tenancy's metrics (summary.json `queues`, the jobs
table's wait split, Jain's index and finish-time fairness).

Integrated over time, per queue, between the batches of events the scheduler sees:
    used_gpu_s        GPUs its running jobs held
    entitled_gpu_s    min(its entitlement, its demand): what it deserved of what it asked for
                      (demand = GPUs held + GPUs its waiting jobs ask); a queue that asked for
                      nothing was entitled to nothing
    borrowed_gpu_s    GPUs it held above its nominal quota
    lent_gpu_s        its idle nominal GPUs that others used: the GPUs borrowed in all, divided
                      among the queues with idle nominal in proportion to it
and for the cluster, idle_within_quota_gpu_s: GPUs left idle while a job that fitted its
queue's nominal quota waited (a work-conservation loss).

Per queue: quota_wait_s, the job-seconds its jobs waited refused by the admission walk (or
behind one refused, in a strict queue), and placement_wait_s, those admitted but not placed,
counted from round to round (Philly's fair-share delay and fragmentation delay). Preemptions by
reason per queue.

Fairness:
    jain_index    (sum x)^2 / (n sum x^2) over queues with entitled GPU-hours, x = used / entitled
    users         per user: jobs, GPU-hours held, median and p95 wait
    ftf rho       Themis's finish-time fairness (per job: the jobs table's ftf_rho): JCT over the JCT alone on 1/N of the cluster,
                  N the queues with demand at the first round after the job arrived; the JCT alone is its run time
                  (GPU-seconds held over its GPUs), stretched by g N / C when it asks more than
                  a 1/N share of the C GPUs. max_ftf_rho and unfair_fraction (rho > 1.05, as
                  Shockwave's analysis) over finished jobs.
"""
from __future__ import annotations

import bisect
from operator import attrgetter

import numpy as np

from dlsched.core.types import GPU

_EPS = 1e-9
_JOB_ID = attrgetter("job_id")
BLOCK = 4096            # intervals kept before flush sums them


class Accounts:
    def __init__(self, engine):
        self.engine = engine
        self.t: float | None = None
        self.held: dict[str, float] = {}
        self.preempt: dict[str, dict[str, int]] = {}
        self.idle_within_quota_gpu_s = 0.0
        self.idle_flag = False
        self.capacity = 0.0
        # one slot per leaf of the tree; the integrands and the integrals as numpy arrays (a
        # pass over the leaves per batch was the tenancy's largest cost: bench_tenancy.py)
        self.leaves: list[str] = list(engine.tree.leaves)
        self.index = {leaf: i for i, leaf in enumerate(self.leaves)}
        n = len(self.leaves)
        self.h, self.ent, self.dem, self.nom = (np.zeros(n) for _ in range(4))   # held, entitled, demand, nominal
        self.nq, self.npl = np.zeros(n), np.zeros(n)            # jobs waiting by quota, by placement
        self.acc = {k: np.zeros(n) for k in ("used_gpu_s", "entitled_gpu_s", "borrowed_gpu_s", "lent_gpu_s",
                                             "quota_wait_s", "placement_wait_s")}
        self._nominal_set = False
        self.ed = np.zeros(n)                                   # min(entitled, demand)
        self._ent_of: dict | None = None                        # the entitlements self.ent was made from
        self._at = {f"queue:{leaf}": i for i, leaf in enumerate(self.leaves)}
        self._rows: list[tuple] = []                            # intervals not yet summed (flush)
        # allocation against entitlement over time, per queue: sampled at rounds at most every
        # sample_s (a run of months keeps thousands of rows, not one per round)
        self.sample_s, self._next_sample = 600.0, 0.0
        self.series: list[tuple[float, str, float, float]] = []   # (time, queue, used, entitled)
        self.active_t: list[float] = []         # round times, and the queues with demand then
        self.active_n: list[int] = []

    def _acc(self, leaf: str) -> dict[str, float]:
        self.flush()
        i = self.index.get(leaf)
        return {k: (float(v[i]) if i is not None else 0.0) for k, v in self.acc.items()}

    def preempted(self, leaf: str, reason: str) -> None:
        d = self.preempt.setdefault(leaf, {})
        d[reason] = d.get(reason, 0) + 1

    def advance(self, now: float, held: dict[str, float], force: bool = False) -> None:
        """Integrate the last state up to `now`, then take `held` ("queue:<leaf>" -> GPUs).
        Lazy: while nothing changed (the same `held`, no round since) the integrand is the same,
        so the interval simply grows (benchmarks/bench_tenancy.py: most batches change nothing).
        Each interval is kept as a row (its length and the integrand's arrays, which are replaced,
        never changed in place) and the rows are summed in blocks by flush: a few numpy calls
        per interval on arrays of a dozen queues cost more than the block's sums."""
        if held is self.held and not force:
            return
        if self.t is not None and now > self.t:
            self._rows.append((now - self.t, self.h, self.ed, self.nq, self.npl,
                               self.capacity if self.idle_flag else -1.0))
            if len(self._rows) >= BLOCK:
                self.flush()
        self.t = now
        if held is not self.held:
            self.held = held
            h = np.zeros(len(self.leaves))
            at = self._at
            for k, v in held.items():
                i = at.get(k)
                if i is not None:
                    h[i] = v
            self.h = h

    def flush(self) -> None:
        """Add the kept intervals to the integrals (see advance)."""
        rows = self._rows
        if not rows:
            return
        self._rows = []
        self.add_block(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                       np.array([r[2] for r in rows]), np.array([r[3] for r in rows]),
                       np.array([r[4] for r in rows]), np.array([r[5] for r in rows]))

    def add_block(self, dt, h, ed, nq, npl, cap) -> None:
        """Add a block of intervals to the integrals: their lengths, and per interval the held
        GPUs, min(entitled, demand), jobs waiting by quota and by placement per queue, and the
        capacity where a job within its nominal waited (else -1). flush's sum of its rows; the
        compiled run (dlsched.sim.fastloop_tenancy) hands its intervals here in the same blocks."""
        col = dt[:, None]
        acc, nom = self.acc, self.nom
        acc["used_gpu_s"] += (h * col).sum(axis=0)
        acc["entitled_gpu_s"] += (ed * col).sum(axis=0)
        over = np.maximum(h - nom, 0.0)
        idle = np.maximum(nom - h, 0.0)
        acc["borrowed_gpu_s"] += (over * col).sum(axis=0)
        b, i = over.sum(axis=1), idle.sum(axis=1)
        lend = (b > _EPS) & (i > _EPS)
        if lend.any():
            w = np.minimum(b, i)[lend] / i[lend] * dt[lend]
            acc["lent_gpu_s"] += (idle[lend] * w[:, None]).sum(axis=0)
        acc["quota_wait_s"] += (nq * col).sum(axis=0)
        acc["placement_wait_s"] += (npl * col).sum(axis=0)
        on = cap >= 0
        if on.any():
            self.idle_within_quota_gpu_s += float((np.maximum(0.0, cap[on] - h[on].sum(axis=1)) * dt[on]).sum())

    def round(self, now: float, view, lanes: dict, decided: set, refused: dict) -> None:
        """After a round: the entitlements and demands in force until the next, and how many
        jobs of each queue wait blocked by quota and by placement (`refused`: how many of each
        queue's the walk refused)."""
        self.advance(now, self.held, force=True)         # integrate what held until this round
        leaves = self.leaves
        ent, dem = view.entitled, view.demand
        if ent is not self._ent_of:
            self._ent_of = ent
            self.ent = np.array([ent.get(leaf, 0.0) for leaf in leaves])
        self.dem = np.array([dem.get(leaf, 0.0) for leaf in leaves])
        self.ed = np.minimum(self.ent, self.dem)
        b = view.book
        if not self._nominal_set:
            self._nominal_set = True
            self.nom = np.array([(b.nominal(leaf, "gpu") if "gpu" in b.resources else 0.0) for leaf in leaves])
        self.capacity = view.capacity.get("gpu", 0.0)
        if now >= self._next_sample:
            self._next_sample = now + self.sample_s
            for i, leaf in enumerate(leaves):
                self.series.append((now, leaf, float(self.h[i]), float(self.ent[i])))
        self.active_t.append(now)
        self.active_n.append(int((self.dem > _EPS).sum()))
        nq, npl = np.zeros(len(leaves)), np.zeros(len(leaves))
        flag = False
        for leaf, lane in lanes.items():
            i = self.index[leaf]
            q = refused.get(leaf, 0)
            d = sum(map(decided.__contains__, map(_JOB_ID, lane))) if decided else 0     # (in C: per waiting job)
            nq[i], npl[i] = q, len(lane) - q - d
            if not flag:
                head = next((r for r in lane if r.job_id not in decided), None)
                flag = head is not None and (b.usage[leaf].get("gpu", 0.0) + self.engine.gpus(head)
                                             <= self.nom[i] + _EPS)
        self.nq, self.npl = nq, npl
        self.idle_flag = flag

    def summary(self, records, now: float) -> dict:
        """summary.json's `queues` object and the fairness numbers, from the job records."""
        self.advance(now, self.held, force=True)
        self.flush()
        per: dict[str, dict] = {}
        users: dict[str, dict] = {}
        self.rho: dict[str, float] = {}           # job -> its finish-time fairness (the jobs table)
        cap = self.capacity or 1.0
        for rec in records:
            leaf = self.engine.leaf_of(rec)
            d = per.setdefault(leaf, {"jobs": 0, "waits": []})
            u = users.setdefault(rec.spec.user, {"jobs": 0, "waits": [], "gpu_s": 0.0})
            d["jobs"] += 1
            u["jobs"] += 1
            u["gpu_s"] += rec.attained_gpu_s
            if rec.first_start_s is not None:
                d["waits"].append(rec.first_start_s - rec.submit_time_s)
                u["waits"].append(rec.first_start_s - rec.submit_time_s)
            g = float(sum(t.demand[GPU] for t in rec.spec.tasks))
            if rec.finish_s is not None and g > 0 and rec.attained_gpu_s > 0:
                i = bisect.bisect_right(self.active_t, rec.submit_time_s)
                n = max(1, self.active_n[i] if i < len(self.active_n) else 1)
                alone = rec.attained_gpu_s / g * max(1.0, g * n / cap)
                self.rho[rec.job_id] = (rec.finish_s - rec.submit_time_s) / alone
        rhos = list(self.rho.values())
        out = {}
        ratios = []
        for leaf in sorted(set(per) | {lf for lf in self.leaves if self.acc["used_gpu_s"][self.index[lf]] > 0}):
            d = per.get(leaf, {"jobs": 0, "waits": []})
            a = self._acc(leaf)
            waits = np.array(d["waits"]) if d["waits"] else np.zeros(0)
            out[leaf] = {
                "jobs": d["jobs"],
                "median_wait_s": float(np.median(waits)) if len(waits) else 0.0,
                "p95_wait_s": float(np.percentile(waits, 95)) if len(waits) else 0.0,
                "mean_wait_s": float(waits.mean()) if len(waits) else 0.0,
                "quota_wait_s": a["quota_wait_s"], "placement_wait_s": a["placement_wait_s"],
                "gpu_hours": a["used_gpu_s"] / 3600, "entitled_gpu_hours": a["entitled_gpu_s"] / 3600,
                "borrowed_gpu_hours": a["borrowed_gpu_s"] / 3600, "lent_gpu_hours": a["lent_gpu_s"] / 3600,
                "preemptions": dict(sorted(self.preempt.get(leaf, {}).items())),
            }
            if a["entitled_gpu_s"] > _EPS:
                ratios.append(a["used_gpu_s"] / a["entitled_gpu_s"])
        x = np.array(ratios)
        jain = float(x.sum() ** 2 / (len(x) * (x ** 2).sum())) if len(x) and (x ** 2).sum() > 0 else 1.0
        r = np.array(rhos)
        by_user = {}
        for name, u in sorted(users.items()):
            w = np.array(u["waits"]) if u["waits"] else np.zeros(0)
            by_user[name] = {"jobs": u["jobs"], "gpu_hours": u["gpu_s"] / 3600,
                             "median_wait_s": float(np.median(w)) if len(w) else 0.0,
                             "p95_wait_s": float(np.percentile(w, 95)) if len(w) else 0.0}
        return {"queues": out, "users": by_user, "jain_index": jain,
                "max_ftf_rho": float(r.max()) if len(r) else 0.0,
                "unfair_fraction": float((r > 1.05).mean()) if len(r) else 0.0,
                "idle_within_quota_gpu_hours": self.idle_within_quota_gpu_s / 3600}
