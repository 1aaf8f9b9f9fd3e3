"""GPU sharing on the real runtime (dlsched.runtime.shares): Gandiva packs two jobs onto one GPU
id it chose; Ray admits both (per-GPU slots that mirror the ledger), both ranks see that id in
CUDA_VISIBLE_DEVICES and make progress at once; the ledger's load of the GPU goes 2, 1, 0 as
they finish, and Ray's booking follows it (the job left alone holds its GPU whole again). A GPU
in use is never given to an exclusive job: neither by the runtime (a job that arrives while every
GPU is busy waits) nor by Ray (a group asking for any share of a GPU in use is not admitted).

Its own small cluster (one node, two virtual GPUs, two CPUs; no dashboard, small object store),
a `dlsched server --policy gandiva` with a round every second, and this process as a Ray driver
to read what Ray holds."""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ServerProc

PLUGINS = Path(__file__).parent / "plugins"


@pytest.fixture(scope="module")
def small_cluster():
    from dlsched.runtime.cluster import LocalRay
    with LocalRay(1, 2, cpus_per_node=2) as r:
        import ray                           # after LocalRay has set Ray's environment
        ray.init(address=r.address, namespace="probe", log_to_driver=False)
        try:
            yield r.cluster
        finally:
            ray.shutdown()


def job(name: str, model: str, iterations: int, step_s: float = 0.05, until: Path | None = None) -> dict:
    """A 1-GPU job of gpu_share_job.py; with `until`, it ends when that file appears."""
    args = {"step_s": step_s, **({"until_file": str(until)} if until else {})}
    return {"name": name, "entry": str(PLUGINS / "gpu_share_job.py"), "args": args,
            "workers": 1, "gpus_per_worker": 1, "cpus_per_worker": 0.25, "batch_size": 8,
            "iterations": iterations, "checkpoint_every": 50, "model": model}


def groups() -> dict[str, dict]:
    """Ray's live placement groups of dlsched: job id -> its one bundle."""
    from ray.util import placement_group_table
    out = {}
    for pg in placement_group_table().values():
        if pg["name"].startswith("dlsched-pg-") and pg["state"] == "CREATED":
            out[pg["name"][len("dlsched-pg-"):]] = {k: v for k, v in pg["bundles"][0].items() if k != "CPU"}
    return out


def admitted(bundle: dict) -> bool:
    """Would Ray admit a group with this bundle on the node now? (removed at once)"""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU"))
    pg = placement_group([{**bundle, "CPU": 0.01}], bundle_label_selector=[{"ray.io/node-id": node}])
    ok = pg.wait(1.0)
    remove_placement_group(pg)
    return ok


