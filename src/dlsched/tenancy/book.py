"""The quota book: what each queue of the tree uses, and Kueue's admission invariant over it.

Balances (Kueue KEP-79, hierarchical cohorts), per constrained resource r:

    leaf x:   T(x, r) = nominal(x, r) - usage(x, r)
    inner x:  T(x, r) = nominal(x, r) + sum over children c of min(lending_limit(c, r), T(c, r))
    root:     T(root, r) = pool(r)     + sum over top-level queues c of the same

A job is admissible in leaf q iff, with its request added to q, T(x, r) >= -borrowing_limit(x, r)
at q and every ancestor (an unset borrowing limit is no bound; the root's is 0) and no node's
subtree uses more than its `limit`. Kueue keeps no record of who lends to whom: the balances
suffice. `pool` is what the root itself holds: nothing in the Kueue modes (only the queues'
quotas can be used), the cluster's capacity above the top-level quotas in the modes whose
over-quota share is the whole cluster (KAI, Volcano, Slurm; see dlsched.tenancy.modes).

A resource no queue of the tree names is not constrained. A queue that does not name a resource
some other queue names has nominal 0 and no borrowing limit for it: it may run on what others
lend, and only that (Kueue asks such a queue to declare the resource with nominal 0).

Requests: `gpu` is the job's GPUs, `gpu:<TYPE>` its GPUs when it asks for that type, `cpu` and
`mem_gb` its tasks' CPUs and host memory.
"""
from __future__ import annotations

import math

from dlsched.core.types import CPU, GPU, MEM
from dlsched.tenancy.tree import ROOT, QueueTree

_EPS = 1e-9
INF = math.inf


def unit(r: str) -> str:
    """A resource's unit in the user's words."""
    if r == "gpu":
        return "GPUs"
    if r.startswith("gpu:"):
        return f"{r[4:]} GPUs"
    return "CPUs" if r == "cpu" else "GB of memory"


def request_of(spec, tasks, resources) -> dict[str, float]:
    """What a job asks of each constrained resource (all its tasks, placed or not)."""
    gpu = float(sum(t.demand[GPU] for t in tasks))
    out = {}
    for r in resources:
        if r == "gpu":
            out[r] = gpu
        elif r.startswith("gpu:"):
            out[r] = gpu if spec.gpu_type == r[4:] else 0.0
        elif r == "cpu":
            out[r] = float(sum(t.demand[CPU] for t in tasks))
        else:
            out[r] = float(sum(t.demand[MEM] for t in tasks))
    return out


