"""The admission walk's state as the parts see it (`View`, the `view` of
dlsched.tenancy.points), the jobs a victim may be taken from (`VictimList`), and view.fits's
answer kept per (queue, request, priority) until the book changes (`fits_kept`, `choose_kept`),
the walk's lanes (`build_lanes`), and the shapes left in a walk (`Shapes`, `refuse_rest`, whose
reasons a `RestWhy` gives when asked). Used by dlsched.tenancy.engine, whose rounds build them.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from functools import reduce
from itertools import compress, count, repeat
from operator import add, attrgetter, is_, itemgetter
from typing import TYPE_CHECKING

import numpy as np

from dlsched.tenancy.book import Book

if TYPE_CHECKING:
    from dlsched.tenancy.engine import Tenancy

_EPS = 1e-9


class View:
    """The walk's state, as the parts see it (dlsched.tenancy.points)."""

    def __init__(self, engine: Tenancy, book: Book, now: float, capacity: dict, demand: dict, victims: list):
        self.tree, self.book, self.now, self.capacity, self.demand = engine.tree, book, now, capacity, demand
        self.ledger, self.params, self._engine = engine.mode.ledger, engine.mode.spec, engine
        self.entitled: dict[str, float] = {}
        self.pending: dict[str, object] = {}
        self.cache: dict = {}
        self._victims = victims            # (record, leaf, request) of every possible victim

    def leaf_of(self, rec) -> str:
        return self._engine.leaf_of(rec)

    def request(self, rec) -> dict[str, float]:
        return self._engine.request(rec)

    def started(self, rec) -> float | None:
        return self._engine.started.get(rec.job_id, rec.first_start_s)

    def candidates(self, job) -> list[tuple[object, str, dict, str]]:
        """Running jobs that may be preempted for `job` now: (record, leaf, request, kind), kind
        `reclaim` (another queue) or `preempt` (its own), minimum runtimes and the
        non-preemptible class respected."""
        out = []
        leaf = self.leaf_of(job)
        npp = self.params.non_preemptible_priority
        for rec, vleaf, vreq in self._victims:
            if (npp is not None and rec.spec.priority >= npp) or not rec.spec.preemptible:
                continue
            kind = "preempt" if vleaf == leaf else "reclaim"
            floor = self.params.preempt_min_runtime_s if kind == "preempt" else self.params.reclaim_min_runtime_s
            since = self.started(rec)
            if floor > 0 and since is not None and self.now - since < floor - _EPS:
                continue
            out.append((rec, vleaf, vreq, kind))
        return out

    def fits(self, leaf: str, job, req: dict) -> str:
        """The whole admission check: "" or why not."""
        why = self.book.fits(leaf, req)
        if why:
            return why
        npp = self.params.non_preemptible_priority
        if npp is not None and job.spec.priority >= npp and self.params.non_preemptible_in_quota:
            b = self.book
            for r, x in req.items():
                mine = self._engine.nonpreemptible_use(b, leaf, r)
                if x > _EPS and mine + x > b.nominal(leaf, r) + _EPS:
                    return (f"non-preemptible (priority {job.spec.priority} >= {npp}): only within quota; "
                            f"{leaf} has {b.nominal(leaf, r):g} {r} nominal, {mine:g} used by such jobs")
        return self._engine.mode.entitlement.admits(self, leaf, job, req)


class VictimList:
    """The jobs a victim may be taken from, listed when first asked (most rounds ask nothing):
    (record, leaf, request) of each whole running DL job not released or decided in the round."""

    def __init__(self, engine: Tenancy, txn):
        self.engine, self.txn, self.items = engine, txn, None

    def __iter__(self):
        if self.items is None:
            jobs, txn, out = self.engine.sched.jobs, self.txn, []
            for jid, (leaf, req, g, _) in self.engine._hold.items():
                rec = jobs[jid]
                if (rec.spec.kind == "dl" and g > _EPS and not rec.unplaced() and jid not in txn.released
                        and jid not in txn.decided):
                    out.append((rec, leaf, req))
            self.items = out
        return iter(self.items)

    def drop(self, chosen) -> None:
        ids = {v.job_id for v in chosen}
        self.items = [t for t in self if t[0].job_id not in ids]



def feasible(ctx, job, victims) -> bool:
    """Would `job` be placed with `victims` released (a trial on a fork of the round's
    transaction)?"""
    trial = ctx.txn.fork()
    for v in victims:
        placements = list(v.placed.values())
        trial.release(v.job_id, placements, [v.tasks[tp.task].vector for tp in placements])
    for task in job.unplaced():
        ok = ctx.feasible(job.spec, task, trial.free)
        if not ok.any():
            return False
        trial.reserve(job.job_id, task, int(np.argmax(ok)))
    return True