def test_gandiva_packs_two_jobs_on_one_gpu_and_ray_follows_the_ledger(small_cluster):
    t_start = time.monotonic()
    sd = Path(tempfile.mkdtemp(prefix="dlsched-share-"))
    # packing at once (no solo turn first: this is about sharing, seed001-packing about profiling)
    cfg = sd / "policy.yaml"
    cfg.write_text("policies:\n  gandiva:\n    params:\n      gandiva_pack: {profile_first: false}\n")
    s = ServerProc(small_cluster.address, sd, "gandiva", "share", warm=2,
                   extra=["--round-s", "1", "--policy-config", str(cfg)]).start()
    try:
        gpu_load = lambda: s.get("/nodes")[0]["gpu_load"]          # noqa: E731
        steps = lambda jid: s.get(f"/jobs/{jid}")["step"]            # noqa: E731
        # A (light: Gandiva packs two VAEs) takes a free GPU alone: Ray books it whole
        a = s.submit(job("a", "vae", 100000, until=sd / "a.end"))
        s.wait(a, lambda j: j["state"] == "running" and j["step"] > 0, 60, "a runs")
        (ga,) = s.get(f"/jobs/{a}")["allocation"][0]["gpu_ids"]
        assert groups()[a] == {f"dlsched_gpu_{ga}": 1.0}
        assert not admitted({f"dlsched_gpu_{ga}": 0.1})            # exclusive: nothing beside it
        # C (heavy: never packed) takes the other GPU
        c = s.submit(job("c", "resnet50", 100000))
        s.wait(c, lambda j: j["state"] == "running", 60, "c runs")
        (gc,) = s.get(f"/jobs/{c}")["allocation"][0]["gpu_ids"]
        assert gc != ga and sorted(gpu_load()) == [1, 1]
        # B arrives with every GPU busy: time slicing puts it in A's ring, packing starts it
        # beside A on A's GPU (a packed Launch) within a round or two
        b = s.submit(job("b", "vae", 100000, until=sd / "b.end"))
        s.wait(b, lambda j: j["state"] == "running" and j["step"] > 0, 30, "b runs packed")
        assert s.get(f"/jobs/{b}")["allocation"][0]["gpu_ids"] == [ga]
        launch_b = [r for r in s.get("/log") if r["job_id"] == b and r["kind"] == "launch"]
        assert launch_b and launch_b[0]["packed"] and launch_b[0]["placements"][0][2] == [ga]
        load = gpu_load()
        assert load[ga] == 2 and load[gc] == 1
        # Ray holds exactly the ledger: half of A's GPU each, C's GPU whole; no room anywhere
        g = groups()
        assert g[a] == g[b] == {f"dlsched_gpu_{ga}": 0.5} and g[c] == {f"dlsched_gpu_{gc}": 1.0}
        assert not admitted({f"dlsched_gpu_{ga}": 0.1}) and not admitted({f"dlsched_gpu_{gc}": 0.1})
        # both make progress at once
        s0 = {j: steps(j) for j in (a, b)}
        t0 = time.monotonic()
        while not all(steps(j) > s0[j] + 5 for j in (a, b)) and time.monotonic() - t0 < 20:
            time.sleep(0.3)
        s1 = {j: steps(j) for j in (a, b)}
        assert all(s1[j] > s0[j] + 5 for j in (a, b)), (s0, s1)
        for j in (a, b):                        # side by side all along: neither was stopped
            assert s.get(f"/jobs/{j}")["state"] == "running"
            assert [e["kind"] for e in s.get(f"/jobs/{j}/events")].count("started") == 1
        # the ranks see the GPU the policy chose, the same for both
        for jid, gid in ((a, ga), (b, ga), (c, gc)):
            out = s.get(f"/jobs/{jid}/output", params={"rank": 0})["text"]
            assert f"CUDA_VISIBLE_DEVICES={gid} " in out, out[-500:]
        # D (heavy) arrives with every GPU in use: it waits (C's ring), never on a GPU in use
        d = s.submit(job("d", "resnet50", 100))
        time.sleep(2.5)
        jd = s.get(f"/jobs/{d}")
        assert jd["state"] in ("queued", "suspended") and not jd["allocation"], jd
        assert gpu_load()[ga] == 2 and d not in groups()
        s.post(f"/jobs/{d}/cancel")
        # A finishes: B is alone on the GPU, and Ray gives it the whole GPU again
        (sd / "a.end").touch()
        s.wait_state(a, "done", 60)
        assert gpu_load()[ga] == 1 and s.get(f"/jobs/{b}")["state"] == "running"
        t0 = time.monotonic()
        while groups().get(b) != {f"dlsched_gpu_{ga}": 1.0} and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        assert groups()[b] == {f"dlsched_gpu_{ga}": 1.0} and a not in groups()
        # B finishes: the GPU is free in the ledger and in Ray
        (sd / "b.end").touch()
        s.wait_state(b, "done", 60)
        assert gpu_load()[ga] == 0 and b not in groups()
        assert admitted({f"dlsched_gpu_{ga}": 1.0}) and not admitted({f"dlsched_gpu_{gc}": 0.1})
        s.post(f"/jobs/{c}/cancel")
        s.wait_state(c, "cancelled", 30)
        assert gpu_load() == [0, 0] and not groups()
        ev = [e["kind"] for e in s.get(f"/jobs/{b}/events")]
        assert "gpu_shares" in ev and "reservation_lost" not in ev
        # a rank with two GPUs books each of them whole and sees both
        e = s.submit({**job("e", "resnet50", 40), "gpus_per_worker": 2})
        s.wait(e, lambda j: j["state"] == "running" and j["step"] > 0, 60, "e runs")
        assert groups()[e] == {"dlsched_gpu_0": 1.0, "dlsched_gpu_1": 1.0} and gpu_load() == [1, 1]
        s.wait_state(e, "done", 60)
        assert "CUDA_VISIBLE_DEVICES=0,1 " in s.get(f"/jobs/{e}/output", params={"rank": 0})["text"]
    finally:
        s.stop()
        shutil.rmtree(sd, ignore_errors=True)
    assert time.monotonic() - t_start < 90


