"""The figures the runtime experiments compute from a run's store (seed001-figure9,
seed001-packing, benchmarks/bench_mechanisms.py), on a store written by hand: a ring of two jobs
time-slicing one GPU, a pack kept and a pack undone."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dlsched.core.types import TaskPlacement
from dlsched.experiments import seed001_figure9 as f9
from dlsched.runtime.store import Store
from dlsched.scheduler.eventlog import LogRecord

EPOCH = 1000.0


@pytest.fixture()
def store(tmp_path):
    st = Store(tmp_path / "s.db")
    yield st
    st.close()


def _job(st, name, t, **spec):
    jid = st.add_job({"name": name, "entry": "x.py", "workers": 1, "batch_size": 64, "iterations": 1000, **spec},
                     EPOCH + t)
    return jid


def _steps(st, jid, t0, t1, dt=f9.STEP_S):
    n = int(round((t1 - t0) / dt))
    have = len(st.stats(jid))
    st.add_stats(jid, [{"step": have + i, "time": EPOCH + t0 + i * dt, "step_s": dt} for i in range(n)])


def test_window_figures_time_slicing(store):
    # a runs alone from 0 to 10; b arrives at 10 (the last arrival: the window's start); they
    # take turns of 5 s until a finishes at 30
    gpu = (TaskPlacement(0, 0, (0,)),)
    a, b = _job(store, "a", 0.0), _job(store, "b", 10.0)
    _steps(store, a, 0, 10)
    _steps(store, b, 10.5, 15)
    _steps(store, a, 15.5, 20)
    _steps(store, b, 20.5, 25)
    _steps(store, a, 25.5, 30)
    store.update_job(a, state="done", finish_time=EPOCH + 30.0)
    store.log_record(LogRecord(0.0, "launch", a, "", placements=gpu))
    fig = f9.window_figures(store, EPOCH)
    assert fig["window_s"] == pytest.approx(20.0)
    ja, jb = fig["jobs"]["a"], fig["jobs"]["b"]
    assert jb["ttfp_s"] == pytest.approx(0.5) and ja["ttfp_s"] == pytest.approx(0.0)
    assert jb["max_stall_s"] == pytest.approx(5.8, abs=0.01)       # its last step at 14.7, the next at 20.5
    assert ja["share"] == pytest.approx(0.44) and jb["share"] == pytest.approx(0.44)    # 44 steps each in 20 s
    assert fig["aggregate"] == pytest.approx(ja["share"] + jb["share"])


def _pack_run(st, model, base, gpu_id, packed_rate):
    """holder h alone from base; j joins at base + 2 (a solo turn at base + 5), packed beside h
    at base + 10; after the window: undone (j suspended) when packed_rate < 0.5."""
    gpu = (TaskPlacement(0, 0, (gpu_id,)),)
    h, j = _job(st, f"{model}-h", base, model=model), _job(st, f"{model}-j", base + 2, model=model)
    st.log_record(LogRecord(base, "launch", h, "", placements=gpu))
    st.log_record(LogRecord(base + 5, "suspend", h, ""))
    st.log_record(LogRecord(base + 5, "launch", j, "", placements=gpu))
    st.log_record(LogRecord(base + 10, "resume", h, "", placements=gpu, packed=True))
    dt = f9.STEP_S / packed_rate
    _steps(st, h, base + 10.5, base + 10 + f9.PACK_WINDOW_S, dt)
    _steps(st, j, base + 10.5, base + 10 + f9.PACK_WINDOW_S, dt)
    if packed_rate < 0.5:
        st.log_record(LogRecord(base + 10 + f9.PACK_WINDOW_S, "suspend", j, ""))
    return h, j


def test_pack_figures_read_the_verdicts_from_the_schedule(store):
    _pack_run(store, "vae", 0.0, 0, 1.0)
    _pack_run(store, "lstm", 1.0, 1, 0.4)
    fig = f9.pack_figures(store, EPOCH)
    assert fig["vae"]["verdict"] == "kept" and fig["vae"]["solo_first"]
    assert fig["vae"]["aggregate"] == pytest.approx(2.0, abs=0.1)
    assert fig["lstm"]["verdict"] == "undone" and fig["lstm"]["aggregate"] == pytest.approx(0.8, abs=0.1)
    res = f9.compare_packing({"collected": fig, "result": _result(store)})
    assert res.ok, [(c.text, c.detail) for c in res.checks if not c.ok]
    fig["lstm"]["verdict"] = "kept"
    assert not f9.compare_packing({"collected": fig, "result": _result(store)}).ok


def _result(st):
    from dlsched.runtime.report import result_from_store
    return result_from_store(st, EPOCH, 4, policy="gandiva")


def test_mechanism_costs(store):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_mechanisms import costs_from_store
    _pack_run(store, "vae", 0.0, 0, 1.0)
    _steps(store, store.jobs()[1]["job_id"], 5.3, 5.5)       # j's first step in its turn: 0.3 s after
    store.log_record(LogRecord(40.0, "round", "", stats=(0.25, 3)))
    c = costs_from_store(store, EPOCH)
    assert c["time-slice switch"] == [pytest.approx(0.3)]
    assert c["pack"] == [pytest.approx(0.5)]
    assert c["Optimus refit"] == [pytest.approx(0.25)]