def fits_kept(view, memo: dict | None, leaf: str, rec, req: dict, k=None) -> str:
    """view.fits, kept in `memo` (None: not kept) per (leaf, request, priority): the job's shape,
    or its number (Shapes) when the caller has it."""
    if memo is None:
        return view.fits(leaf, rec, req)
    if k is None:
        k = (leaf, tuple(req.items()), rec.spec.priority)
    why = memo.get(k)
    if why is None:
        why = memo[k] = view.fits(leaf, rec, req)
    return why


def choose_kept(victims, view, memo: dict | None, rec, leaf: str, req: dict, k=None) -> list:
    """victims.choose, an empty answer kept in `memo` beside view.fits' (a victims part reads
    the job through its leaf and priority alone, view.candidates; under a deep queue most
    refused heads of a queue over its quota get no victims: benchmarks/bench_policies.py
    --deep --queues). `k`: the job's shape or its number, when the caller has it."""
    if memo is None:
        return victims.choose(view, rec, leaf, req)
    k = ("victims", k if k is not None else (leaf, tuple(req.items()), rec.spec.priority))
    if k in memo:
        return []
    chosen = victims.choose(view, rec, leaf, req)
    if not chosen:
        memo[k] = True
    return chosen


def refuses_kept(victims, view, memo: dict, k: int, leaf: str, rec, req: dict) -> bool:
    """Would the walk refuse `rec`, of shape number `k` in `leaf`, now, without victims?"""
    why = fits_kept(view, memo, leaf, rec, req, k)
    return bool(why) and not (why.startswith(("over", "non-")) and choose_kept(victims, view, memo, rec, leaf, req, k))


def refuse_rest(refused: Refused, view, memo: dict, lanes: dict, sids: dict, heads: dict, nref: dict) -> "RestWhy":
    """Every job left in the walk's lanes refused, each with the memo's answer for its shape
    (`sids`: Shapes.keys; each is known refused, so the book can no longer change). The answers
    are returned as a RestWhy, read when asked, not written into each record; the jobs go into
    `refused` as their lanes' tails (Refused)."""
    segments = []
    for leaf, h in heads.items():
        rest = lanes[leaf][h:]
        segments.append((rest, sids[leaf][h:]))
        refused.tails.append(rest)
        nref[leaf] += len(rest)
        view.pending.setdefault(leaf, rest[0])
    heads.clear()
    return RestWhy(memo, segments)


class Refused:
    """The jobs a walk refused, by id (a set's `add`, `update`, `in`, iteration, len): those
    refused one by one, and the lanes' tails refuse_rest refused at once (`tails`), whose ids
    join the set when it is first read. Why: most rounds read only whether anyone was refused
    (Tenancy.next_wake), and putting every waiting job's id into a set was 5 % of a deep-queue
    run under 8 queues (benchmarks/bench_policies.py --deep --queues 8)."""

    __slots__ = ("ids", "tails")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.tails: list[list] = []        # lists of records, none empty

    def add(self, job_id: str) -> None:
        self.ids.add(job_id)

    def update(self, job_ids) -> None:
        self.ids.update(job_ids)

    def _all(self) -> set[str]:
        for rest in self.tails:
            self.ids.update(map(_JOB_ID, rest))
        self.tails.clear()
        return self.ids

    def __contains__(self, job_id) -> bool:
        return job_id in self._all()

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __bool__(self) -> bool:
        return bool(self.ids or self.tails)


_JOB_ID = attrgetter("job_id")
_TASKS = attrgetter("tasks")
_AT0, _GPUS, _REC, _SID = (itemgetter(i) for i in (0, 2, 4, 5))


