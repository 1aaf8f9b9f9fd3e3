"""What `dlsched queues` and GET /queues/{q}/pending read: each queue's quota, use and
entitlement, and its waiting jobs in order with their places and the walk's reasons."""
from tenancy_harness import job, run, tree

from dlsched.tenancy.status import pending_jobs, queues_status


def test_queue_status_and_pending_positions():
    q = tree({"name": "org", "nominal": 0}, {"name": "a", "parent": "org", "nominal": 2, "borrowing_limit": 0},
             {"name": "b", "parent": "org", "nominal": 2})
    jobs = [job(f"a{i}", "a", 1, t=i) for i in range(4)] + [job(f"b{i}", "b", 1, t=10 + i) for i in range(4)]
    out = run(q, jobs, gpus=8, until=20)
    st = {x["name"]: x for x in queues_status(out.sched.tenancy, out.sched)["queues"]}
    assert st["a"]["usage"]["gpu"] == 2 and st["a"]["running"] == 2 and st["a"]["pending"] == 2
    assert st["b"]["usage"]["gpu"] == 2 and st["b"]["pending"] == 2      # b's cohort lends only a's idle: none
    assert st["org"]["running"] == 4 and st["org"]["leaf"] is False
    assert st["a"]["quotas"]["gpu"]["borrowing_limit"] == 0
    p = pending_jobs(out.sched.tenancy, out.sched, "a")
    assert [(i["job_id"], i["position_in_queue"]) for i in p["items"]] == [("a2", 1), ("a3", 2)]
    assert p["items"][0]["reason"].startswith("over quota: a uses 2 of 2 GPUs and asks 1 more")
    assert p["items"][1]["reason"].startswith("behind a2 in queue a")
    both = sorted(i["position_in_parent"] for x in ("a", "b") for i in pending_jobs(out.sched.tenancy, out.sched, x)["items"])
    assert both == [1, 2, 3, 4]
    assert pending_jobs(out.sched.tenancy, out.sched, "a", offset=1, limit=1)["items"][0]["job_id"] == "a3"
