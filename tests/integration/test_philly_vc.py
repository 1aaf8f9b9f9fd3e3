"""The philly-vc experiment on the first jobs of the trace: per-VC rows from the runs' own
summaries, queueing where the replay without queues has none, and the quota / placement split."""
import math

from dlsched.experiments.philly_vc import _node_error, run


def test_philly_vc_on_the_first_jobs_shows_queueing_per_vc():
    res = run(limit=4000)
    by = {c.text: c for c in res.checks}
    assert by["without queues no job waits (today's replay)"].ok
    assert by["isolated VCs make jobs wait"].ok, by["isolated VCs make jobs wait"].detail
    groups = {r["group"] for r in res.rows}
    assert groups == {"no queues", *(f"{c} {n}" for c in ("isolated", "borrowing")
                                     for n in ("fifo", "tiresias", "fifo kueue-fair"))}
    iso = [r for r in res.rows if r["group"] == "isolated fifo"]
    assert sum(r["jobs"] for r in iso) == 4000
    assert any(r["mean_wait_s"] > 0 for r in iso)
    waited = [r for r in iso if r["mean_wait_s"] > 0]
    assert all(0.0 <= r["quota_delay_share"] <= 1.0 for r in waited)
    assert all(r["nominal_gpus"] > 0 for r in iso)
    s = res.results["isolated"]["fifo"][0].summary
    assert set(s["queues"]) >= {r["policy"] for r in iso}
    assert 0 < s["jain_index"] <= 1 and s["max_ftf_rho"] >= 1.0
    # busy nodes per minute against the recorded series, over the minutes both have (the
    # first jobs' long runs reach into October)
    got = _node_error(res.results["no queues"]["fifo"][0])
    assert got["minutes"] > 0 and got["mae"] >= 0 and got["recorded_mean"] > 0
    assert math.isnan(got["corr"]) or -1 <= got["corr"] <= 1
