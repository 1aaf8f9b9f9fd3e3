"""The kills of the chaos run (benchmarks/chaos.py) and the wait for each recovery: a mixin of its
run object (chaos._Chaos), whose state (the server, the cluster, the script and target streams,
the kill log, the violations) it reads and writes.

A library of chaos.py, not a script (tests/integration/test_benchmarks_smoke.py: LIBRARIES)."""
from __future__ import annotations

import os
import signal
import time

import httpx
from chaos_cluster import KINDS, ChaosCluster, stack_dump


class _Kills:
    """The kills (a mixin of chaos._Chaos): one at a time, each followed by its measured recovery."""

    def _wait(self, cond, what: str) -> float | None:
        """The monotonic time at which cond() held (polled), or None (a violation) after the
        recovery timeout."""
        t0 = time.monotonic()
        while True:
            try:
                if cond():
                    return time.monotonic()
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            if time.monotonic() - t0 > self.recovery_timeout_s:
                self.violation(f"no recovery in {self.recovery_timeout_s:g} s: {what}" + self._stuck())
                return None
            time.sleep(0.2)

    def _stuck(self) -> str:
        """After a recovery timeout: dump the server's stacks (kept in the state dir), then kill
        -9 and restart it so the run can go on (counted in `forced_restarts`)."""
        self.forced_restarts += 1
        p = self.state_dir / f"stuck-server-{self.forced_restarts}.txt"
        p.write_text(stack_dump(self.server.proc.pid))
        try:
            self.server.kill9()
            self.server.start()
        except Exception as e:               # noqa: BLE001 (reported, and the run stops)
            self.stop.set()
            return f"; server stacks in {p}; the server did not restart: {e}"
        return f"; server stacks in {p}; server restarted"

    def _job(self, job_id: str) -> dict:
        return self.server.get(f"/jobs/{job_id}")

    def kill_server(self, running: dict[str, dict]) -> dict:
        before = sorted(running)
        pid = self.server.proc.pid
        t0, t_kill = time.monotonic(), time.time()
        self.server.kill9()
        try:
            up_s = self.server.start()
        except RuntimeError as e:
            self.violation(f"server did not come back after kill -9: {e}")
            raise
        t_up = time.monotonic() - t0

        def ok():              # each job re-attached (or requeued and started again) by the new server
            for j in before:
                d = self._job(j)
                if d["state"] == "done":
                    continue
                if d["state"] != "running" or not any(
                        e["kind"] in ("reattached", "started") and e["time"] >= t_kill
                        for e in self.server.get(f"/jobs/{j}/events")):
                    return False
            return True
        t_ok = self._wait(ok, f"server kill: jobs {before} running again")
        return {"target": f"server pid {pid}", "affected": before,
                "server_up_s": round(t_up, 3), "server_start_s": round(up_s, 3),
                "recovery_s": None if t_ok is None else round(t_ok - t0, 3)}

    def _rerun(self, attempts: dict[str, int]):
        def ok():
            for j, a in attempts.items():
                d = self._job(j)
                if d["state"] == "done":
                    continue
                if d["state"] != "running" or d["attempts"] <= a:
                    return False
            return True
        return ok

    def kill_worker(self, running: dict[str, dict]) -> dict | None:
        workers = ChaosCluster.rank_workers(self.cluster)
        busy = []
        for j, d in sorted(running.items()):
            for a in d["allocation"]:
                pid = self._rank_pid(j, a["rank"], a["run_id"])
                if pid is not None and pid in workers:
                    busy.append((j, a["rank"], a["node"], pid, d["attempts"]))
        if not busy:
            return None
        j, rank, node, pid, attempts = busy[int(self.pick.integers(len(busy)))]
        t0 = time.monotonic()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        t_ok = self._wait(self._rerun({j: attempts}), f"worker kill: {j} running again")
        return {"target": f"{j} rank {rank} on {node} (pid {pid})", "affected": [j],
                "recovery_s": None if t_ok is None else round(t_ok - t0, 3)}

    def kill_node(self, running: dict[str, dict], readd_after: float = 3.0) -> dict:
        busy = sorted({a["node"] for d in running.values() for a in d["allocation"]} & set(self.cluster.nodes))
        names = busy or sorted(self.cluster.nodes)
        name = names[int(self.pick.integers(len(names)))]
        affected = {j: d["attempts"] for j, d in running.items() if any(a["node"] == name for a in d["allocation"])}
        old_id = self.cluster.nodes[name].node_id

        def node_back() -> bool:
            return any(n["name"] == name and n["up"] and n["ray_id"] != old_id for n in self.server.get("/nodes"))
        t0 = time.monotonic()
        args, survivors = self.cluster.kill_node(name)
        removed_s = time.monotonic() - t0
        if survivors:
            self.say(f"node kill {name}: rank worker processes {survivors} outlived the raylet by 1 s (killed)")
        time.sleep(max(0.0, readd_after - removed_s))
        self.cluster.add_node(args)
        back_s = time.monotonic() - t0
        if affected:
            cond, what = self._rerun(affected), f"node kill {name}: jobs {sorted(affected)} running again"
        else:
            cond, what = node_back, f"node kill {name}: node back in /nodes"
        t_ok = self._wait(cond, what)
        t_up = self._wait(node_back, f"node {name} back in /nodes")
        return {"target": f"node {name}", "affected": sorted(affected), "removed_s": round(removed_s, 3),
                "rank_survivors": len(survivors),
                "readded_s": round(back_s, 3),
                "node_up_s": None if t_up is None else round(t_up - t0, 3),
                "recovery_s": None if t_ok is None else round(t_ok - t0, 3)}

    def kill_once(self) -> None:
        if not self._kinds:                   # every kind once per three kills, in a random order
            self._kinds = [str(k) for k in self.script.permutation(KINDS)]
        kind = self._kinds.pop(0)
        readd_after = float(self.script.uniform(2.0, 5.0))     # drawn every time: the script stays fixed
        running = self.running()
        order = {"worker": ("worker", "node", "server"), "node": ("node",), "server": ("server",)}[kind]
        for k in order:
            t_wall = time.time()
            res = self.kill_node(running, readd_after) if k == "node" else getattr(self, f"kill_{k}")(running)
            if res is not None:
                res.update(kind=k, drawn=kind, time=t_wall, running_jobs=len(running))
                self.kills.append(res)
                self.say(f"kill {k}: {res['target']}, affected {res['affected']}, recovery {res['recovery_s']} s")
                return
