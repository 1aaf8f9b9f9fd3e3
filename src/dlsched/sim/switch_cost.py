"""The simulator's switch-cost model: what a suspend, resume, migrate, resize or pack costs a job.

SimBackend (backend.py) owns the clock and the jobs' state; every figure it charges for a switch
is computed here, so the whole model reads in one place. All times are seconds of simulated time,
bandwidths Gbps (1 Gbps = GBPS = 1e9 / 8 bytes/s), sizes bytes.

Plain decisions (no `cost`: every policy but Gandiva's)
    Suspend      free: the job's resources are free at once; progress is kept.
    Resume       the job holds its new resources without progress for restart_delay_s
    Migrate      (SimBackend argument, default 30 s, CLI --restart-delay-s: a stand-in for
    Resize       checkpoint restore and process start, shared with the runtime's preempt docs).
    Launch       a first start holds start_delay_s (default 0; Pollux's simulator charges its
                 30 s rescale_time on the first start too). A Migrate / Resize of a job never
                 placed before is its first start (start_delay_s, not restart_delay_s).
    restart_hold_s() picks between the two.

Costed decisions (a decision whose `cost` is a dlsched.workload.packing.SwitchCost; Gandiva's
mechanisms, dlsched.policies.actions.gandiva_common) replace restart_delay_s. With
H = cost.host_gbps, F = cost.fixed_s, R = cost.restart_s, N = cost.net_gbps and
B(m) = checkpoint_bytes(m) = 3 x the parameter bytes of model m (weights, gradients, optimizer
state at a mini-batch boundary; workload/packing.py, parameter sizes from the model zoo):

    copy      C(m)      = F + B(m) / (H x GBPS)          GPU memory <-> host memory, one way
    transfer  T(m, nic) = B(m) / (bw x GBPS),  bw = N, or when N is None the slowest NIC (Gbps)
                                                of the servers the checkpoint moves between

    Suspend   with cost.boundary, a running DL job first finishes its mini-batch:
                  u    = 1 iteration (iteration-counted jobs) or ideal_iter_s (duration jobs)
                  left = (u - done mod u) mod u            (work units; done = total - remaining)
                  w    = left / rate   if 1e-9 < left < remaining - 1e-9 and u - left > 1e-9
                         else 0        (at a boundary already, or about to finish anyway)
              and is credited that whole mini-batch. Its resources are free at once for the
              plan's next decisions, but its GPUs, and its own checkpoint, are busy until
                  now + w + C(m)                           (checkpoint_done_at)
    Resume    restore = C(m); resumed on a server it did not last run on (the new nodes are not a
              subset of the old): + R + T(m, min NIC over old and new nodes)   (resume_restore_s)
    Migrate   a running job checkpoints as Suspend does, then
    Resize        restore = R + C(m), + T(m, min NIC over old and new nodes, 1.0 if there are
              none) when any new node is not an old one                        (move_restore_s)
    Launch    restore = 0.
    Waiting   a costed (re)start begins at ready = max(now, the job's own checkpoint-done time,
              the busy-until time of every GPU it takes), so it holds its resources without
              progress for (ready - now) + restore                             (costed_hold_s)

Lost time: every restart's hold (plain or costed) is added to job_stats switch_lost_s, and
x the GPUs it holds to switch_lost_gpu_s, when it begins. A restart cut short (the job stopped
again before its hold is over) is charged only what it spent: the unspent rest of its hold,
unspent_hold_s, is taken back when it stops, so that per job GPU-seconds held = GPU-seconds of
progress + switch_lost_gpu_s.

Sharing and packing (sharing_factor). A job whose GPUs also hold other jobs runs at a fraction
of its solo speed: in packing mode (a Launch / Resume with `packed = True` for it or for any job
on its GPUs) Gandiva's Table 1 model, packed_factor([m, others]) = min(1, 1 / sum_j c_j)
(workload/packing.py); otherwise the product over the other jobs of the speed model's pairwise
interference SpeedParams.factor(m, m_other) (workload/speed.py).

Where the constants come from. host_gbps 80: PCIe 3.0 x16, about 10 GB/s. fixed_s 0.5: Gandiva
(OSDI 2018) reports suspend / resume in "tens to hundreds of milliseconds" plus signalling, about
half a second. restart_s 5: Gandiva's Figure 13 (most of a migration is the framework's restart).
The three are SwitchCost's defaults and the gandiva_* actions' parameters. The 3 x parameter
bytes checkpoint is Gandiva's observation that GPU memory use is lowest at the mini-batch boundary
(its Figure 5). The 1e-9 tolerances are float guards (a job exactly at a boundary does not wait a
whole mini-batch). restart_delay_s 30 and start_delay_s 0 are SimBackend's defaults.
Table 1's packing figures are in workload/packing.py.

The functions are pure: they read their arguments and return seconds (or a time); the backend
decides when to call them and updates its state. Their arithmetic is kept in the order the
backend always used, so a run's event log is bit for bit what it was before this module existed.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

from dlsched.workload.packing import GBPS, SwitchCost, checkpoint_bytes, packed_factor

__all__ = ["GBPS", "SwitchCost", "checkpoint_bytes", "restart_hold_s", "boundary_wait_s",
           "checkpoint_done_at", "resume_restore_s", "move_restore_s", "costed_hold_s",
           "unspent_hold_s", "sharing_factor"]

_EPS = 1e-9


def restart_hold_s(restoring: bool, restart_delay_s: float, start_delay_s: float,
                   costed_s: float | None) -> float:
    """Seconds a (re)started job holds its resources before it progresses: a costed decision's
    own figure when it set one, else restart_delay_s for a restart and start_delay_s for a first
    start."""
    if costed_s is not None:
        return costed_s
    return restart_delay_s if restoring else start_delay_s


def boundary_wait_s(cost: SwitchCost, unit: float, done: float, remaining: float, rate: float) -> float:
    """w: seconds a suspended job runs on to finish its current mini-batch of `unit` work units
    (`done` of them done, `remaining` left, at `rate` units/s); 0 when it is at a boundary, about
    to finish, not running, or the cost does not wait for the boundary."""
    if not cost.boundary or rate <= 0:
        return 0.0
    left = (unit - done % unit) % unit           # rest of the mini-batch in progress
    if _EPS < left < remaining - _EPS and unit - left > _EPS:
        return left / rate
    return 0.0


def checkpoint_done_at(cost: SwitchCost, model: str | None, now: float, wait_s: float) -> float:
    """When a costed checkpoint started at `now` is done: the mini-batch, then one copy out."""
    return now + wait_s + cost.copy_s(model)


def _min_nic(nodes: Sequence, ids: Iterable[int], default: float | None = None) -> float:
    gbps = (nodes[n].nic_gbps for n in sorted(ids))
    return min(gbps) if default is None else min(gbps, default=default)


def resume_restore_s(cost: SwitchCost, model: str | None, last_nodes: Iterable[int],
                     new_nodes: Iterable[int], nodes: Sequence) -> float:
    """Restore time of a costed Resume on `new_nodes` of a job last run on `last_nodes`
    (`nodes`: the cluster's NodeSpecs by id, for their nic_gbps)."""
    delay = cost.copy_s(model)
    new, last = set(new_nodes), set(last_nodes)
    if last and not new <= last:                 # resumed on another server
        delay += cost.restart_s + cost.transfer_s(model, _min_nic(nodes, new | last))
    return delay


def move_restore_s(cost: SwitchCost, model: str | None, old_nodes: Iterable[int],
                   new_nodes: Iterable[int], nodes: Sequence) -> float:
    """Restore time of a costed Migrate / Resize from `old_nodes` (where it runs, or its
    checkpoint lies) to `new_nodes`: process restart and copy in, plus the transfer when a
    server is new."""
    new, old = set(new_nodes), set(old_nodes)
    nic = _min_nic(nodes, old | new, default=1.0)
    delay = cost.restart_s + cost.copy_s(model)
    if new - old:
        delay += cost.transfer_s(model, nic)
    return delay


def costed_hold_s(now: float, busy_until: Iterable[float], restore_s: float) -> float:
    """Hold of a costed (re)start: wait for every time in `busy_until` (the job's own checkpoint,
    the GPUs it takes) that is later than `now`, then restore."""
    ready = now
    for t in busy_until:
        ready = max(ready, t)
    return (ready - now) + restore_s


def unspent_hold_s(hold_until: float, now: float) -> float:
    """The part of a restart's hold, charged whole when it began and over at `hold_until`, not
    spent by `now` (the job stops): 0 once the hold is over."""
    return hold_until - now if hold_until > now else 0.0


def sharing_factor(model: str | None, others: Sequence[tuple[str, str | None]], packed: bool,
                   pair_factor: Callable[[str | None, str | None], float]) -> float:
    """Speed (of its solo speed) of a job of `model` whose GPUs also hold `others`, (job_id,
    model) pairs in the order met: Table 1's packing model in packing mode, else the product of
    pairwise interference factors."""
    if packed and others:
        return packed_factor([model, *(m for _, m in sorted(others))])
    f = 1.0
    for _, m in others:
        f *= pair_factor(model, m)
    return f
