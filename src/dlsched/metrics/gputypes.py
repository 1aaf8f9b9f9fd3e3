"""The GPU types each job ran on (the jobs table's `gpu_type_run`, on a cluster of several types):
read from the event log's starts, so both backends' results have it."""
from __future__ import annotations

from dlsched.metrics.result import _STARTS


def types_run(log, cluster) -> dict[str, str]:
    """job -> the GPU types of the nodes its GPU tasks were placed on, over the whole run,
    '+'-joined in name order ("V100", "K80+P100")."""
    type_of = [n.gpu_type for n in cluster.nodes]
    seen: dict[str, set] = {}
    rows = log.rows(drop="round") if hasattr(log, "rows") else (
        (r[0], r[1], r[2], r.detail, r.placements, r.spec, r.stats) for r in log)
    for _, kind, job_id, _, placements, _, _ in rows:
        if kind in _STARTS and placements:
            s = seen.setdefault(job_id, set())
            for tp in placements:
                if tp.gpu_ids:
                    s.add(type_of[tp.node])
    return {j: "+".join(sorted(s)) for j, s in seen.items()}
