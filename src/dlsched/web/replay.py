"""`dlsched view OUT_DIR`: the web view of a simulated run, served from its output folder.

The folder is read once (summary.json, cluster.json, jobs.parquet, events.parquet and
log.parquet, the scheduler's decisions with their placements; `dlsched simulate` writes them all)
and answered under the live server's paths and shapes, so the same pages draw it:

    GET /nodes?t=T          the nodes with the tasks on each GPU at simulated time T
    GET /allocations?t=T    {job: [{rank, node, gpu_ids}]} at time T
    GET /jobs, /jobs/{id}   jobs.parquet's rows (and name = the job id)
    GET /jobs/{id}/events   the engine's events of the job (events.parquet)
    GET /jobs/{id}/stats    the job's speed over time: [{time, rate}] (the simulator's rate: work
                            units per second; a simulation has no loss or accuracy)
    GET /timeline           placement intervals, as the server's (dlsched.web.placements)

Secure by default, although the run is the user's own file: the server listens on 127.0.0.1
only, answers reads only, and needs a session like the live server's (dlsched.web.auth) from a
random token made for this process; the URL it prints logs in with that token (GET
/login?token=...), which dies with the process. Another user of the machine can reach a
loopback port, but cannot guess the token.
"""
import json
import math
import secrets
import socket
from pathlib import Path
from typing import Optional

from dlsched.core.errors import DlschedError
from dlsched.web import placements

FILES = ("summary.json", "cluster.json", "jobs.parquet", "events.parquet", "log.parquet")
HOST = "127.0.0.1"


class Run:
    """A simulated run's output folder, read into what the pages ask for."""

    def __init__(self, out_dir: str | Path):
        import pandas as pd
        out = Path(out_dir)
        _check_folder(out)
        self.summary = json.loads((out / "summary.json").read_text())
        self.nodes = json.loads((out / "cluster.json").read_text())["nodes"]
        jobs = pd.read_parquet(out / "jobs.parquet")
        self.jobs = {r["job_id"]: _job(r) for r in _records(jobs)}
        log = pd.read_parquet(out / "log.parquet")
        self.intervals = placements.intervals(_records(log), [n["name"] for n in self.nodes])
        ev = pd.read_parquet(out / "events.parquet")
        self.events: dict[str, list[dict]] = {}
        for r in _records(ev):
            self.events.setdefault(r["job_id"], []).append(
                {"time": r["time_s"], "job_id": r["job_id"], "kind": r["kind"], "detail": r["detail"]})
        self.node_changes = [(e["time"], int(e["detail"]), e["kind"] == "node_up")
                             for e in self.events.get("", []) if str(e["detail"]).isdigit()]
        times = [j["submit_s"] for j in self.jobs.values()]
        times += [j["finish_s"] for j in self.jobs.values() if j["finish_s"] is not None]
        times += [iv["end"] for iv in self.intervals if iv["end"] is not None]
        self.t_min, self.t_max = (min(times), max(times)) if times else (0.0, 0.0)

    def config(self) -> dict:
        s = self.summary
        return {"mode": "replay", "title": f"{s.get('policy')} on {s.get('cluster')} / {s.get('workload')}",
                "t_min": self.t_min, "t_max": self.t_max, "now": self.t_max}

    def nodes_at(self, t: float) -> list[dict]:
        load = placements.gpu_load(placements.at(self.intervals, t), [(n["name"], n["gpus"]) for n in self.nodes])
        up = [True] * len(self.nodes)
        for when, i, is_up in self.node_changes:
            if when <= t and 0 <= i < len(up):
                up[i] = is_up
        return [{**n, "gpu_load": load[n["name"]], "free_gpus": float(load[n["name"]].count(0)),
                 "up": up[i], "schedulable": up[i]} for i, n in enumerate(self.nodes)]

    def stats(self, job_id: str) -> list[dict]:
        return [{"time": e["time"], "rate": float(e["detail"])} for e in self.events.get(job_id, [])
                if e["kind"] == "rate"]

    def timeline(self, since, until, job_id, limit) -> dict:
        keep, cut = placements.select(self.intervals, since, until, job_id, limit)
        return {"now": self.t_max, "intervals": keep, "truncated": cut,
                "nodes": [{"name": n["name"], "rack": n["rack"], "gpus": n["gpus"]} for n in self.nodes]}


def _check_folder(out: Path) -> None:
    if not out.is_dir():
        raise DlschedError(f"{out}: not a folder (give the --out folder of `dlsched simulate`)")
    missing = [f for f in FILES if not (out / f).is_file()]
    if not missing:
        return
    runs = sorted(p.name for p in out.iterdir() if (p / "jobs.parquet").is_file())
    if runs:
        raise DlschedError(f"{out}: holds the runs of a comparison; view one of them: dlsched view {out / runs[0]}")
    raise DlschedError(f"{out}: no {', '.join(missing)} (an output folder of `dlsched simulate`, "
                       "of this version: run it again to view it)")


def _records(df) -> list[dict]:
    """Rows as dicts of plain Python values, NaN as None."""
    return [{k: _plain(v) for k, v in r.items()} for r in df.to_dict(orient="records")]


def _plain(v):
    if hasattr(v, "item"):
        v = v.item()
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _job(r: dict) -> dict:
    return {**r, "name": r["job_id"]}


def make_view_app(run: Run, sessions):
    from fastapi import APIRouter, Depends, FastAPI, HTTPException

    from dlsched.web.routes import install_web, require
    app = FastAPI(title="dlsched view", docs_url=None, redoc_url=None, openapi_url=None)
    install_web(app, sessions, run.config, link_login=True)
    api = APIRouter(dependencies=[Depends(require(sessions))])

    def job_or_404(job_id: str) -> dict:
        if job_id not in run.jobs:
            raise HTTPException(404, f"unknown job {job_id}")
        return run.jobs[job_id]

    @api.get("/nodes")
    def nodes(t: Optional[float] = None):
        return run.nodes_at(run.t_max if t is None else t)

    @api.get("/allocations")
    def allocations(t: Optional[float] = None):
        return placements.allocations(placements.at(run.intervals, run.t_max if t is None else t))

    @api.get("/jobs")
    def jobs():
        return list(run.jobs.values())

    @api.get("/jobs/{job_id}")
    def job(job_id: str):
        return job_or_404(job_id)

    @api.get("/jobs/{job_id}/events")
    def events(job_id: str):
        job_or_404(job_id)
        return [e for e in run.events.get(job_id, []) if e["kind"] != "rate"]

    @api.get("/jobs/{job_id}/stats")
    def stats(job_id: str):
        job_or_404(job_id)
        return run.stats(job_id)

    @api.get("/timeline")
    def timeline(since: Optional[float] = None, until: Optional[float] = None, job_id: Optional[str] = None,
                 limit: int = 20000):
        return run.timeline(since, until, job_id, limit)

    app.include_router(api)
    return app


def bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as e:
        sock.close()
        raise DlschedError(f"--port {port}: cannot listen on {HOST}:{port}: {e.strerror}") from None
    sock.listen(64)
    return sock


def serve(out_dir: str | Path, port: int) -> None:
    """Read the run, listen on 127.0.0.1:port (0: any free port), print the login URL, serve
    until interrupted."""
    import uvicorn

    from dlsched.web.auth import Sessions
    run = Run(out_dir)
    sock = bind(port)
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(32)
    app = make_view_app(run, Sessions(token, port))
    print(f"dlsched view: {run.config()['title']}, {len(run.jobs)} jobs\n"
          f"open http://{HOST}:{port}/login?token={token}  (Ctrl-C stops)", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])
