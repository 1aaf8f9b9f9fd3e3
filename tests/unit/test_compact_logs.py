"""The logs kept in columns read back what was appended: CompactLog (the scheduler's typed log),
EngineLog (SimBackend's), Timeline (the utilisation samples), and DoneRun (a finished job's
JobRun, cut down). A simulation's result is the same, record for record, as with plain lists."""
import math
import pickle
from collections.abc import Mapping

import pytest

import dlsched
import dlsched.policies  # noqa: F401  (the profiles build_profile names: also when run alone)
from dlsched.core.types import TaskPlacement
from dlsched.scheduler.eventlog import CompactLog, LogRecord, Timeline
from dlsched.sim.engine import EngineLog
from dlsched.workload.io import load_workload


def _records():
    spec = load_workload("sample")[0]
    tp = (TaskPlacement(0, 3, (0, 1)), TaskPlacement(1, 4, (2,)))
    return [
        LogRecord(0.0, "arrival", "a", spec=spec),
        LogRecord(1.5, "launch", "a", "0@3;1@4", tp, None, False),
        LogRecord(1.5, "launch", "b", "0@3", tp[:1], None, True),
        LogRecord(2.0, "round", "", stats=(0.001, 7)),
        LogRecord(2.5, "suspend", "a", cost=("some", "cost")),
        LogRecord(3, "finish", "a", ""),                       # an int time stays an int
        LogRecord(4.0, "stopped", "b", "node 3 down"),
        LogRecord(5.0, "NodeDown", "", "3"),
        LogRecord(6.0, "stats", "a", stats={"step": None, "rate": 0.0, "gpu_s": 12.5, "x": float("nan")}),
        LogRecord(6.0, "stats", "b", stats={"step": 3, "rate": 1.0, "gpu_s": 1.0, "x": 2.0}),
        LogRecord(6.0, "stats", "c", stats={}),
        LogRecord(7.0, "task_finish", "c", "1"),
        LogRecord(8.0, "held", "c", "", spec=spec, stats={"odd": 1}),
        LogRecord(9.0, "round", "", stats=None),
        LogRecord(-math.inf, "weird", "z", "d", (), None, False, None, [1, 2]),
    ]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert type(x) is type(y)
        assert len(x) == len(y)
        for u, v in zip(x, y):
            assert type(u) is type(v)
            assert u is v or u == v or (isinstance(u, dict) and repr(u) == repr(v))


def test_compact_log_reads_back_the_records():
    recs = _records()
    log = CompactLog()
    for r in recs:
        log.append(r)
    _same(list(log), recs)
    _same([log[i] for i in range(len(log))], recs)
    _same(log[2:9:3], recs[2:9:3])
    _same([log[-1]], recs[-1:])
    assert log == recs and not (log != recs) and log == CompactLog(recs)
    assert log != recs[:-1]
    assert [tuple(r) for r in log] == [tuple(r) for r in recs]
    assert log.kinds() == [r.kind for r in recs]
    with pytest.raises(IndexError):
        log[len(recs)]
    # a stats record's dict comes back in the same key order, a new dict each time
    s = log[8].stats
    assert list(s) == ["step", "rate", "gpu_s", "x"] and s is not log[8].stats
    _same(list(pickle.loads(pickle.dumps(log))), recs)


def test_compact_log_joined_and_without_a_kind():
    recs = _records()
    a, b = CompactLog(recs[:6]), CompactLog(recs[6:])
    _same(list(a.joined(b)), recs)
    _same(list(a.joined(b, drop="round")), [r for r in recs if r.kind != "round"])
    _same(list(CompactLog(recs).joined(drop="stats")), [r for r in recs if r.kind != "stats"])


