"""Gandiva's rounds touch only what changed: the placer's affinity view and grow's candidates are
kept between rounds and updated for the jobs observed to change (each compared here with the
same view built from scratch at every round), and periodic rounds with nothing to decide are
skipped (the event log is the one of a run with every round)."""
import numpy as np
import pytest

import dlsched.policies  # noqa: F401
from dlsched.cluster import cluster_from_dict
from dlsched.metrics import build_result
from dlsched.policies.actions import gandiva_grow, gandiva_place
from dlsched.scheduler.core import Scheduler, build_profile
from dlsched.sim.backend import SimBackend
from dlsched.workload.schema import job_from_row

MODELS = ("resnet50", "vgg16", "bert", "lstm", "vae", "superresolution", None)


def _cluster(nodes=6, gpus=4, gpu_type="V100"):
    return cluster_from_dict({"node_groups": [{"count": nodes, "gpus": gpus, "gpus_per_group": 2,
                                               "gpu_type": gpu_type, "gpu_mem_gb": 32, "cpus": 32,
                                               "mem_gb": 256}]})


def _jobs(seed, n=70, span_s=20_000.0, iterations=False):
    """Bursts and lulls (so rings form, then GPUs free up and jobs grow), mixed models, sizes and
    kinds of work."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = float(rng.uniform(0, span_s)) if i % 3 else float(rng.uniform(0, span_s / 10))
        model = MODELS[int(rng.integers(len(MODELS)))]
        row = dict(job_id=f"j{i:03d}", submit_time_s=round(t, 3), workers=int(rng.choice([1, 1, 2, 4])),
                   cpus_per_worker=2, mem_gb_per_worker=8)
        if model is not None:
            row["model"] = model
        if iterations and model is not None:
            row.update(iterations=float(rng.integers(2000, 20000)), batch_size=64 * row["workers"])
        else:
            row["duration_s"] = float(rng.uniform(300, 6000))
        out.append(job_from_row(row))
    return out


def _run(cl, jobs, policy="gandiva", params=None, quiet=True, seed=0):
    sched = Scheduler(build_profile(policy, {"params": params} if params else None), seed=seed)
    if not quiet:
        sched._can_be_quiet = False
    be = SimBackend(cl, jobs)
    sched.run(be)
    return build_result(sched, be, policy=policy, cluster_name=cl.name, workload_name="w"), sched


@pytest.fixture
def checked(monkeypatch):
    """Compare the kept views with views built from scratch at every round."""
    seen = {"views": 0, "cands": 0, "grown": 0}
    view = gandiva_place.GandivaPlace._view

    def checked_view(self, ctx):
        v = view(self, ctx)
        ref = gandiva_place._Affinity.build(ctx)
        aff = self._affinity
        assert aff.entries == ref.entries
        assert [c for c in aff.count] == [c for c in ref.count]
        assert (aff.n_jobs == ref.n_jobs).all()
        for size in set(aff.has) | set(ref.has):
            a = aff.has.get(size, np.zeros(len(aff.count), bool))
            b = ref.has.get(size, np.zeros(len(aff.count), bool))
            assert (a == b).all()
        seen["views"] += 1
        return v

    cands = gandiva_grow.GandivaGrow._candidates

    def checked_cands(self, ctx):
        got = cands(self, ctx)
        ref = {}
        for r in ctx.running:
            c = self._static(ctx, r)
            if c is not None:
                ref[r.job_id] = c
        assert set(got) == set(ref)
        for j, c in got.items():
            assert c[0] is ref[j][0] and c[1:] == ref[j][1:]
        seen["cands"] += 1
        seen["grown"] = max(seen["grown"], self.grows)
        return got

    monkeypatch.setattr(gandiva_place.GandivaPlace, "_view", checked_view)
    monkeypatch.setattr(gandiva_grow.GandivaGrow, "_candidates", checked_cands)
    return seen


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_views_equal_views_from_scratch(checked, seed):
    _run(_cluster(), _jobs(seed, iterations=True), params={"gandiva_grow": {"min_run_s": 120.0}})
    _run(_cluster(3), _jobs(seed + 10), policy="gandiva-reactive")
    assert checked["views"] > 50 and checked["cands"] > 50
    assert checked["grown"] > 0          # the workloads do grow jobs


@pytest.mark.parametrize("seed,params", [
    (0, None),
    (1, {"gandiva_pack": {"max_util": 2.0}}),            # packs tried, kept and undone
    (2, {"gandiva_grow": {"min_run_s": 120.0}}),
    (3, {"gandiva_migrate": {"min_run_s": 60.0}}),
])
def test_skipped_rounds_change_no_decision(seed, params):
    for iterations in (False, True):
        cl, jobs = _cluster(4), _jobs(seed, n=60, iterations=iterations)
        every, s1 = _run(cl, jobs, params=params, quiet=False, seed=seed)
        quiet, s2 = _run(cl, jobs, params=params, quiet=True, seed=seed)
        assert quiet.events == every.events and quiet.decisions == every.decisions
        assert s1.rounds_skipped == 0 and s2.rounds_skipped > 0
        assert any(d.kind == "suspend" for d in every.decisions)   # rings did rotate
