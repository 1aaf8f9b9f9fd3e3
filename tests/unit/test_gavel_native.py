"""Gavel's policies in dlsched's own engine (actions/gavel_lease.py): leases per GPU type, the
`gavel_type` filter, and the CLI's choice between the two semantics."""
from dataclasses import replace

import pytest

import dlsched
from dlsched.core.errors import DlschedError
from dlsched.policies.actions.gavel_lease import GavelLease
from dlsched.scheduler.framework import REGISTRY
from dlsched.sim.gavel import GAVEL_POLICIES
from dlsched.workload.gavel_gen import gen_gavel


def test_every_unpacked_gavel_policy_is_a_profile_and_finishes_gavels_jobs():
    names = set(REGISTRY.names("profile"))
    unpacked = {n for n, g in GAVEL_POLICIES.items() if not g.packing}
    assert unpacked <= names and not {n for n, g in GAVEL_POLICIES.items() if g.packing} & names
    jobs = gen_gavel(0, rate=1, jobs=16)
    for p in sorted(unpacked):
        res = dlsched.simulate("gavel-2:2:2", jobs, p, throughputs="gavel")
        assert res.summary["finished"] == 16, p
        assert set(res.jobs.gpu_type_run) - {""} <= {"K80", "P100", "V100", "K80+P100", "K80+V100", "P100+V100",
                                                     "K80+P100+V100"}


def test_the_perf_policy_runs_a_job_on_its_fastest_type_and_finishes_sooner():
    # CycleGAN: 8.8x faster on a V100 than on a K80; Recommendation 2048: faster on a P100.
    # One of each on one GPU of each type: the _perf policy gives each its best type at once
    jobs = [j for j in gen_gavel(0, rate=1, jobs=200) if j.model in ("CycleGAN", "Recommendation (batch size 2048)")][:2]
    jobs = [replace(j, submit_time_s=0.0) for j in jobs]
    perf = dlsched.simulate("gavel-1:1:1", jobs, "gavel-max-min-fairness-perf", throughputs="gavel").jobs
    blind = dlsched.simulate("gavel-1:1:1", jobs, "gavel-max-min-fairness", throughputs="gavel").jobs
    got = dict(zip(perf.model, perf.gpu_type_run))
    assert got == {"CycleGAN": "V100", "Recommendation (batch size 2048)": "P100"}
    assert perf.jct_s.mean() < blind.jct_s.mean()


def test_a_type_agnostic_policy_keeps_a_running_job_on_its_type():
    # LAS, Themis and isolated give every job the same share of each type: with GPUs to spare a
    # job runs to its end where it started (type by type, each lease moved it: 44,626
    # suspensions for 300 jobs at 4 jobs/h); with too few GPUs they still time-slice
    jobs = gen_gavel(0, rate=2, jobs=20)
    for p in ("gavel-max-min-fairness", "gavel-finish-time-fairness", "gavel-isolated"):
        j = dlsched.simulate("gavel-12:12:12", jobs, p, throughputs="gavel").jobs
        assert (j.state == "done").all() and j.suspends.sum() == 0, p
        assert not j.gpu_type_run.str.contains("+", regex=False).any(), p
    busy = dlsched.simulate("gavel-2:2:2", gen_gavel(0, rate=4, jobs=30), "gavel-max-min-fairness", throughputs="gavel")
    assert busy.summary["finished"] == 30 and busy.jobs.suspends.sum() > 0


def test_a_job_the_table_does_not_know_runs_type_blind_and_one_too_big_for_any_type_is_rejected():
    # the demo workload's models are not Gavel's job types; its jobs of more than 2 GPUs fit the
    # cluster's 6 GPUs but no single type's 2: rejected at arrival, not left waiting forever
    res = dlsched.simulate("gavel-2:2:2", "sample", "gavel-max-min-fairness-perf")
    s, j = res.summary, res.jobs
    assert s["finished"] > 0 and s["finished"] + s["rejected"] == s["jobs"] and s["unfinished"] == 0
    assert (j[j.state == "rejected"].gpus > 2).all() and (j[j.state == "done"].gpus <= 2).all()


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="packing runs under --semantics gavel only"):
        GavelLease(policy="gandiva")
    with pytest.raises(ValueError, match="round_s"):
        GavelLease(round_s=0)


def test_the_cli_names_which_semantics_runs_what(tmp_path):
    from dlsched.cli.semantics import check_semantics
    assert check_semantics("native", "--policy", ["gavel-fifo-perf"]) is None
    with pytest.raises(DlschedError, match="only Gavel's round mechanism runs"):
        check_semantics("native", "--policy", ["gavel-max-min-fairness-packed"])
    with pytest.raises(DlschedError, match="must be one of native, gavel"):
        check_semantics("Gavel", "--policy", ["gavel-fifo"])
    assert check_semantics("gavel", "--policy", ["gavel-gandiva"]).name == "gavel"


def test_the_python_api_runs_either_semantics():
    jobs = gen_gavel(0, rate=0.5, jobs=60)
    r = dlsched.simulate("gavel-4:4:4", jobs, "gavel-max-min-fairness-perf", semantics="gavel", window=(10, 30))
    assert r.summary["semantics"] == "gavel" and r.summary["finished"] >= 20 and r.summary["window_mean_jct_s"] > 0
    n = dlsched.simulate("gavel-4:4:4", jobs, "gavel-max-min-fairness-perf", throughputs="gavel")
    assert "semantics" not in n.summary and n.summary["finished"] == 60
    with pytest.raises(DlschedError, match="semantics: must be native, gavel, tiresias or pollux"):
        dlsched.simulate("gavel-4:4:4", jobs, "gavel-fifo", semantics="Gavel")