def test_engine_log_reads_back_tuples():
    recs = [(0.0, "arrival", "a", ""), (1.0, "take", "a", "0@1;1@2"), (2, "rate", "a", "0.5"),
            (3.0, "node_down", "", "4"), (4.5, "finish", "a", "")]
    log = EngineLog(recs)
    _same(list(log), recs)
    _same(log[1:4], recs[1:4])
    assert log[-1] == recs[-1] and log == recs and log == EngineLog(recs) and log != recs[:2]
    _same(list(pickle.loads(pickle.dumps(log))), recs)
    log2 = EngineLog(r for r in recs if type(r[0]) is float)
    assert list(log2) == [r for r in recs if type(r[0]) is float]
    # its columns (Result.save's events.parquet) hold what iteration reads, an int time and a
    # take's placements (kept as the tuple, read as "task@node;...") included
    log2.append_take(5.0, "b", (TaskPlacement(0, 3, (0,)), TaskPlacement(1, 4, (1,))))
    for lg in (log, log2, EngineLog()):
        cols = lg.columns()
        assert list(cols) == ["time_s", "kind", "job_id", "detail"]
        _same(list(zip(*cols.values())), list(lg))
    assert log2.columns()["detail"][-1] == "0@3;1@4"


def test_timeline_columns():
    tl = Timeline()
    samples = [(0.0, 1.0, 0.5, 0.0, 1, 3), (1.0, 2.0, 2.0, 0.25, 2, 2)]
    for s in samples:
        tl.append(s)
    assert list(tl) == samples and tl[-1] == samples[-1] and len(tl) == 2 and tl == samples
    tl[-1] = (1.0, 3.0, 3.0, 0.0, 3, 1)
    assert tl[1] == (1.0, 3.0, 3.0, 0.0, 3, 1) and tl[0] == samples[0]
    cols = tl.columns()
    assert cols["queued_jobs"].tolist() == [3, 1] and cols["effective_gpus"].tolist() == [0.5, 3.0]
    assert list(pickle.loads(pickle.dumps(tl))) == list(tl)


def test_simulation_same_with_plain_lists(monkeypatch):
    """The whole result with compact logs equals the one with plain lists (the logs as they
    were), and finished jobs cut down (a row of stats, or a DoneRun) give the same job_stats."""
    import dlsched.scheduler.core as core
    import dlsched.sim.backend as backend
    import dlsched.sim.run as run
    a = dlsched.simulate("seed002", "sample", "tiresias")
    monkeypatch.setattr(core, "CompactLog", list)
    monkeypatch.setattr(core, "Timeline", list)
    monkeypatch.setattr(backend, "EngineLog", list)
    monkeypatch.setattr(backend, "DoneRun", lambda r: r)
    monkeypatch.setattr(backend.SimBackend, "compact_done", False)
    b = dlsched.simulate("seed002", "sample", "tiresias")
    assert isinstance(b.events, list) and not isinstance(a.events, list)
    assert a.events == b.events and a.decisions == b.decisions
    assert list(a.events) == b.events and list(a.decisions) == b.decisions
    assert a.jobs.equals(b.jobs) and a.timeline.equals(b.timeline) and a.summary.keys() == b.summary.keys()
    assert {k: v for k, v in a.summary.items() if not k.startswith("sched_")} == \
        {k: v for k, v in b.summary.items() if not k.startswith("sched_")}
    del run


def test_compact_log_rows_of_kind_and_of_stats_match_the_records():
    """The column readers the metrics use (rows, of_kind) give each record's fields as the
    records do; of_stats builds the log that appending the stats records builds."""
    recs = _records()
    log = CompactLog(recs)
    rows = list(log.rows())
    assert len(rows) == len(recs)
    for row, r in zip(rows, recs):
        want = (r.time_s, r.kind, r.job_id, r.detail, r.placements, r.spec, r.stats)
        assert len(row) == 7
        for u, v in zip(row, want):
            if type(v) is dict:          # a stats dict comes as a read-only mapping equal to it
                assert isinstance(u, Mapping) and repr(dict(u)) == repr(v) and list(u) == list(v)
                assert all(u.get(k) is v.get(k) or repr(u.get(k)) == repr(v.get(k)) for k in v)
                assert u.get("absent", 7) == 7 and len(u) == len(v)
                continue
            assert type(u) is type(v) and (u is v or u == v or repr(u) == repr(v))
    assert [r[1] for r in log.rows(drop="round")] == [r.kind for r in recs if r.kind != "round"]
    _same(log.of_kind("round"), [r for r in recs if r.kind == "round"])
    _same(log.of_kind("stats"), [r for r in recs if r.kind == "stats"])
    assert log.of_kind("never") == []
    items = [("a", {"step": None, "rate": 0.5}), ("b", {"step": 2, "rate": 1.0}), ("c", {}), ("d", None),
             ("e", {1: "not a str key"}), ("f", (0.1, 2))]
    for now in (12.5, 12):                       # an int time is kept as it came
        built = CompactLog.of_stats(now, iter(items))
        appended = CompactLog(LogRecord(now, "stats", j, stats=st) for j, st in items)
        _same(list(built), list(appended))
        _same(list(built.joined(log, drop="round")), list(appended.joined(log, drop="round")))


