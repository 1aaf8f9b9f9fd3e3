"""Optimus's allocation pass (steps 1 and 2 of dlsched.policies.allocate.optimus's docstring) as a
pure function over entries (`AllocJob`, `greedy_allocate`), and the task lists it hands out: a
job's tasks for a (workers, parameter servers) shape (`job_tasks`) and a task list's shape
(`shape`).

A module of its own because these hold no policy state: the allocator (OptimusAllocate) builds
the entries from its estimates, the kept path (optimus_kept) re-runs the rigid part of the pass
incrementally, and the placer (dlsched.policies.actions.optimus) reads the shapes. Every name here
is importable from dlsched.policies.allocate.optimus as before.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from dlsched.core.types import Role, TaskSpec

_EPS = 1e-9


def job_tasks(spec, workers: int, ps: int) -> tuple[TaskSpec, ...]:
    """The job's task list with `workers` workers and `ps` parameter servers (demands copied from
    its own first worker and first PS; workers first, as the workload schema builds them)."""
    w0 = next(t for t in spec.tasks if t.role is Role.WORKER)
    p0 = next((t for t in spec.tasks if t.role is Role.PS), None)
    if ps and p0 is None:
        raise ValueError(f"job {spec.job_id} has no parameter server to copy")
    return _task_list(w0.demand, None if p0 is None else p0.demand, workers, ps)


@lru_cache(maxsize=8192)
def _task_list(wd: tuple, pd: tuple | None, workers: int, ps: int) -> tuple[TaskSpec, ...]:
    """The task list of a shape (TaskSpecs are immutable, so jobs of one shape share one)."""
    tasks = [TaskSpec(i, Role.WORKER, wd) for i in range(workers)]
    tasks += [TaskSpec(workers + j, Role.PS, pd) for j in range(ps)]
    return tuple(tasks)


_SHAPES: dict[int, tuple] = {}


def shape(tasks) -> tuple[int, int]:
    """(workers, parameter servers) of a task list (remembered per list: a round asks it of
    every active job, and a job's list changes only when it is resized)."""
    hit = _SHAPES.get(id(tasks))
    if hit is not None and hit[0] is tasks:
        return hit[1]
    p = sum(1 for t in tasks if t.role is Role.PS)
    if len(_SHAPES) > 100_000:
        _SHAPES.clear()
    _SHAPES[id(tasks)] = (tasks, (len(tasks) - p, p))     # the list is kept: its id stays its own
    return len(tasks) - p, p



@dataclass(slots=True, eq=False)
class AllocJob:
    """One job of an Optimus allocation. gain of a worker = (time(w, p) - time(w + 1, p)) x kw,
    of a PS = (time(w, p) - time(w, p + 1)) x kp (kw, kp: the early factor over the task's
    dominant share, times anything that scales `time` to the time to finish). A rigid job (no
    speed model) takes `rigid` (its requested tasks' total demand) or nothing."""
    job_id: str
    worker: list                 # demand of one worker
    ps: list | None              # demand of one PS (None: no PS)
    cap: int                     # most workers
    kw: float
    kp: float
    time: Callable[[int, int], float]
    rigid: list | None = None
    rigid_shape: tuple[int, int] = (0, 0)


def greedy_allocate(jobs: list[AllocJob], left: list[float]) -> dict[str, list[int]]:
    """Optimus's allocation (steps 1 and 2 of the module docstring) over `left`, the free
    resource vector (a list, consumed): {job: [workers, PS]}, [0, 0] for a job whose minimum
    does not fit. `jobs` in arrival order."""
    nres = len(left)
    all_dims = tuple(range(nres))

    def fits(v, dims) -> bool:
        for i in dims:
            if v[i] > left[i] + _EPS:
                return False
        return True

    def take(v, dims) -> None:
        for i in dims:
            left[i] -= v[i]

    alloc: dict[str, list[int]] = {}
    elastic: dict[str, tuple] = {}
    for job in jobs:
        if job.rigid is not None:
            if fits(job.rigid, all_dims):
                alloc[job.job_id] = list(job.rigid_shape)
                take(job.rigid, all_dims)
            else:
                alloc[job.job_id] = [0, 0]
            continue
        wv, pv = job.worker, job.ps
        wd = tuple(i for i in all_dims if wv[i] > _EPS)
        pd = () if pv is None else tuple(i for i in all_dims if pv[i] > _EPS)
        if fits(wv, wd) and (pv is None or fits([wv[i] + pv[i] for i in all_dims], all_dims)):
            alloc[job.job_id] = [1, 0 if pv is None else 1]
            take(wv, wd)
            if pv is not None:
                take(pv, pd)
            elastic[job.job_id] = (job, wd, pd)
        else:
            alloc[job.job_id] = [0, 0]

    heap: list = []
    heappush = list.append                     # the first pushes: one heapify after them

    def push(jid: str, job: AllocJob, w: int, p: int, t0: float) -> None:
        # t0 = time(w, p); each entry carries the time after its step, the next push's t0
        if w < job.cap:
            t1 = job.time(w + 1, p)
            g = (t0 - t1) * job.kw
            if g > 0:
                heappush(heap, (-g, jid, 0, w, p, t1))
        if job.ps is not None and p < w:       # never more PS than workers
            t1 = job.time(w, p + 1)
            g = (t0 - t1) * job.kp
            if g > 0:
                heappush(heap, (-g, jid, 1, w, p, t1))

    for jid, (job, _, _) in elastic.items():
        w, p = alloc[jid]
        push(jid, job, w, p, job.time(w, p))
    heapq.heapify(heap)
    heappush = heapq.heappush
    heappop = heapq.heappop
    while heap:
        _, jid, role, w, p, t1 = heappop(heap)
        a = alloc[jid]
        if a[0] != w or a[1] != p:
            continue                           # stale: the job's gains were recomputed
        job, wd, pd = elastic[jid]
        v, dims = (job.worker, wd) if role == 0 else (job.ps, pd)
        if not fits(v, dims):
            continue                           # does not fit any more (resources only shrink)
        a[role] += 1
        take(v, dims)
        push(jid, job, a[0], a[1], t1)
    return alloc
