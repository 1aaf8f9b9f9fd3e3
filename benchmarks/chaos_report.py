"""The end of the chaos run (benchmarks/chaos.py): the checks of every job against the store
(`_Report.check`, a mixin of the run object chaos._Chaos), the figures it returns and writes to
chaos.json (`_Report.figures`), and its block of benchmarks/RESULTS.md (`results_lines`).

A library of chaos.py, not a script (tests/integration/test_benchmarks_smoke.py: LIBRARIES)."""
from __future__ import annotations

import json
import os
import platform
import statistics
import time

from chaos_cluster import CHECKPOINT_EVERY, KINDS


def _summary(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0, "median": None, "max": None}
    return {"n": len(xs), "median": round(statistics.median(xs), 3), "max": round(max(xs), 3)}


def _fmt(s: dict) -> str:
    return "-" if not s["n"] else f"{s['median']:.2f} | {s['max']:.2f}"


def results_lines(res: dict, command: str) -> list[str]:
    k, r, up = res["kills"], res["recovery_s"], res["server_up_s"]
    lines = [
        "## Chaos (`benchmarks/chaos.py`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"Ray {__import__('ray').__version__}, with `{command}`: {res['jobs']} jobs "
        f"(tests/runtime/plugins/chaos_job.py, 1-2 ranks, {res['steps'][0]}-{res['steps'][1]} steps of "
        f"{res['step_s']:g} s, a checkpoint every {CHECKPOINT_EVERY} steps) submitted through the REST API to a "
        f"`dlsched server` (fifo) on a local Ray cluster of {res['nodes']} nodes x {res['gpus_per_node']} GPUs, "
        f"while a seeded script (seed {res['seed']}) killed something every "
        f"{res['kill_every_s'][0]:g}-{res['kill_every_s'][1]:g} s.",
        "",
        "| kill | count | recovery median (s) | recovery max (s) |",
        "| --- | --- | --- | --- |",
        f"| server (kill -9, restart) | {k['server']} | {_fmt(r['server'])} |",
        f"| rank worker (kill -9) | {k['worker']} | {_fmt(r['worker'])} |",
        f"| node (removed, added back after 2-5 s) | {k['node']} | {_fmt(r['node'])} |",
        "",
        f"Jobs done: {res['done']} of {res['jobs']} ({res['jobs_hit']} hit by a kill, "
        f"{res['attempts']['jobs_restarted']} restarted, {res['attempts']['total']} runs in all); "
        f"wall time {res['run_s']:.0f} s (+ {res['cluster_s']:.0f} s cluster start). Violations: "
        + ("none (every job done once, every step recorded once, continuous loss curves)." if not res["violations"]
           else f"{len(res['violations'])}: " + "; ".join(v[:200] for v in res["violations"][:5])),
        "",
        "Recovery: server: kill -> /health answers and every job running before the kill is running "
        "again under the new server (re-attached or started again) or done; worker: kill -> the broken "
        "job runs again (its next attempt); node: kill -> the jobs that had ranks on it run again."
        + (f" The server's restart alone (imports, Ray connect, recovery) took {up['median']:.2f} s median, "
           f"{up['max']:.2f} s max." if up["n"] else ""),
    ]
    return lines


class _Report:
    """The checks and figures at the end of a run (a mixin of chaos._Chaos)."""

    def check(self) -> None:
        s = self.server
        js = s.get("/jobs")
        by_name: dict[str, list[dict]] = {}
        for j in js:
            by_name.setdefault(j["name"], []).append(j)
        self.final = js
        for _, spec in self.plan:
            name = spec["name"]
            got = by_name.get(name, [])
            if name not in self.ids and not got:
                self.violation(f"{name}: never submitted (submitter stopped)")
                continue
            if len(got) != 1:
                self.violation(f"{name}: {len(got)} jobs in the store ({[g['job_id'] for g in got]})")
                if not got:
                    continue
            j = got[0]
            jid, n = j["job_id"], spec["iterations"]
            if self.ids.get(name) not in (None, jid):
                self.violation(f"{name}: submitted as {self.ids[name]}, the store has {jid}")
            if j["state"] != "done":
                self.violation(f"{jid} ({name}): state {j['state']} ({j['reason']})")
            st = s.get(f"/jobs/{jid}/stats", since=-1, limit=1_000_000)
            steps = [r["step"] for r in st]
            if steps != list(range(n)):
                missing = sorted(set(range(n)) - set(steps))
                extra = sorted(set(steps) - set(range(n)))
                self.violation(f"{jid}: stats cover {len(steps)} steps, not 0..{n - 1}: missing {missing[:20]}, "
                               f"extra {extra[:20]}")
            bad = [(r["step"], r.get("counter")) for r in st if r.get("counter") != r["step"] + 1]
            if bad:
                self.violation(f"{jid}: loss curve broken: (step, counter) {bad[:10]} ({len(bad)} steps)")
            split = [r["step"] for r in st if r.get("agree") != 1.0]
            if split:
                self.violation(f"{jid}: ranks disagreed on the counter at steps {split[:10]}")
            ev = s.get(f"/jobs/{jid}/events")
            fin = sum(1 for e in ev if e["kind"] == "finished")
            if fin != 1:
                self.violation(f"{jid}: 'finished' {fin} times in its events")
        unknown = [j["job_id"] for j in js if j["name"] not in {sp["name"] for _, sp in self.plan}]
        if unknown:
            self.violation(f"jobs nobody submitted: {unknown}")
        stray = self.cluster.stray_rank_workers(self.ray_tmpdir)
        if stray:
            self.violation(f"rank worker processes outside any live raylet at the end: {stray}")

    def figures(self, run_s: float, cluster_s: float, wall_s: float) -> dict:
        by_kind = {k: [x for x in self.kills if x["kind"] == k] for k in KINDS}
        done = sum(1 for j in self.final if j["state"] == "done")
        attempts = [j["attempts"] for j in self.final]
        res = {
            "jobs": self.n_jobs, "nodes": self.n_nodes, "gpus_per_node": self.gpus_per_node, "seed": self.seed,
            "kill_every_s": list(self.kill_every_s), "steps": list(self.steps), "step_s": self.step_s,
            "load": self.load, "submitted": len(self.ids), "done": done,
            "kills": {k: len(v) for k, v in by_kind.items()} | {"total": len(self.kills)},
            "recovery_s": {k: _summary([x["recovery_s"] for x in v if x["recovery_s"] is not None])
                           for k, v in by_kind.items()},
            "server_up_s": _summary([x["server_up_s"] for x in by_kind["server"]]),
            "node_up_s": _summary([x["node_up_s"] for x in by_kind["node"] if x["node_up_s"] is not None]),
            "jobs_hit": len({j for x in self.kills for j in x["affected"]}),
            "attempts": {"total": int(sum(attempts)), "max": int(max(attempts, default=0)),
                         "jobs_restarted": sum(1 for a in attempts if a > 1)},
            "submit_retries": self.submit_retries, "server_starts": self.server.starts,
            "forced_restarts": self.forced_restarts,
            "cluster_s": round(cluster_s, 1), "run_s": round(run_s, 1), "wall_s": round(wall_s, 1),
            "violations": list(self.violations), "kill_log": self.kills,
            "state_dir": str(self.state_dir) if (self.out is not None or self.violations) else None,
        }
        if self.out is not None:
            (self.out / "chaos.json").write_text(json.dumps(res, indent=1))
        return res