def test_rounds_columns_read_back_and_slice():
    from dlsched.scheduler.eventlog import Rounds
    rows = [(0.0, 0.001, 3), (60.0, 0.5, 0), (61.5, 1e-6, 12)]
    r = Rounds(rows)
    assert len(r) == 3 and list(r) == rows and r == rows and r[-1] == rows[-1]
    assert r[1:] == rows[1:] and r[5:] == [] and r[-1000:] == rows
    assert all(type(x[2]) is int and type(x[1]) is float for x in r)
    assert list(pickle.loads(pickle.dumps(r))) == rows
    with pytest.raises(IndexError):
        r[3]
    assert r.pop() == rows[-1] and list(r) == rows[:-1]
    r.pop(), r.pop()
    with pytest.raises(IndexError):
        r.pop()


def test_build_result_releasing_the_run_gives_the_same_result():
    """simulate() lets the run's per-job state go while the result is built (release=True): the
    same tables, summary and decisions as a result built with everything kept."""
    from dlsched.cluster.topology import load_cluster
    from dlsched.metrics.result import build_result
    from dlsched.scheduler.core import Scheduler, build_profile
    from dlsched.sim.backend import SimBackend

    jobs = load_workload("sample")
    out = []
    for release in (False, True):
        b = SimBackend(load_cluster("seed002"), jobs)
        s = Scheduler(build_profile("tiresias", {}))
        s.run(b)
        out.append(build_result(s, b, policy="tiresias", cluster_name="c", workload_name="w", release=release))
        assert (len(s.jobs) == 0) == release and (len(s.log) == 0) == release
    a, r = out
    assert a.jobs.equals(r.jobs) and a.timeline.equals(r.timeline)
    assert {k: v for k, v in a.summary.items() if not k.startswith("sched_")} == \
        {k: v for k, v in r.summary.items() if not k.startswith("sched_")}
    assert list(a.decisions) == list(r.decisions) and list(a.events) == list(r.events)
    assert list(a.rounds.queued_jobs) == list(r.rounds.queued_jobs)


def test_bag_of_tasks_records_do_not_share_their_finished_tasks():
    """A record's finished tasks start as one shared empty frozenset; the first task that ends
    gives the record a set of its own (no other record sees it)."""
    from dlsched.cluster.topology import load_cluster
    from dlsched.scheduler.core import Scheduler, build_profile
    from dlsched.sim.backend import SimBackend
    from dlsched.workload.schema import job_from_row

    rows = [{"job_id": f"t{i}", "submit_time_s": float(i), "kind": "tasks", "workers": 3, "gpus_per_worker": 1.0,
             "duration_s": 10.0 + i} for i in range(3)]
    jobs = [job_from_row(r) for r in rows]
    # equal task lists are one tuple (job_from_row shares them), different ones are not
    same = [job_from_row({**rows[0], "job_id": f"s{i}"}) for i in range(2)]
    assert same[0].tasks is same[1].tasks and jobs[0].tasks is not jobs[1].tasks
    b = SimBackend(load_cluster("seed002"), jobs)
    s = Scheduler(build_profile("fifo", {}))
    s.run(b)
    recs = list(s.jobs.values())
    assert all(r.done_tasks == {0, 1, 2} for r in recs)
    assert len({id(r.done_tasks) for r in recs}) == len(recs)


