"""Hypothesis properties of the tenancy over random queue trees, arrivals and modes: after
every plan, Kueue's invariant T(x, r) >= -borrowing_limit(x, r) at every node (the root's 0) and
no node above its limit; no preemption loop (A preempted for B, then B for A, with nothing
ending between); and the GPU-seconds the queues' accounts integrate equal those the jobs held."""
from hypothesis import given, settings
from hypothesis import strategies as st

import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.scheduler import events as ev
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim.backend import SimBackend
from dlsched.tenancy import tree_from_dict
from dlsched.tenancy.book import Book
from dlsched.tenancy.engine import Tenancy
from dlsched.tenancy.tree import ROOT
from dlsched.workload.schema import job_from_row

MODES = ["kueue", "kueue-fair", "kai", "volcano-proportion", "volcano-capacity", "slurm-fairtree"]
EXAMPLES = max(60, settings.default.max_examples // 5)

quota = st.fixed_dictionaries({"nominal": st.integers(0, 6)}, optional={
    "borrowing_limit": st.integers(0, 4), "lending_limit": st.integers(0, 6), "limit": st.integers(0, 10)})


@st.composite
def trees(draw):
    n_top = draw(st.integers(1, 3))
    queues, leaves = [], []
    for i in range(n_top):
        kids = draw(st.integers(0, 2))
        top = {"name": f"t{i}", "quotas": {"gpu": _fix(draw(quota))}}
        queues.append(top)
        if not kids:
            leaves.append(top["name"])
        for k in range(kids):
            queues.append({"name": f"t{i}k{k}", "parent": top["name"], "quotas": {"gpu": _fix(draw(quota))}})
            leaves.append(f"t{i}k{k}")
        if kids:            # a parent's limit must cover its children's guarantees
            need = sum(q["quotas"]["gpu"]["nominal"] for q in queues if q.get("parent") == top["name"])
            lim = top["quotas"]["gpu"].get("limit")
            if lim is not None and lim < need:
                top["quotas"]["gpu"]["limit"] = max(need, top["quotas"]["gpu"]["nominal"])
    return {"queues": queues}, leaves


def _fix(q):
    q = dict(q)
    if q.get("lending_limit") is not None and q["lending_limit"] > q["nominal"]:
        q["lending_limit"] = q["nominal"]
    if q.get("limit") is not None and q["limit"] < q["nominal"]:
        q["limit"] = q["nominal"]
    return q


def _balance(book, x, r):
    """T(x, r) from the usage, summed over the tree (what Book keeps as usage changes)."""
    kids = book.children(x)
    if not kids and x != ROOT:
        return book.nominal(x, r) - book.usage[x][r]
    return book.nominal(x, r) + sum(min(book.lending_limit(c, r), _balance(book, c, r)) for c in kids)


class Checker:
    """An observer after the tenancy: the book of what runs, after every applied plan."""
    name = "checker"

    def __init__(self, ten: Tenancy, cap: float):
        self.ten, self.cap, self.bad, self.pairs, self.ends = ten, cap, [], [], 0

    def observe(self, now, events, applied):
        self.ends += sum(isinstance(e, ev.JobFinish) for e in events)
        if applied is None:
            return
        for d in applied.decisions:
            if type(d).__name__ == "Suspend" and " for " in d.reason:
                self.pairs.append((d.job_id, d.reason.split(" for ")[1].split(" ")[0], self.ends))
        t = self.ten
        pool = {}
        if t.mode.spec.pool == "cluster":
            probe = Book(t.tree, resources=t.resources)
            pool = {r: max(0.0, self.cap - sum(probe.subtree_quota(c, r) for c in t.tree.children.get(ROOT, [])))
                    for r in t.resources}
        book = Book(t.tree, pool, t.resources)
        for leaf, use in t._leaf_use.items():
            book.add(leaf, use)
        for x in (*t.tree.nodes, ROOT):
            for r in book.resources:
                if abs(book.balance(x, r) - _balance(book, x, r)) > 1e-6:      # the kept balance
                    self.bad.append(f"{now}: kept T({x},{r}) {book.balance(x, r)} != {_balance(book, x, r)}")
                if book.balance(x, r) < -book.borrowing_limit(x, r) - 1e-6:
                    self.bad.append(f"{now}: T({x},{r}) = {book.balance(x, r)} < -{book.borrowing_limit(x, r)}")
                if book.usage[x][r] > book.limit(x, r) + 1e-6:
                    self.bad.append(f"{now}: {x} uses {book.usage[x][r]} > limit {book.limit(x, r)}")


@settings(max_examples=EXAMPLES, deadline=None)
@given(trees(), st.sampled_from(MODES), st.lists(st.tuples(
    st.integers(0, 9), st.integers(1, 4), st.floats(0, 200), st.floats(5, 300), st.sampled_from([0, 50, 100])),
    min_size=1, max_size=18))
def test_quotas_hold_after_every_plan_and_nothing_loops(tree_leaves, mode, rows):
    spec, leaves = tree_leaves
    jobs = [job_from_row(dict(job_id=f"j{i:02d}", submit_time_s=t, workers=1, gpus_per_worker=g, cpus_per_worker=0.5,
                              mem_gb_per_worker=1, duration_s=d, priority=p, queue=leaves[q % len(leaves)]))
            for i, (q, g, t, d, p) in enumerate(rows)]
    cl = cluster_from_dict({"node_groups": [{"count": 2, "gpus": 4, "gpu_mem_gb": 32, "cpus": 16, "mem_gb": 64}]})
    ten = Tenancy(tree_from_dict(spec), mode)
    sched = Scheduler(build_profile("fifo"), tenancy=ten)
    check = Checker(ten, 8.0)
    sched._observers.append(check)
    backend = SimBackend(cl, jobs, restart_delay_s=5.0)
    sched.run(backend)
    assert check.bad == [], check.bad[:3]
    for a, b, n in check.pairs:
        assert not any(x == b and y == a and m == n for x, y, m in check.pairs), f"{a} and {b} preempt each other"
    used = sum(q["gpu_hours"] for q in ten.accounts.summary(sched.jobs.values(), backend.now())["queues"].values())
    held = sum(r.attained_gpu_s for r in sched.jobs.values()) / 3600
    assert abs(used - held) <= 1e-6 * max(1.0, held)