def build_lanes(queue: list, info: dict, lane_of, shapes: Shapes | None, kept: dict) -> tuple[dict, dict]:
    """The walk's lanes (each leaf's waiting jobs, in the queue's order; leaves in the order
    first met) and the GPUs each asks in all; with `shapes`, their shape numbers per lane,
    counts and a job of each (then `start`). `info`: job -> (tasks, leaf, GPUs, shape, record,
    shape number), kept while its tasks are the same object (a record's spec is never
    replaced); `lane_of` makes an entry. `kept`: what the last call was given ("queue") and
    made of each lane ("lanes": leaf -> its entries, lane, GPUs, then shape numbers, counts
    and a job of each shape, or None), given back where the queue, else the lane, has the same
    entries (the same objects, in the same order).

    Why: this is once per waiting job every round. Looked up and checked in C (map, `is`),
    counted by shape number (a small int hashes in no time; a shape tuple's hash is not kept),
    and summed by reduce (the same additions in the same order as a loop), it leaves one Python
    step a job, the append to its lane (benchmarks/bench_policies.py --deep --queues 8). Two
    rounds of five wait with the same queue as the last (under 8 queues, tiresias on 5,000
    jobs), and most others change one or two lanes of 8: what did not change is the last
    round's, after a check in C."""
    same, last_lanes = kept.get("queue"), kept.get("lanes", {})
    # (the last queue is kept as given; the same list object again is taken as changed: a
    # static order's round hands the scheduler's own waiting list, changed in place since,
    # decision 0059)
    if same is not None and (same[0] is queue or len(same[0]) != len(queue) or not all(map(is_, same[0], queue))):
        same = None
    infos = same[1] if same is not None else list(map(info.get, map(_JOB_ID, queue)))
    if same is None and None in infos:                    # jobs new to the walk: made where they are
        for i in list(compress(count(), map(is_, infos, repeat(None)))):
            infos[i] = lane_of(queue[i])
    if not all(map(is_, map(_TASKS, queue), map(_AT0, infos))):
        infos = [a if a[0] is r.tasks else lane_of(r) for r, a in zip(queue, infos)]
        same = None
    kept["queue"] = (queue, infos)
    if same is not None:                  # the same entries: the same lanes
        by_leaf = dict.fromkeys(last_lanes)
    else:
        by_leaf = defaultdict(list)
        for a in infos:
            by_leaf[a[1]].append(a)
    lanes, asked, made = {}, {}, {}
    for leaf, got in by_leaf.items():
        last = last_lanes.get(leaf)
        if got is None:
            got = last[0]
        elif last is None or len(last[0]) != len(got) or not all(map(is_, last[0], got)):
            lane = list(map(_REC, got))
            last = (got, lane, reduce(add, map(_GPUS, got), 0.0), None)
        if shapes is not None and last[3] is None:
            sids = list(map(_SID, got))
            firsts = dict(zip(reversed(sids), reversed(last[1])))     # the first job of each shape
            counted = Counter(sids)
            last = (*last[:3], (sids, counted, [firsts[sid] for sid in counted]))
        made[leaf] = last
        lanes[leaf], asked[leaf] = last[1], last[2]
        if shapes is not None:
            sids, counted, reps = last[3]
            shapes.keys[leaf] = sids
            shapes.count.update(counted)
            shapes.rep.update(zip(counted, reps))     # (in the order first met: Shapes.probe's)
    kept["lanes"] = made
    if shapes is not None:
        shapes.start()
    return lanes, asked


class RestWhy:
    """Why each job that refuse_rest refused waits: its shape's answer in the walk's memo, found
    when first asked (JobRecord.why reads it through the scheduler's WhyBox until the next walk).
    Why: writing the answer into every record left was a fifth of a deep-queue run under 8
    queues (benchmarks/bench_policies.py --deep --queues 8: tiresias on 5,000 jobs)."""

    __slots__ = ("memo", "segments", "_by_job")

    def __init__(self, memo: dict, segments: list) -> None:
        self.memo, self.segments, self._by_job = memo, segments, None

    def reason(self, job_id: str) -> str | None:
        by = self._by_job
        if by is None:
            memo = self.memo
            by = self._by_job = {r.job_id: memo[k] for rest, ks in self.segments for r, k in zip(rest, ks)}
        return by.get(job_id)


class Shapes:
    """The shapes left in a walk's lanes, and which of them the walk has refused since the book
    last changed. A shape is (queue, request items, priority): view.fits and the victims part
    read a job only so. Each is known here, and in the memo, by its number (Tenancy._sid: a
    small int hashes at once, a shape tuple's hash is not kept). A shape is known refused when
    both answered from the memo (a refusal, no victims). When every shape left is known refused,
    so is every job left: nothing the rest of the walk asks can change the book, so it is
    answered at once, in any order (Tenancy.admit). `unknown` counts the shapes left that are
    not known refused; `rep` holds a job of each shape, so that the walk may ask about a shape
    before its turn (`probe`: the answers are the book's, which does not change until the walk
    admits or preempts).

    The walk fills `count` and `rep` while it builds its lanes (`start` then counts them), and
    `keys` per lane, the shape number of each job in the lane's order.

    Why: under a deep queue every round walked every waiting job, most of them of a few shapes
    in queues over their quota, at about 3.5 us a job (benchmarks/bench_policies.py --deep
    --queues 8: tiresias on 5,000 jobs)."""

    __slots__ = ("count", "present", "known", "unknown", "rep", "probed", "keys")

    def __init__(self) -> None:
        self.count: dict[int, int] = {}
        self.rep: dict[int, object] = {}
        self.keys: dict[str, list[int]] = {}
        self.known: set[int] = set()
        self.present = self.unknown = 0
        self.probed = False

    def start(self) -> None:
        self.present = self.unknown = len(self.count)

    def popped(self, k: int) -> None:
        c = self.count[k] = self.count[k] - 1
        if c == 0:
            self.present -= 1
            if k not in self.known:
                self.unknown -= 1

    def refused(self, k: int) -> None:
        if k not in self.known:
            self.known.add(k)
            if self.count[k] > 0:
                self.unknown -= 1

    def changed(self) -> None:
        """The book changed (the memo was cleared): nothing is known refused."""
        self.known.clear()
        self.unknown = self.present
        self.probed = False

    def probe(self, refuses) -> None:
        """Ask `refuses(shape number, rep)` about every shape left that is not known refused
        (once per book: `probed`)."""
        self.probed = True
        for k, rep in self.rep.items():
            if self.count[k] > 0 and k not in self.known and refuses(k, rep):
                self.refused(k)