@pytest.mark.parametrize("policy", ["tiresias", "srtf", "fifo-backfill"])
def test_finished_records_keep_no_caches(policy):
    """A finished job's record keeps none of the caches a waiting or running one fills (its
    need, the GPUs it holds, its order key): at 1M jobs each was 60-100 MB of the peak
    (benchmarks/bench_scale.py --million). held_gpus is read as the job finishes, so its cache
    must go after that read."""
    from dlsched.cluster.topology import load_cluster
    from dlsched.scheduler.context import JobState
    from dlsched.scheduler.core import Scheduler, build_profile
    from dlsched.sim.backend import SimBackend

    b = SimBackend(load_cluster("seed002"), load_workload("sample"))
    s = Scheduler(build_profile(policy, {}))
    s.run(b)
    done = [r for r in s.jobs.values() if r.state is JobState.DONE]
    assert done and len(done) == len(s.jobs)
    assert [r.job_id for r in done if r._held is not None or r._need is not None or r.key != ()] == []
    assert all(r.held_gpus() == 0.0 and r._held is None for r in done)


def test_stats_block_reads_back_values_of_the_same_type():
    """of_stats keeps the dicts with the first one's keys in typed columns: every value reads
    back equal and of the same type, whatever mix a column turns out to hold."""
    big = 2 ** 70
    dicts = [{"f": 1.5, "i": 3, "n": None, "m": 0.0, "b": True},
             {"f": float("nan"), "i": -7, "n": 2.5, "m": 4, "b": False},
             {"f": -0.0, "i": big, "n": None, "m": float("inf"), "b": True},
             {"f": 1e300, "i": 0, "n": "x", "m": 1.0, "b": False}]
    items = [(f"j{k}", d) for k, d in enumerate(dicts)] + [("other", {"f": 1.0})]
    log = CompactLog.of_stats(3.0, iter(items))
    appended = CompactLog(LogRecord(3.0, "stats", j, stats=st) for j, st in items)
    _same(list(log), list(appended))
    for row, (_, d) in zip(log.rows(), items):
        st = row[6]
        assert list(st) == list(d) and len(st) == len(d)
        for k, v in d.items():
            assert type(st[k]) is type(v) and repr(st[k]) == repr(v) and repr(st.get(k)) == repr(v)
        assert st.get("absent") is None
        with pytest.raises(KeyError):
            st["absent"]
    _same(list(pickle.loads(pickle.dumps(log))), list(appended))


def test_of_stats_keeps_a_row_of_another_block():
    """A StatsRow handed to of_stats (the simulator's finished jobs' rows, final_stats) is kept
    as it is: the record reads as the dict it was made from, beside rows of of_stats' own block."""
    from dlsched.scheduler.eventlog import StatsBlock
    done = StatsBlock(("gpu_s", "suspends"))
    done.add({"gpu_s": 1.5, "suspends": 0})
    row = done.add({"gpu_s": 2.5, "suspends": 3})
    log = CompactLog.of_stats(10.0, [("a", row), ("b", {"gpu_s": 0.0, "suspends": 1}), ("c", None)])
    recs = list(log)
    assert [r.job_id for r in recs] == ["a", "b", "c"] and all(r.kind == "stats" for r in recs)
    assert recs[0].stats == {"gpu_s": 2.5, "suspends": 3} and type(recs[0].stats["suspends"]) is int
    assert recs[1].stats == {"gpu_s": 0.0, "suspends": 1} and recs[2].stats is None


def test_bulk_appends_read_back_what_appends_of_the_same_records_read():
    """extend_shaped / extend_coded / extend_columns (the compiled FIFO run's writers) keep
    what append keeps: the logs read back equal, kinds new and already seen alike."""
    import numpy as np
    from dlsched.scheduler.eventlog import Rounds
    spec = load_workload("sample")[0]
    tp = (TaskPlacement(0, 3, (0, 1)),)
    recs = [(0.0, "arrival", "a", "", (), None, False, spec, None), (0.0, "rejected", "b", "too big"),
            (1.0, "round", "", "", (), None, False, None, (0.5, 3)), (1.0, "launch", "a", "0@3", tp, None, False),
            (2.0, "finish", "a", "")]
    one, bulk = CompactLog(), CompactLog()
    for log in (one, bulk):
        log.append((0.0, "finish", "z", ""))                   # a kind it has already
    for r in recs:
        one.append(r)
    kinds = ["finish", "arrival", "rejected", "round", "launch"]
    bulk.extend_shaped(np.array([r[0] for r in recs]), np.array([1, 2, 3, 4, 0], np.uint8), kinds,
                       ["plain", "spec", "detail", "stats", "placed"], [r[2] for r in recs],
                       [spec, "too big", (0.5, 3), tp, None])
    assert list(bulk) == list(one) and bulk == one
    e1, e2 = EngineLog(), EngineLog()
    e1.append((0.0, "arrival", "a", ""))
    e1.append_take(1.0, "a", tp)
    e1.append((1.0, "rate", "a", "1"))
    e2.extend_coded(np.array([0.0, 1.0, 1.0]), np.array([1, 2, 0]), ["rate", "arrival", "take"], ["a"] * 3,
                    ["", tp, "1"])
    assert list(e2) == list(e1)
    t1, t2 = Timeline(), Timeline()
    samples = [(0.0, 2.0, 1.0, 0.0, 1, 3), (5.0, 4.0, 4.0, 1.0, 2, 0)]
    for x in samples:
        t1.append(x)
    t2.extend_columns(np.array([x[:4] for x in samples]), np.array([x[4:] for x in samples]))
    assert list(t2) == list(t1) == samples
    r1, r2 = Rounds(), Rounds()
    for x in [(0.0, 0.25, 3), (5.0, 0.25, 0)]:
        r1.append(x)
    r2.extend_columns(np.array([0.0, 5.0]), np.array([0.25, 0.25]), np.array([3, 0]))
    assert list(r2) == list(r1)