class Book:
    """Usage per queue (a leaf's own, an inner node's whole subtree) and the balances over it."""

    def __init__(self, tree: QueueTree, pool: dict[str, float] | None = None, resources: list[str] | None = None):
        self.tree = tree
        self.resources = list(resources) if resources is not None else tree.resources()
        self.pool = {r: float((pool or {}).get(r, 0.0)) for r in self.resources}
        self.usage: dict[str, dict[str, float]] = {n: dict.fromkeys(self.resources, 0.0)
                                                   for n in (*tree.nodes, ROOT)}
        self._static(tree)
        # T(x, r) of every node, kept as usage changes (add: a walk up the leaf's path), so the
        # admission check reads the path instead of summing the tree (benchmarks/bench_tenancy.py)
        self.bal = {n: dict(b) for n, b in self._t["bal0"].items()}
        self.version = 0                 # counts the changes (add; fits where a number moved)

    def _static(self, tree: QueueTree) -> None:
        """The tree's quotas as plain tables, built once per tree and resource list (a round
        builds a Book; these do not change)."""
        key = (tuple(self.resources), tuple(sorted(self.pool.items())))
        cache = tree.__dict__.setdefault("_book_tables", {})
        t = cache.get(key)
        if t is None:
            nodes = (*tree.nodes, ROOT)

            def q(x, r):
                return None if x == ROOT else tree.nodes[x].quotas.get(r)

            def val(x, r, f, none):
                qq = q(x, r)
                v = None if qq is None else getattr(qq, f)
                return none if v is None else v
            t = {"path": {n: [n, *tree.ancestors(n), ROOT] for n in tree.nodes},
                 "kids": {n: list(tree.children.get(n, [])) for n in nodes},
                 "nom": {n: {r: (self.pool[r] if n == ROOT else val(n, r, "nominal", 0.0)) for r in self.resources}
                         for n in nodes},
                 "bl": {n: {r: (0.0 if n == ROOT else val(n, r, "borrowing_limit", INF)) for r in self.resources}
                        for n in nodes},
                 "ll": {n: {r: val(n, r, "lending_limit", INF) for r in self.resources} for n in nodes},
                 "lim": {n: {r: val(n, r, "limit", INF) for r in self.resources} for n in nodes}}
            sub: dict = {}

            def subq(x, r):
                if (x, r) not in sub:
                    sub[(x, r)] = t["nom"][x][r] + sum(subq(c, r) for c in t["kids"][x])
                return sub[(x, r)]
            t["sub"] = {n: {r: subq(n, r) for r in self.resources} for n in nodes}
            t["lend"] = {n: {r: t["nom"][n][r] + sum(min(t["ll"][c][r], t["sub"][c][r]) for c in t["kids"][n])
                             for r in self.resources} for n in nodes}
            bal0: dict = {}

            def b0(x, r):
                if (x, r) not in bal0:
                    bal0[(x, r)] = t["nom"][x][r] + sum(min(t["ll"][c][r], b0(c, r)) for c in t["kids"][x])
                return bal0[(x, r)]
            t["bal0"] = {n: {r: b0(n, r) for r in self.resources} for n in nodes}
            cache[key] = t
        self._t = t
        self._path, self._kids = t["path"], t["kids"]
        self._answers = t.setdefault("answers", {})      # fits' answers per path numbers

    def clone(self) -> Book:
        """A copy whose usage and balances change on their own (the tables are shared): a round
        starts from the engine's kept book instead of adding every holder again
        (benchmarks/bench_tenancy.py)."""
        b = Book.__new__(Book)
        b.tree, b.resources, b.pool, b._t, b._path, b._kids = (self.tree, self.resources, self.pool, self._t,
                                                              self._path, self._kids)
        b._answers = self._answers
        b.usage = {n: d.copy() for n, d in self.usage.items()}
        b.bal = {n: d.copy() for n, d in self.bal.items()}
        b.version = 0
        return b

    def path(self, leaf: str) -> list[str]:
        """The leaf, its ancestors, then the root."""
        return self._path[leaf]

    def add(self, leaf: str, req: dict[str, float], sign: float = 1.0) -> None:
        self.version += 1                # (what is kept per book state: orders.within_nominal)
        path = self._path[leaf]
        ll = self._t["ll"]
        bal = self.bal
        for r, x in req.items():
            if not x:
                continue
            d = sign * x
            for n in path:
                self.usage[n][r] += d
            # the leaf's balance falls by d; each ancestor's by the change of min(lending, T)
            old = bal[leaf][r]
            new = old - d
            bal[leaf][r] = new
            for child, parent in zip(path, path[1:]):
                lim = ll[child][r]
                delta = (new if new < lim else lim) - (old if old < lim else lim)
                if delta == 0:
                    break
                old = bal[parent][r]
                new = old + delta
                bal[parent][r] = new

    # -- quotas ----------------------------------------------------------------------------
    def nominal(self, x: str, r: str) -> float:
        return self._t["nom"][x][r]

    def borrowing_limit(self, x: str, r: str) -> float:
        return self._t["bl"][x][r]

    def lending_limit(self, x: str, r: str) -> float:
        return self._t["ll"][x][r]

    def limit(self, x: str, r: str) -> float:
        return self._t["lim"][x][r]

    def children(self, x: str) -> list[str]:
        return self._kids[x]

    def balance(self, x: str, r: str) -> float:
        """T(x, r) of the module's docstring (kept by add)."""
        return self.bal[x][r]

    def subtree_quota(self, x: str, r: str) -> float:
        return self._t["sub"][x][r]

    def lendable(self, x: str, r: str) -> float:
        """What is potentially available at x for r (Kueue fair sharing's lendable)."""
        return self._t["lend"][x][r]

    def borrowed(self, x: str, r: str = "gpu") -> float:
        """How much x's subtree uses above its own quotas (0 when r is not constrained)."""
        if r not in self.usage[x]:
            return 0.0
        return max(0.0, self.usage[x][r] - self.subtree_quota(x, r))

    # -- the admission check -----------------------------------------------------------------
    def fits(self, leaf: str, req: dict[str, float]) -> str:
        """"" when the request is admissible in `leaf` now; else why not, with the numbers.

        The answer reads only the usage and balances on the leaf's path: it is kept per those
        numbers (and the request) with the tables, for every book built on them, where asking
        left the book as it was (_fits). Why: the admission walk asks this of every shape left
        after each admission, and a round's book is much like the last one's: under a deep queue
        in 8 queues the same questions came back thousands of times, at a tenth of the run
        (benchmarks/bench_policies.py --deep --queues 8)."""
        path = self._path[leaf]
        usage, bal = self.usage, self.bal
        seen: list = [leaf]
        for r, x in req.items():
            if x > _EPS:
                seen.append(r)
                seen.append(x)
                for n in path:
                    seen.append(usage[n][r])
                    seen.append(bal[n][r])
        if len(seen) == 1:
            return ""
        seen = tuple(seen)
        answers = self._answers
        why = answers.get(seen)
        if why is None:
            why, moved = self._fits(leaf, req)
            if not moved:
                if len(answers) >= 65536:
                    answers.clear()
                answers[seen] = why
        return why

    def _fits(self, leaf: str, req: dict[str, float]) -> tuple[str, bool]:
        """fits' answer, and whether asking moved a number of the book.

        As if the request were added (add) and the checks read the book, then taken away again
        (add with sign -1): the same floating-point steps, so the book is left as those two
        adds leave it, bit for bit. Done on the path's numbers alone, and the version moves only
        where a number did not come back to what it was (what is kept per version,
        orders.within_nominal and the walk's key parts, then stays)."""
        path = self._path[leaf]
        usage, bal, ll = self.usage, self.bal, self._t["ll"]
        steps = []                       # (r, x, the path's usage and balances before, after)
        for r, x in req.items():
            if x > _EPS:
                u0 = [usage[n][r] for n in path]
                b0 = [bal[n][r] for n in path]
                b1 = b0.copy()
                old = b0[0]
                new = b1[0] = old - x
                for i in range(1, len(path)):     # (add's walk up, on the copy)
                    lim = ll[path[i - 1]][r]
                    delta = (new if new < lim else lim) - (old if old < lim else lim)
                    if delta == 0:
                        break
                    old = b0[i]
                    new = b1[i] = old + delta
                steps.append((r, x, u0, b0, [u + x for u in u0], b1))
        if not steps:
            return "", False
        why = ""
        lim_t, bl_t = self._t["lim"], self._t["bl"]
        for i, n in enumerate(path):
            for r, x, _, b0, u1, b1 in steps:
                if u1[i] > lim_t[n][r] + _EPS:
                    why = (f"over its limit: {n} would use {u1[i]:g} of at most "
                           f"{lim_t[n][r]:g} {unit(r)}")
                elif b1[i] < -bl_t[n][r] - _EPS:
                    why = self._why(leaf, n, r, x, b0[-1], u1[0] - x)
                else:
                    continue
                break
            if why:
                break
        moved = False
        for r, x, u0, b0, u1, b1 in steps:        # add(leaf, need, -1.0): d = -x
            for i, n in enumerate(path):
                u = u1[i] + -x
                if u != u0[i]:
                    usage[n][r] = u
                    moved = True
            old = b1[0]
            new = old - -x
            if new != b0[0]:
                bal[leaf][r] = new
                moved = True
            for i in range(1, len(path)):
                lim = ll[path[i - 1]][r]
                delta = (new if new < lim else lim) - (old if old < lim else lim)
                if delta == 0:
                    break
                old = b1[i]
                new = old + delta
                if new != b0[i]:
                    bal[path[i]][r] = new
                    moved = True
        if moved:
            self.version += 1
        return why, moved

    def _why(self, leaf: str, x: str, r: str, need: float, idle_before: float, used: float) -> str:
        nom = self.nominal(leaf, r)
        head = f"over quota: {leaf} uses {used:g} of {nom:g} {unit(r)} and asks {need:g} more"
        if x == leaf:
            return f"{head}, more than its borrowing limit of {self.borrowing_limit(x, r):g}"
        where = "the cluster's queues have" if x == ROOT else f"its cohort {x} has"
        if x != ROOT and self.borrowing_limit(x, r) < INF:
            return f"{head}, more than {x}'s borrowing limit of {self.borrowing_limit(x, r):g}"
        idle = max(0.0, idle_before - max(0.0, nom - used))
        return f"{head}; cannot borrow: {where} {idle:g} idle"
