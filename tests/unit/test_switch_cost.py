"""The simulator's switch-cost model (dlsched.sim.switch_cost): each figure recomputed here by hand
from the formulas in the module's docstring, with round constants that make the arithmetic easy
to follow."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from dlsched.core.types import Plan, Resume, Suspend
from dlsched.sim import switch_cost as sc
from dlsched.workload.packing import SwitchCost

# RHN is a Table 1 model outside the zoo: PARAM_MB = 96, so B = 3 x 96 MB = 288e6 bytes.
MODEL = "rhn"
B = 3 * 96e6
# H = 8 Gbps = 1e9 bytes/s, F = 0.25 s, R = 2 s.
COST = SwitchCost(host_gbps=8.0, fixed_s=0.25, restart_s=2.0)
C = 0.25 + B / 1e9                       # copy: 0.25 + 0.288 = 0.538 s
NODES = [SimpleNamespace(nic_gbps=g) for g in (10.0, 25.0, 40.0)]


def T(gbps: float) -> float:
    """Transfer of the checkpoint at `gbps` (1 Gbps = 1e9 / 8 bytes/s)."""
    return B / (gbps * 1e9 / 8)


def test_copy_and_transfer():
    assert sc.checkpoint_bytes(MODEL) == pytest.approx(B)
    assert COST.copy_s(MODEL) == pytest.approx(0.538)
    assert C == pytest.approx(0.538)
    assert COST.transfer_s(MODEL, 10.0) == pytest.approx(0.2304)          # 288e6 / 1.25e9
    # net_gbps overrides the NICs: 288e6 / 2.5e8
    assert SwitchCost(net_gbps=2.0).transfer_s(MODEL, 10.0) == pytest.approx(1.152)


def test_resume_restore():
    # same server (or a subset of the old ones), or never ran: one copy in
    assert sc.resume_restore_s(COST, MODEL, (0,), [0], NODES) == pytest.approx(C)
    assert sc.resume_restore_s(COST, MODEL, (0, 1), [1], NODES) == pytest.approx(C)
    assert sc.resume_restore_s(COST, MODEL, (), [2], NODES) == pytest.approx(C)
    # from node 0 to node 1: + restart + transfer over the slower NIC (10 Gbps)
    got = sc.resume_restore_s(COST, MODEL, (0,), [1], NODES)
    assert got == pytest.approx(C + 2.0 + T(10.0))
    assert got == pytest.approx(2.7684)


def test_migrate_and_resize_restore():
    # no new server: restart + copy in
    assert sc.move_restore_s(COST, MODEL, {1}, [1], NODES) == pytest.approx(2.538)
    # grows onto node 2: + transfer over min(25, 40) = 25 Gbps -> 288e6 / 3.125e9 = 0.09216 s
    assert sc.move_restore_s(COST, MODEL, {1}, [1, 2], NODES) == pytest.approx(2.538 + 0.09216)
    # nothing old (the job never ran): every node is new, the NIC is node 2's own
    assert sc.move_restore_s(COST, MODEL, set(), [2], NODES) == pytest.approx(2.538 + T(40.0))


def test_minibatch_boundary_wait():
    # 10.25 iterations done at 2 it/s: 0.75 left in this mini-batch -> 0.375 s
    assert sc.boundary_wait_s(COST, 1.0, 10.25, 89.75, 2.0) == pytest.approx(0.375)
    # at a boundary, about to finish, not running, or a cost that does not wait: no wait
    assert sc.boundary_wait_s(COST, 1.0, 10.0, 90.0, 2.0) == 0.0
    assert sc.boundary_wait_s(COST, 1.0, 10.25, 0.5, 2.0) == 0.0
    assert sc.boundary_wait_s(COST, 1.0, 10.25, 89.75, 0.0) == 0.0
    assert sc.boundary_wait_s(SwitchCost(boundary=False), 1.0, 10.25, 89.75, 2.0) == 0.0
    # a duration job: unit = its ideal iteration time (0.4 s); 1.0 s done -> 0.2 s left, rate 0.5
    assert sc.boundary_wait_s(COST, 0.4, 1.0, 50.0, 0.5) == pytest.approx(0.4)
    # checkpoint done = now + w + C
    assert sc.checkpoint_done_at(COST, MODEL, 100.0, 0.375) == pytest.approx(100.0 + 0.375 + 0.538)


def test_costed_hold_waits_for_the_latest_busy_gpu():
    assert sc.costed_hold_s(10.0, [9.0, 12.5, 11.0], 0.538) == pytest.approx(2.5 + 0.538)
    assert sc.costed_hold_s(10.0, [0.0, 3.0], 0.538) == pytest.approx(0.538)
    assert sc.costed_hold_s(10.0, [], 0.0) == 0.0


def test_plain_restart_hold():
    assert sc.restart_hold_s(True, 30.0, 5.0, None) == 30.0       # restart_delay_s
    assert sc.restart_hold_s(False, 30.0, 5.0, None) == 5.0       # first start: start_delay_s
    assert sc.restart_hold_s(True, 30.0, 5.0, 1.5) == 1.5         # a costed decision's own
    assert sc.restart_hold_s(True, 30.0, 5.0, 0.0) == 0.0         # ... even when it is 0


def test_sharing_factor():
    # packed: Table 1, c = time slicing / packing max; two ResNet-50s: sum c = 2 x 10.3 / 9.0
    two_resnets = sc.sharing_factor("resnet50", [("j2", "resnet50")], True, lambda a, b: 0.0)
    assert two_resnets == pytest.approx(1.0 / (2 * 10.3 / 9.0))
    # two VAEs: sum c = 2 x 81.8 / 419.3 < 1, so each runs at full speed
    assert sc.sharing_factor("vae", [("j2", "vae")], True, lambda a, b: 0.0) == 1.0
    # not packed: the product of the pairwise interference factors
    pair = {"x": 0.9, "y": 0.5}
    assert sc.sharing_factor("m", [("j3", "x"), ("j2", "y")], False,
                             lambda a, b: pair[b]) == pytest.approx(0.45)
    assert sc.sharing_factor("m", [], True, lambda a, b: 0.0) == 1.0


# Decisions that carry a cost, as the simulator reads them (getattr(d, "cost", None)), whatever
# the core decision types hold.
@dataclass(frozen=True)
class _CostedSuspend(Suspend):
    cost: object = None


@dataclass(frozen=True)
class _CostedResume(Resume):
    cost: object = None


def test_simbackend_charges_the_model():
    """A costed suspend and a resume on another server: the lost time SimBackend reports is the
    module's figure (the job runs alone, so its GPUs are free when it resumes)."""
    from dlsched.cluster.topology import load_cluster
    from dlsched.core.types import Launch, TaskPlacement
    from dlsched.sim.backend import SimBackend
    from dlsched.workload.schema import job_from_row

    cl = load_cluster("seed002")
    job = job_from_row(dict(job_id="a", submit_time_s=0, model=MODEL, duration_s=1e5))
    b = SimBackend(cl, [job], restart_delay_s=30)
    b.poll()
    p = Plan()
    p.add(Launch("a", (TaskPlacement(0, 0, (0,)),)))
    b.apply(p)
    b.wake_at(10.0)
    while b.now() < 10.0:
        b.poll()
    cost = SwitchCost(host_gbps=8.0, fixed_s=0.25, restart_s=2.0, boundary=False)
    for d in (_CostedSuspend("a", cost=cost), _CostedResume("a", (TaskPlacement(0, 1, (0,)),), cost=cost)):
        p = Plan()
        p.add(d)
        b.apply(p)
    # suspended at t = 10 without waiting (boundary off): its checkpoint is out at 10 + C; the
    # resume on node 1 waits for it, then restarts (R), moves it (node 0 -> 1) and copies it in
    nic = min(cl.nodes[0].nic_gbps, cl.nodes[1].nic_gbps)
    want = C + (2.0 + C + T(nic))
    assert b.job_stats("a")["switch_lost_s"] == pytest.approx(want)
    assert b.job_stats("a")["suspends"] == 1 and b.job_stats("a")["resumes"] == 1