def test_fractional_jobs_share_a_gpu_under_liquid(small_cluster):
    """Seed 003's fine-grained sharing on the runtime: development jobs that ask for half a GPU
    share one (the same GPU id, both running at once, Ray's slot split between them), never the
    GPU a whole-GPU job holds; a third half waits until a half frees."""
    sd = Path(tempfile.mkdtemp(prefix="dlsched-frac-"))
    # the first test's namespace: this server adopts its idle warm workers (a restarted server
    # does) instead of starting two more, each a torch import on the two cores
    s = ServerProc(small_cluster.address, sd, "liquid-immediate", "share", warm=2, extra=["--round-s", "1"]).start()
    try:
        half = lambda name: {**job(name, "vae", 100000, until=sd / f"{name}.end"), "gpus_per_worker": 0.5}  # noqa: E731
        p = s.submit(job("p", "resnet50", 100000, until=sd / "p.end"))
        s.wait(p, lambda j: j["state"] == "running", 60, "p runs")
        (gp,) = s.get(f"/jobs/{p}")["allocation"][0]["gpu_ids"]
        h1, h2 = s.submit(half("h1")), s.submit(half("h2"))
        for h in (h1, h2):
            s.wait(h, lambda j: j["state"] == "running" and j["step"] > 0, 60, "half runs")
        (g1,), (g2,) = (s.get(f"/jobs/{h}")["allocation"][0]["gpu_ids"] for h in (h1, h2))
        assert g1 == g2 != gp
        assert s.get("/nodes")[0]["gpu_load"][g1] == 2
        g = groups()
        assert g[p] == {f"dlsched_gpu_{gp}": 1.0}
        assert sum(g[h][f"dlsched_gpu_{g1}"] for h in (h1, h2)) <= 1.0
        for h in (h1, h2):
            out = s.get(f"/jobs/{h}/output", params={"rank": 0})["text"]
            assert f"CUDA_VISIBLE_DEVICES={g1} " in out, out[-500:]
        steps = {h: s.get(f"/jobs/{h}")["step"] for h in (h1, h2)}
        time.sleep(2.0)
        assert all(s.get(f"/jobs/{h}")["step"] > steps[h] for h in (h1, h2))     # both at once
        h3 = s.submit(half("h3"))
        time.sleep(2.5)
        j3 = s.get(f"/jobs/{h3}")
        assert j3["state"] == "queued" and not j3["allocation"], j3
        (sd / "h1.end").touch()
        s.wait_state(h1, "done", 60)
        s.wait(h3, lambda j: j["state"] == "running", 60, "h3 runs")
        assert s.get(f"/jobs/{h3}")["allocation"][0]["gpu_ids"] == [g1]
        for name in ("p", "h2", "h3"):
            (sd / f"{name}.end").touch()
        for jid in (p, h2, h3):
            s.wait_state(jid, "done", 60)
    finally:
        s.stop()
        shutil.rmtree(sd, ignore_errors=True)


def test_shares_mirror_the_ledger_and_the_cli_accepts_gandiva():
    """The amounts a rank books (no Ray needed), and both Gandiva profiles pass the CLI's check."""
    from dlsched.cli.runtime import check_policy
    from dlsched.core.types import NRES, Role, TaskSpec
    from dlsched.runtime.shares import bundle, gpu_slot_resources, has_gpu_slots, share
    assert [share(n) for n in (1, 2, 3, 4)] == [1.0, 0.5, 0.3333, 0.25]
    assert all(n * share(n) <= 1.0 for n in range(1, 200))
    d = [0.0] * NRES
    d[0], d[1] = 3.0, 1.5
    rank = TaskSpec(0, Role.WORKER, tuple(d))
    loads = [1, 2, 3, 1]
    # a 3-GPU rank sharing two of its GPUs: one amount per GPU, none above 1; Ray's GPU untouched
    assert bundle(rank, (0, 1, 2), loads, slots=True) == {
        "dlsched_gpu_0": 1.0, "dlsched_gpu_1": 0.5, "dlsched_gpu_2": 0.3333, "CPU": 1.5}
    assert bundle(rank, (0, 1, 2), loads, slots=False) == {"GPU": 3.0, "CPU": 1.5}
    assert has_gpu_slots(gpu_slot_resources(4), 4) and not has_gpu_slots(gpu_slot_resources(2), 4)
    check_policy("gandiva")
    check_policy("gandiva-reactive")
