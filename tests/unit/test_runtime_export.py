"""`dlsched export` (GET /export, dlsched.runtime.whatif.history) from a real store: a finished
job's duration is the sum of its runs, the same at every export (issue "The runtime as a new
user found it", defect 1: the events were read newest first, the last run never closed, and
the duration grew with the wall clock)."""
from __future__ import annotations

from dlsched.runtime.store import Store
from dlsched.runtime.whatif import history


def _job(store: Store, runs: list[tuple[float, float]], state: str = "done") -> str:
    spec = {"name": "x", "entry": "m:f", "workers": 1, "batch_size": 8, "iterations": 10}
    jid = store.add_job(spec, runs[0][0] - 5.0)
    for k, (a, b) in enumerate(runs):
        store._x("INSERT INTO events (time, job_id, kind, detail) VALUES (?,?,?,?)",
                 (a, jid, "started", f"{jid}.{k + 1} on 0@n0"))
        store._x("INSERT INTO events (time, job_id, kind, detail) VALUES (?,?,?,?)",
                 (b, jid, "finished" if k == len(runs) - 1 else "stopped", ""))
    store.update_job(jid, state=state, step=10)
    return jid


def test_an_exported_duration_is_the_sum_of_the_runs_and_does_not_grow(tmp_path):
    store = Store(tmp_path / "s.db")
    _job(store, [(1000.0, 1009.4)])
    _job(store, [(1000.0, 1004.0), (1010.0, 1016.5)])
    first = history(store)["jobs"]
    assert [r["duration_s"] for r in first] == [9.4, 10.5]
    assert history(store)["jobs"] == first           # the same at every export
