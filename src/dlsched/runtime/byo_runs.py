"""The server's side of a command job (dlsched.runtime.byo): what each rank's start carries,
and the typed record of a stop by signal. Used by runs.py (RunsMixin)."""
from __future__ import annotations

DEFAULT_MAX_GRACE_S = 300.0        # the server's --max-grace-s


def command_fields(spec, placements, max_grace_s: float) -> dict[int, dict]:
    """rank -> the start payload's extra keys of a command job ({} for an SDK program):
    the command, the progress regex, the rank's place among the ranks of its node (LOCAL_RANK,
    LOCAL_WORLD_SIZE, as torchrun numbers them), the grace period (capped), the spec's own
    environment and interpreter. `launcher: torchrun`: the lowest rank of each node runs the
    node's torchrun (`torchrun`: nnodes, node_rank in the order of the nodes' lowest ranks, so
    rank 0's node is 0, nproc; `cuda_visible`: the GPU ids of all the node's ranks); the others
    are `torchrun_idle` (byo_launch.py)."""
    if not spec.command:
        return {}
    per_node: dict[int, list] = {}
    for tp in sorted(placements, key=lambda tp: tp.task):
        per_node.setdefault(tp.node, []).append(tp)
    torchrun = (spec.launcher or "env") == "torchrun"
    out = {}
    for k, (node, tps) in enumerate(per_node.items()):
        for i, tp in enumerate(tps):
            f = {"command": list(spec.command), "progress_regex": (spec.progress or {}).get("regex"),
                 "local_rank": i, "local_world_size": len(tps),
                 "grace_s": min(float(spec.grace_s or 0.0), max_grace_s),
                 "user_env": dict(spec.env or {}), "python": spec.python}
            if torchrun and i == 0:
                f["torchrun"] = {"nnodes": len(per_node), "node_rank": k, "nproc": len(tps)}
                f["cuda_visible"] = ",".join(str(g) for t in tps for g in t.gpu_ids)
            elif torchrun:
                f["torchrun_idle"] = True
            out[tp.task] = f
    return out


def lost_text(r: dict) -> str:
    """The work lost, as the `stop_signal` event says it (from ProcRun.lost_work)."""
    basis = r.get("lost_basis")
    if basis is None:
        return ""
    if basis == "no report":
        return f"; work lost: the run's {r['lost_s']:.1f} s (it reported no progress)"
    if basis == "saved":
        return (f"; work lost: {r['lost_steps']} steps ({r['lost_s']:.1f} s) reported after the last "
                f"step its snapshot holds (step {r['saved_step']})")
    return (f"; work lost: at least {r['lost_s']:.1f} s since its last report at step {r.get('step')} "
            f"({r['lost_steps']} whole steps; it does not say what it saved)")


def record_signal_stop(store, job_id: str, results: list[dict], grace_s: float) -> dict:
    """The `stop_signal` event of a command job stopped by SIGTERM: whether every rank's
    process ended within the grace period, how long the slowest took, and the work lost (rank
    0's estimate: it has the progress records). Returns {within, lost_steps, lost_s, detail}."""
    ranks = [(i, r) for i, r in enumerate(results) if not r.get("idle")]
    within = all(r.get("within_grace", True) for _, r in ranks)
    slow = max((float(r.get("stop_s") or 0.0) for _, r in ranks), default=0.0)
    late = [str(i) for i, r in ranks if not r.get("within_grace", True)]
    codes = ", ".join(f"rank {i}: {r.get('rc')}" for i, r in ranks)
    detail = (f"stopped within the grace period ({slow:.1f} s of {grace_s:g} s after SIGTERM; exit codes {codes})"
              if within else
              f"did not stop within the grace period of {grace_s:g} s: rank(s) {', '.join(late)} got SIGKILL "
              f"(exit codes {codes})")
    lead = results[0] if results else {}
    detail += lost_text(lead)
    store.event(job_id, "stop_signal", detail)
    return {"within": within, "lost_steps": lead.get("lost_steps"), "lost_s": lead.get("lost_s"), "detail": detail}


# the profiles that schedule on a job's measured progress (its step rate, from job_stats), and what
# they do with it; a command job that cannot report any is told at submit (no_progress_note)
MEASURED_BY = {
    "optimus": "sizes each job from its measured step rate",
    "pollux": "fits each job's goodput from its measured step times",
    "gandiva": "packs and grows jobs by their measured speed",
    "gandiva-reactive": "packs and grows jobs by their measured speed",
}


def no_progress_note(policy: str, spec) -> str | None:
    """What a command job with no progress regex is told at submit under a policy that needs
    progress (issue 37: "policies that need progress say so when they cannot have it"), or
    None. Its script may still call dlsched.report; until it does, it runs on its request."""
    why = MEASURED_BY.get(policy)
    if why is None or not getattr(spec, "command", None) or (spec.progress or {}).get("regex"):
        return None
    return (f"policy {policy} {why}; this job gives no progress.regex, so until its script calls "
            f"dlsched.report(step=...) it is scheduled on its request alone")
