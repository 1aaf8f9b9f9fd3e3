"""Chaos on the real runtime (benchmarks/chaos.py): 14 jobs submitted through the REST API to a
`dlsched server` on its own 3-node local Ray cluster while a seeded script kills, every 6-12 s,
the server (kill -9, restarted on the same store), a busy rank worker's process (kill -9) or a
whole node (added back a few seconds later). Every job must end done exactly once, with every
step recorded once and a continuous loss curve (the program's checkpointed counter is step + 1
at every step). `make soak` runs the same with 2,000 jobs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from chaos import run_chaos  # noqa: E402

SEED = 20261122
JOBS = 14


def test_chaos_every_job_done_once_with_continuous_curves():
    res = run_chaos(JOBS, 3, SEED, kill_every_s=(6.0, 12.0), steps=(12, 20), out=None,
                    warm_per_node=1, recovery_timeout_s=90.0, timeout_s=420.0)
    summary = json.dumps({k: v for k, v in res.items() if k != "kill_log"}, indent=1)
    assert res["violations"] == [], summary
    assert res["submitted"] == res["done"] == JOBS, summary
    # the chaos did happen: how many kills fit depends on how long the run lasts (alone the 14
    # jobs are done in about 40 s after 4 kills; under the suite's load about 60 s and 5-6; a
    # fresh-clone run once finished in 49 s after 3, every job done once, 5 of them hit).
    # Kills every 5-9 s instead made the run heavier for the test beside it on the other
    # worker (a restarted server's periodic rounds then stalled past 30 s; the cause was the
    # runtime's wake rule, fixed since: see docs/decisions/0022)
    assert res["kills"]["total"] >= 3 and res["jobs_hit"] >= 1, summary
    assert all(x["recovery_s"] is not None for x in res["kill_log"]), summary
