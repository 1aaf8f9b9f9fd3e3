"""The `preempt` action (policies/actions/preempt.py) in the compiled run
(dlsched.sim.fastloop_kernel): its gate only. Before placement it asks whether the waiting jobs
of the round's queue need more GPUs than are free; only then does it walk the running jobs for
victims. The kernel runs it as deciding nothing and stops (the Python loop's) at the first round
whose gate opens: a walk may suspend jobs, and even one that suspends nobody may change a size
order's quiet time. So a run where every admitted job's GPUs are free when it is admitted (the
per-VC Philly replays: jobs wait on their queue's quota) stays compiled. Compiled by `compile`
before the kernel (numba caches by file: after a change here, touch fastloop_kernel.py).
"""
from __future__ import annotations

import numpy as np

from dlsched.core.types import GPU

_EPS = 1e-9


def _need_exceeds_py(queue, nq, toff, ntask, nplaced, tgpu, free):
    """preempt._need_exceeds: whether the first nq jobs of `queue` need more GPUs (their tasks
    not placed yet) than the nodes have free (every node up)."""
    have = 0.0
    for n in range(free.shape[0]):
        have += max(free[n, GPU], 0.0)
    total = 0.0
    for i in range(nq):
        j = queue[i]
        for k in range(toff[j] + nplaced[j], toff[j] + ntask[j]):
            total += tgpu[k]
        if total > have + _EPS:
            return True
    return False


def _quiet_py(rl, nrl, jf, svc, hold, tthr, now):
    """TiresiasOrder.quiet_until(now) over the running jobs rl[:nrl] (without the starvation
    guard: no promotions): the first time a running job's attained GPU-seconds (jf[:, 5] settled,
    since svc at hold GPUs) reach its queue's threshold; inf with no thresholds (an order whose
    keys time does not move)."""
    t = np.inf
    if tthr.shape[0] == 0:
        return t
    for i in range(nrl):
        j = rl[i]
        held = hold[j]
        if held <= 0:
            continue
        service = (jf[j, 5] + (now - svc[j]) * held) - 0.0
        q = np.searchsorted(tthr, service, side="right")
        if q < tthr.shape[0]:
            t = min(t, now + (tthr[q] - service) / held)
    return t


need_exceeds, quiet = _need_exceeds_py, _quiet_py


def applies(profile) -> bool | None:
    """None where the profile has no actions; True where its one action is `preempt` as the
    kernel runs it (enabled without a minimum run time, whose protections would make rounds at
    ticks that are not quiet; or disabled); False otherwise."""
    from dlsched.policies.actions.preempt import Preempt
    acts = list(profile.actions)
    if not acts:
        return None
    return len(acts) == 1 and type(acts[0]) is Preempt and (not acts[0].enabled or acts[0].min_run_s <= 0)


def compile() -> None:
    """Make need_exceeds compiled (numba), as the kernel needs it when it is compiled."""
    global need_exceeds, quiet
    if need_exceeds is _need_exceeds_py:
        import numba
        need_exceeds = numba.njit(cache=True, nogil=True)(_need_exceeds_py)
        quiet = numba.njit(cache=True, nogil=True)(_quiet_py)
