"""The semantics added to match Pollux's simulator: rounds only at multiples of round_s
(`event_rounds: false`), a first-start delay (`start_delay_s`) and the most-free-GPUs chunk
placement (`most_free`)."""
import pytest

import dlsched
import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.core.errors import ConfigError
from dlsched.scheduler.core import build_profile
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

TWO = {"node_groups": [{"count": 2, "gpus": 4, "gpu_mem_gb": 32, "cpus": 32, "mem_gb": 128}]}
THREE = {"node_groups": [{"count": 3, "gpus": 4, "gpu_mem_gb": 32, "cpus": 32, "mem_gb": 128}]}


def job(job_id, t, workers, duration):
    return job_from_row(dict(job_id=job_id, submit_time_s=t, workers=workers, duration_s=duration))


def starts(res):
    j = res.jobs.set_index("job_id")
    return {i: (r.first_start_s, r.finish_s) for i, r in j.iterrows()}


def test_without_event_rounds_an_arrival_waits_for_the_next_multiple_of_round_s():
    # fifo-gang with round_s 60 and event_rounds off: a job arriving at 70 starts at 120; one
    # arriving at 180 (a multiple) starts at once; B (at 75) waits for A's GPUs, freed at 220
    # (120 + 100), until the round at 240.
    jobs = [job("A", 70, 8, 100.0), job("B", 75, 4, 50.0), job("C", 180, 4, 10.0)]
    cfg = {"policies": {"fifo-gang": {"round_s": 60, "event_rounds": False}}}
    res = dlsched.simulate(cluster_from_dict(TWO), jobs, "fifo-gang", policy_config=cfg)
    assert starts(res) == {"A": (120.0, 220.0), "B": (240.0, 290.0), "C": (240.0, 250.0)}
    # with event rounds (the default) everything starts as soon as it can
    res = dlsched.simulate(cluster_from_dict(TWO), jobs, "fifo-gang")
    assert starts(res) == {"A": (70.0, 170.0), "B": (170.0, 220.0), "C": (180.0, 190.0)}


def test_event_rounds_off_needs_round_s():
    with pytest.raises(ConfigError, match="event_rounds"):
        build_profile("fifo", {"event_rounds": False})
    with pytest.raises(ConfigError, match="round_s"):
        build_profile("fifo", {"round_s": -5})


def test_start_delay_is_charged_on_the_first_launch_only():
    # start_delay 30: A (100 s of work) launched at 0 trains from 30, ends at 130, holding its
    # 4 GPUs all the while (4 x 130 GPU-s).
    res = dlsched.simulate(cluster_from_dict(TWO), [job("A", 0, 4, 100.0)], "fifo", start_delay_s=30.0)
    row = res.jobs.set_index("job_id").loc["A"]
    assert (row.first_start_s, row.finish_s, row.gpu_s) == (0.0, 130.0, 520.0)
    assert dlsched.simulate(cluster_from_dict(TWO), [job("A", 0, 4, 100.0)], "fifo").jobs.finish_s[0] == 100.0
    with pytest.raises(ValueError):
        SimBackend(cluster_from_dict(TWO), [], start_delay_s=-1.0)


def test_most_free_places_chunks_on_the_freest_node():
    # Three 4-GPU nodes; X (2 GPUs) lands on node 0 (all tie at 4 free: lowest id). Then Y with
    # 6 one-GPU workers: node 1 has the most free (4; tie with node 2, lowest id): 4 there, then
    # the freest is node 2 (4 free): 2 there. First fit would have used node 0's 2 free GPUs.
    jobs = [job("X", 0, 2, 1000.0), job("Y", 10, 6, 100.0)]
    res = dlsched.simulate(cluster_from_dict(THREE), jobs, "tiresias")
    placed = [e for e in res.events if e[1] == "take" and e[2] == "Y"]
    assert placed, res.events[:5]
    nodes = sorted(int(p.split("@")[1]) for p in placed[0][3].split(";"))
    assert nodes == [1, 1, 1, 1, 2, 2]


@pytest.mark.parametrize("name", ["tiresias", "optimus"])
def test_the_runtime_runs_rounds_on_events_unless_told_otherwise(name):
    # the simulator keeps Pollux's loop (rounds at multiples of 60 s); the real runtime also runs a
    # round on each event, so a job submitted to an idle cluster starts at once; the periodic round
    # stays, and a user's `event_rounds: false` (the liquid-event-driven experiment's polling) wins
    sim = build_profile(name)
    assert (sim.event_rounds, sim.round_s) == (False, 60.0)
    rt = build_profile(name, runtime=True)
    assert (rt.event_rounds, rt.round_s) == (True, 60.0)
    assert build_profile(name, {"event_rounds": False}, runtime=True).event_rounds is False
    # the runtime's own params are still applied under the user's
    if name == "optimus":
        assert (rt.allocator.speed, rt.allocator.remaining) == ("fitted", "fitted")
        assert build_profile(name, {"params": {"optimus": {"speed": "oracle"}}}, runtime=True).allocator.speed \
            == "oracle"
