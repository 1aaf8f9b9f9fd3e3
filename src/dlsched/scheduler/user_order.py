"""The waiting queue of an order whose key is its user's (DRF's dominant share), kept per user
between rounds (issue "Scale ... deep queues": a round's cost must not grow with the jobs that
cannot start).

DRF keys a job by its user's dominant share: `(s_u, submit_time_s, job_id)`. Sorting the whole
queue by it every round, and again after every job the round places (progressive filling), was
most of a deep-queue round: thousands of keys built and sorted for a handful of users. Here each
user's waiting jobs are kept in (submit_time_s, job_id) order as they join and leave, and a round
needs only each user's key:
- the queue in key order (`ordered`) is the users' lists joined in key order; users whose keys
  are equal have their jobs merged by (submit_time_s, job_id), as the full sort orders them;
- the next job of the progressive filling (`Placing._place_by_user`) is the smallest of the
  users' first untried jobs: one comparison per user, not a sort of the queue;
- with actions in the profile (preemption reads `rec.key`), `rec.key` stays what the round would
  have set: a user's jobs are keyed again only when its key changed, a new job when it joins.

The same keys and the same order, so the same decisions: tests/unit/test_deep_queue.py runs DRF
both ways and compares the event logs; `python benchmarks/bench_policies.py --deep` measures it
(RESULTS.md block `deep-queue`).
"""
from __future__ import annotations

from bisect import bisect_left, insort
from itertools import chain
from operator import attrgetter


# (submit_time_s, job_id) of a record, in C (no Python frame: called for every insertion and
# every merge of tied users; a function was a third of DRF's deep-queue run under the profiler)
_at = attrgetter("spec.submit_time_s", "job_id")


class ByUser:
    """Each user's waiting records in (submit_time_s, job_id) order (`lists`); the last round's
    groups of users with equal keys, each with its users' records merged in that order and kept
    up to date as records join and leave (`merged`, `group_of`); the key each user's records
    carry (`keyed`) and the records not keyed yet (`fresh`), kept only when `rekey` (a profile
    with actions, which may read `rec.key`)."""

    __slots__ = ("order", "rekey", "lists", "merged", "group_of", "keyed", "fresh")

    def __init__(self, order, rekey: bool = True) -> None:
        self.order, self.rekey = order, rekey
        self.lists: dict[str, list] = {}
        self.merged: dict[tuple, list] = {}
        self.group_of: dict[str, tuple] = {}
        self.keyed: dict[str, tuple] = {}
        self.fresh: list = []

    def add(self, rec) -> None:
        user = rec.spec.user
        lst = self.lists.get(user)
        if lst is None:
            lst = self.lists[user] = []
        _insert(lst, rec)
        g = self.group_of.get(user)
        if g is not None:
            _insert(self.merged[g], rec)
        if self.rekey:
            self.fresh.append(rec)

    def remove(self, rec) -> None:
        user = rec.spec.user
        lst = self.lists[user]
        _delete(lst, rec)
        g = self.group_of.get(user)
        if g is not None:
            _delete(self.merged[g], rec)
        if not lst:
            del self.lists[user]
            self.keyed.pop(user, None)

    def user_keys(self, ctx) -> dict[str, tuple]:
        """{user: its key now} for every user with a waiting job."""
        users = sorted(self.lists)
        return dict(zip(users, self.order.user_keys(users, ctx)))

    def ordered(self, ctx) -> list:
        """The waiting jobs in key order for this round (key + (submit_time_s, job_id)), with
        `rec.key` set so when `rekey`."""
        keys = self.user_keys(ctx)
        lists = self.lists
        groups: dict[tuple, list[str]] = {}
        for user, k in keys.items():
            groups.setdefault(k, []).append(user)
        if self.rekey:
            self._rekey(keys)
        merged, group_of = {}, {}
        out: list = []
        for k in sorted(groups):
            users = groups[k]
            if len(users) == 1:
                out += lists[users[0]]
                continue
            g = tuple(users)                       # equal keys: merged by (submit_time_s, job_id)
            lst = self.merged.get(g)
            if lst is None:
                lst = sorted(chain.from_iterable(lists[u] for u in users), key=_at)
            merged[g] = lst
            for u in users:
                group_of[u] = g
            out += lst
        self.merged, self.group_of = merged, group_of
        return out

    def _rekey(self, keys: dict[str, tuple]) -> None:
        keyed, lists = self.keyed, self.lists
        for user, k in keys.items():
            if keyed.get(user) != k:
                keyed[user] = k
                for r in lists[user]:
                    r.key = (*k, r.spec.submit_time_s, r.job_id)
        for r in self.fresh:
            k = keyed.get(r.spec.user)
            if k is not None:                    # (None: it left the queue meanwhile)
                r.key = (*k, r.spec.submit_time_s, r.job_id)
        self.fresh.clear()


def _insert(lst: list, rec) -> None:
    if not lst or _at(lst[-1]) < _at(rec):          # arrivals mostly come in submission order
        lst.append(rec)
    else:
        insort(lst, rec, key=_at)


def _delete(lst: list, rec) -> None:
    i = bisect_left(lst, _at(rec), key=_at)
    if i < len(lst) and lst[i] is rec:
        del lst[i]
    else:
        lst.remove(rec)
