"""`dlsched server`: the scheduler core driving a RayBackend, with a REST API and a SQLite store.

API (OpenAPI schema at /openapi.json, docs at /docs). Requests that change state need
`Authorization: Bearer <token>` (the token file in the state dir, readable by its owner only);
reads do not.

    GET  /health                      liveness (no auth)
    GET  /jobs                        every job with its state and progress
    POST /jobs                        submit a job spec (JSON of the YAML fields)      -> 201
    GET  /jobs/{id}                   job, allocation (rank -> node, GPUs), checkpoints
    GET  /jobs/{id}/stats?since=N     per-step loss, accuracy, step time, epoch
    GET  /jobs/{id}/events            the job's event log
    POST /jobs/{id}/cancel|suspend|resume
    POST /jobs/{id}/migrate           {"nodes": ["n2", "n3"], "workers": 4}  (both optional)
    GET  /nodes                       nodes from Ray: name, rack, GPU type, GPUs, free, up
    GET  /metrics/scheduler           round count, event->decision latencies
"""


import hmac
import json
import logging
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Optional

from dlsched.core.errors import DlschedError

log = logging.getLogger("dlsched.runtime")


def default_state_dir() -> Path:
    return Path(os.environ.get("DLSCHED_STATE_DIR") or Path.home() / ".dlsched")


def ensure_token(state_dir: Path) -> str:
    """The API token: created once (owner-only file), read afterwards."""
    p = Path(state_dir) / "token"
    state_dir.mkdir(parents=True, exist_ok=True)
    if not p.exists():
        tok = secrets.token_urlsafe(32)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(tok)
    os.chmod(p, 0o600)
    return p.read_text().strip()