def test_decisions_frame_from_columns_is_the_frame_from_records():
    """log.parquet's table read from a CompactLog's columns (placement_columns) is the one read
    from its records: every shape of record (placed and packed, a cost, a detail, an int time,
    stats left out), a gandiva run's packs and migrations, and an empty log."""
    import pandas as pd

    from dlsched.metrics.result import decisions_frame
    recs = _records()
    log = CompactLog(recs)
    a, b = decisions_frame(log), decisions_frame(list(log))
    pd.testing.assert_frame_equal(a, b)
    assert len(a) == sum(r.kind != "stats" for r in recs) and a["packed"].tolist().count(True) == 1
    assert a.loc[a.kind == "launch", "placements"].tolist() == ["[[0, 3, [0, 1]], [1, 4, [2]]]", "[[0, 3, [0, 1]]]"]
    res = dlsched.simulate("seed002", load_workload("sample"), "gandiva", seed=0)
    assert getattr(res.decisions, "compact", False)
    run = decisions_frame(res.decisions)
    pd.testing.assert_frame_equal(run, decisions_frame(list(res.decisions)))
    assert {"launch", "finish"} <= set(run.kind)
    pd.testing.assert_frame_equal(decisions_frame(CompactLog()), decisions_frame([]))


def test_round_records_kept_in_columns_read_back_as_appended():
    """Round records whose stats are (a float, an int) are kept in the round columns (no tuple
    each); every reading gives back what was appended, joined and dropped included, and the
    others (another stats tuple) as before."""
    recs = [LogRecord(0.0, "arrival", "a"), LogRecord(1.0, "round", "", stats=(0.5, 3)),
            LogRecord(1.0, "launch", "a", detail="x"), LogRecord(2.0, "round", "", stats=(0.25, 700)),
            LogRecord(2.0, "round", "", stats=(1, 2)), LogRecord(3.0, "finish", "a"),
            LogRecord(4.0, "round", "", stats=(0.1, 2**70))]
    log = CompactLog(recs)
    assert len(log._ri) == 2                                   # the two (float, int) rounds
    assert list(log) == recs and [type(x) for x in log[3].stats] == [float, int]
    assert list(pickle.loads(pickle.dumps(log))) == recs
    assert log.of_kind("round") == [r for r in recs if r.kind == "round"]
    for drop in (None, "round", "arrival"):
        want = [r for r in recs + recs if r.kind != drop]
        assert list(log.joined(log, drop=drop)) == want
        assert [r[6] for r in log.rows(drop=drop)] == [r.stats for r in recs if r.kind != drop]
    t, wall, queued = CompactLog(recs[:6]).round_columns()
    assert t.tolist() == [1.0, 2.0, 2.0] and wall.tolist() == [0.5, 0.25, 1.0] and queued.tolist() == [3, 700, 2]
    joined = CompactLog(recs[:4]).joined(CompactLog(recs[:4]), drop="arrival")
    assert [x.tolist() for x in joined.round_columns()] == [[1.0, 2.0] * 2, [0.5, 0.25] * 2, [3, 700] * 2]