def ray_env(embedded: bool) -> None:
    """Settings every Ray process here needs (see the notes): no usage stats; token auth off on
    one machine unless the user chose a mode (a real cluster sets RAY_AUTH_MODE itself)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if embedded:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def make_app(server: "Server"):
    from fastapi import Depends, FastAPI, HTTPException, Request
    from pydantic import BaseModel

    app = FastAPI(title="dlsched", version="0.1.0",
                  description="Schedules deep-learning training jobs on a Ray cluster.")

    def auth(request: Request) -> None:
        h = request.headers.get("authorization", "")
        tok = h[7:] if h.lower().startswith("bearer ") else ""
        if not tok or not hmac.compare_digest(tok, server.token):
            raise HTTPException(401, "missing or wrong bearer token (see the token file in the state dir)",
                                headers={"WWW-Authenticate": "Bearer"})

    class Submit(BaseModel):
        spec: dict[str, Any]
        source: Optional[str] = None

    class MigrateBody(BaseModel):
        nodes: Optional[list[str]] = None
        workers: Optional[int] = None

    def job_or_404(job_id: str) -> dict:
        j = server.store.job(job_id)
        if j is None:
            raise HTTPException(404, f"unknown job {job_id}")
        return j

    @app.get("/health")
    def health():
        return {"ok": True, "policy": server.policy, "pid": os.getpid(),
                "scheduler_alive": server.thread is not None and server.thread.is_alive()}

    @app.get("/jobs")
    def jobs():
        return [_summary(j) for j in server.store.jobs()]

    @app.post("/jobs", status_code=201, dependencies=[Depends(auth)])
    def submit(body: Submit):
        from dlsched.runtime.spec import job_spec_from_dict
        try:
            spec = job_spec_from_dict(body.spec, file=body.source)
        except DlschedError as e:
            raise HTTPException(422, str(e))
        job_id = server.store.add_job(spec.to_dict(), time.time())
        server.backend.submit(job_id)
        return {"job_id": job_id}

    @app.get("/jobs/{job_id}")
    def job(job_id: str):
        j = job_or_404(job_id)
        last = server.store.stats(job_id, since_step=max(j["step"] - 2, -1))
        return {**_summary(j), "spec": j["spec"], "error": j["error"],
                "allocation": server.store.allocation(job_id),
                "checkpoints": server.store.checkpoints(job_id), "last_stats": last[-1] if last else None}

    @app.get("/jobs/{job_id}/stats")
    def stats(job_id: str, since: int = -1, limit: int = 100000):
        job_or_404(job_id)
        return server.store.stats(job_id, since_step=since, limit=limit)

    @app.get("/jobs/{job_id}/events")
    def events(job_id: str):
        job_or_404(job_id)
        return server.store.events(job_id)

    def op(kind: str, job_id: str, **kw):
        job_or_404(job_id)
        try:
            return server.backend.command(kind, job_id, **kw)
        except DlschedError as e:
            raise HTTPException(409, str(e))

    @app.post("/jobs/{job_id}/cancel", dependencies=[Depends(auth)])
    def cancel(job_id: str):
        return op("cancel", job_id)

    @app.post("/jobs/{job_id}/suspend", dependencies=[Depends(auth)])
    def suspend(job_id: str):
        return op("suspend", job_id)

    @app.post("/jobs/{job_id}/resume", dependencies=[Depends(auth)])
    def resume(job_id: str):
        return op("resume", job_id)

    @app.post("/jobs/{job_id}/migrate", dependencies=[Depends(auth)])
    def migrate(job_id: str, body: MigrateBody | None = None):
        body = body or MigrateBody()
        return op("migrate", job_id, nodes=body.nodes, workers=body.workers)

    @app.get("/nodes")
    def nodes():
        b = server.backend
        free = b.state.free
        up = b.snapshot().up
        return [{"name": n.name, "rack": n.rack, "gpu_type": n.gpu_type, "gpus": n.gpus,
                 "free_gpus": float(free[i, 0]), "cpus": n.cpus, "free_cpus": float(free[i, 1]),
                 "up": bool(b.state.up[i]), "schedulable": bool(up[i]), "ray_id": n.ray_id,
                 "warm_workers": len(b.pool[i]), "warm_ready": b.warm_ready(i)} for i, n in enumerate(b.nodes)]

    @app.get("/metrics/scheduler")
    def metrics():
        lat = list(server.backend.latencies)
        return {"rounds": len(server.scheduler.rounds), "decisions": len(lat), "decision_latency_s": lat[-1000:],
                "round_wall_s": [r[1] for r in server.scheduler.rounds[-1000:]]}

    return app


def _summary(j: dict) -> dict:
    s = j["spec"]
    total = s.get("iterations")
    return {"job_id": j["job_id"], "name": j["name"], "state": j["state"], "step": j["step"],
            "total_steps": total, "epochs": s.get("epochs"), "workers": j["workers"], "ps": s.get("ps", 0),
            "gpus_per_worker": s.get("gpus_per_worker"), "priority": s.get("priority"),
            "submit_time": j["submit_time"], "start_time": j["start_time"],
            "finish_time": j["finish_time"], "attempts": j["attempts"]}


class Server:
    """The scheduler thread + the API. `start()` connects to Ray and recovers; `serve()` blocks."""

    def __init__(self, state_dir: str | Path, *, policy: str = "fifo", ray_address: str,
                 host: str = "127.0.0.1", port: int = 8470, warm_per_node: int | None = None,
                 round_s: float | None = 30.0, embedded: bool = False, namespace: str = "dlsched",
                 cleanup_on_exit: bool = False, **backend_kw):
        self.state_dir = Path(state_dir)
        self.policy, self.ray_address = policy, ray_address
        self.host, self.port = host, port
        self.warm_per_node, self.round_s, self.embedded = warm_per_node, round_s, embedded
        self.backend_kw = backend_kw
        self.namespace, self.cleanup_on_exit = namespace, cleanup_on_exit
        self.thread: threading.Thread | None = None
        self.token = ensure_token(self.state_dir)

    def start(self) -> dict:
        from dlsched.runtime.backend import RayBackend
        from dlsched.runtime.store import Store
        from dlsched.scheduler.core import Scheduler, build_profile
        import dlsched.policies  # noqa: F401  (registers every policy)
        ray_env(self.embedded)
        import ray
        profile = build_profile(self.policy, {"round_s": self.round_s} if self.round_s else None)
        if not ray.is_initialized():
            ray.init(address=self.ray_address, namespace=self.namespace, log_to_driver=False,
                     logging_level=logging.WARNING)
        self.store = Store(self.state_dir / "dlsched.db")
        self.backend = RayBackend(self.store, self.state_dir, namespace=self.namespace,
                                  warm_per_node=self.warm_per_node,
                                  **self.backend_kw)
        self.scheduler = Scheduler(profile)
        counts = self.backend.recover(self.scheduler)
        self.thread = threading.Thread(target=self._loop, daemon=True, name="dlsched-scheduler")
        self.thread.start()
        return counts

    def _loop(self) -> None:
        try:
            self.scheduler.run(self.backend)
        except BaseException:
            # a server without its scheduler must not keep answering: exit, a restart recovers
            log.exception("scheduler loop died; exiting (a restarted server recovers from the store)")
            logging.shutdown()
            os._exit(3)

    def stop(self) -> None:
        if self.thread is not None:
            self.backend.close()
            self.thread.join(timeout=30)
            if self.cleanup_on_exit:
                self.backend.kill_all()

    def serve(self) -> None:
        import uvicorn
        config = uvicorn.Config(make_app(self), host=self.host, port=self.port, log_level="warning",
                                access_log=False)
        srv = uvicorn.Server(config)
        info = {"url": f"http://{self.host}:{self.port}", "pid": os.getpid(), "policy": self.policy,
                "ray_address": self.ray_address}
        p = self.state_dir / "server.json"
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(info))
        tmp.replace(p)
        try:
            srv.run()
        finally:
            self.stop()
