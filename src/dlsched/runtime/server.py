"""`dlsched server`: the scheduler core driving a RayBackend, with a REST API and a SQLite store.

API (OpenAPI schema at /openapi.json, docs at /docs). Every request except /health, the docs and
the web view's login page and static files needs `Authorization: Bearer <token>` (the token file
in the state dir, readable by its owner only), reads included: a job's spec, args, paths and
tracebacks are the user's.

The web view (dlsched.web) is served at `/`: a login page where the token is pasted once, then a
session cookie that opens the API's reads (GET) to the pages; writes still need the token.

Limits: a request body over MAX_BODY_BYTES is refused with 413 before it is read whole, a job
spec over MAX_SPEC_BYTES (as JSON) with 413.

One server per state dir: the server holds an exclusive lock on `<state dir>/server.lock`
(released by the kernel when the process dies, so a kill -9 leaves no stale lock); a second
server on the same state dir refuses to start and names the holder.

    GET  /health                      liveness (no auth)
    GET  /                            the web view (login page without a session); POST /login, /logout
    GET  /jobs                        every job with its state and progress
    POST /jobs                        submit a job spec (JSON of the YAML fields)      -> 201
    GET  /jobs/{id}                   job, allocation (rank -> node, GPUs), checkpoints
    GET  /jobs/{id}/stats?since=N     per-step loss, accuracy, step time, epoch
    GET  /jobs/{id}/events            the job's event log
    GET  /jobs/{id}/output?rank=R     what the job's ranks printed (stdout and stderr), per rank
    POST /jobs/{id}/cancel|suspend|resume
    POST /jobs/{id}/migrate           {"nodes": ["n2", "n3"], "workers": 4}  (both optional)
    GET  /allocations                 every job's allocation now: {job: [{rank, node, gpu_ids}]}
    GET  /timeline?since&until&job_id  task placement intervals (job, task, node, GPUs, start, end)
    GET  /nodes                       nodes from Ray: name, rack, GPU type, GPUs, free, tasks per GPU, up
    GET  /state                       the live cluster as a simulator state document (dlsched.sim.midflight)
    GET  /whatif?policies=a,b&horizon=6h   each policy simulated from the live state: predicted starts
    GET  /export                      the history as a workload in the common schema (measured run times)
    GET  /metrics                     Prometheus metrics, text exposition format (dlsched.runtime.metrics)
    GET  /metrics/scheduler           round count, event->decision latencies (JSON)
"""


import fcntl
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

MAX_BODY_BYTES = 2 * 1024 ** 2          # any request body
MAX_SPEC_BYTES = 1024 ** 2              # one job spec, as JSON
MAX_OUTPUT_BYTES = 1024 ** 2            # one answer of /jobs/{id}/output


def default_state_dir() -> Path:
    return Path(os.environ.get("DLSCHED_STATE_DIR") or Path.home() / ".dlsched")


def private_state_dir(state_dir: Path) -> Path:
    """Create the state dir (0700) and make what is already in it private to its owner: the
    store, its WAL, checkpoints and logs hold the users' programs' data. Files created later are
    private through the process umask (0077, set by the server and the cluster keeper)."""
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    for dirpath, dirnames, filenames in os.walk(state_dir):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o700)
        for f in filenames:
            try:
                os.chmod(os.path.join(dirpath, f), 0o600)
            except OSError:
                pass
    return state_dir


class StateLock:
    """The exclusive lock of one server on a state dir (flock on `server.lock`, which also
    names the holder: pid, URL). The kernel releases it when the process dies."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / "server.lock"
        self.fd: int | None = None

    def acquire(self, info: dict) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise DlschedError(f"state dir {self.path.parent} is in use by another server "
                               f"({holder_text(self.path.parent)}); stop it first (dlsched down)") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(info).encode())
        self.fd = fd

    def update(self, info: dict) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, json.dumps(info).encode(), 0)


def lock_holder(state_dir: Path) -> dict | None:
    """The live server holding the state dir's lock ({pid, url, ...}), or None when no process
    holds it (whatever the lock file says: a killed server leaves a file, not a lock)."""
    p = Path(state_dir) / "server.lock"
    if not p.exists():
        return None
    fd = os.open(p, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:                       # held: read who holds it
            try:
                return json.loads(os.pread(fd, 65536, 0) or b"{}") or {"pid": None}
            except ValueError:
                return {"pid": None}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def holder_text(state_dir: Path) -> str:
    h = lock_holder(state_dir) or {}
    return f"pid {h.get('pid', '?')}, {h.get('url', 'URL not known yet')}"


def ensure_token(state_dir: Path) -> str:
    """The API token: created once (owner-only file), read afterwards."""
    p = Path(state_dir) / "token"
    private_state_dir(state_dir)
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


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is refused with 413, by its
    Content-Length at once, or as soon as a streamed body passes the limit."""

    def __init__(self, app, limit: int = MAX_BODY_BYTES):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", []):
            if k == b"content-length" and v.isdigit() and int(v) > self.limit:
                return await self._refuse(send)
        seen = 0

        async def limited():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
            return msg
        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._refuse(send)

    async def _refuse(self, send):
        body = json.dumps({"detail": f"request body over {self.limit} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    """A request body over the limit (answered 413)."""


def make_app(server: "Server"):
    from fastapi import APIRouter, Depends, FastAPI, HTTPException, Response
    from pydantic import BaseModel

    from dlsched.runtime.apidocs import install_docs
    from dlsched.runtime.progress import job_stats
    app = FastAPI(title="dlsched", version="0.1.0", docs_url=None, redoc_url=None,
                  description="Schedules deep-learning training jobs on a Ray cluster.")
    install_docs(app)
    app.add_middleware(BodyLimit)

    from dlsched.web.auth import Sessions
    from dlsched.web.routes import install_web, require
    sessions = Sessions(server.token, server.port)
    install_web(app, sessions, lambda: {"mode": "live", "title": f"dlsched server, policy {server.policy}",
                                        "now": time.time(), "policy": server.policy})

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

    api = APIRouter(dependencies=[Depends(require(sessions))])

    @api.get("/jobs")
    def jobs():
        waiting = server.waiting()
        return [{**_summary(j), **waiting.get(j["job_id"], _NOT_WAITING)} for j in server.store.jobs()]

    @api.post("/jobs", status_code=201)
    def submit(body: Submit):
        from dlsched.runtime.spec import job_spec_from_dict
        size = len(json.dumps(body.spec))
        if size > MAX_SPEC_BYTES:
            raise HTTPException(413, f"job spec is {size} bytes as JSON; the limit is {MAX_SPEC_BYTES}")
        try:
            spec = job_spec_from_dict(body.spec, file=body.source)
        except DlschedError as e:
            raise HTTPException(422, str(e))
        job_id = server.store.add_job(spec.to_dict(), time.time())
        server.backend.submit(job_id)
        return {"job_id": job_id}

    @api.get("/jobs/{job_id}")
    def job(job_id: str):
        j = job_or_404(job_id)
        last = server.store.stats(job_id, since_step=max(j["step"] - 2, -1))
        return {**_summary(j), "spec": j["spec"], "error": j["error"], "failed_rank": j.get("failed_rank"),
                "allocation": server.store.allocation(job_id),
                "checkpoints": server.store.checkpoints(job_id), "last_stats": last[-1] if last else None,
                # what the policies read (dlsched.scheduler.backend.STATS_KEYS), measured
                "progress": job_stats(server.store, job_id, server.backend.epoch, time.time())}

    @api.get("/report")
    def report():
        """The run's summary, per-job table and utilisation samples, computed from the event log
        exactly as a simulation's (dlsched.runtime.report)."""
        from dlsched.runtime.calibration import calibration_from_store
        from dlsched.runtime.report import result_from_store
        b = server.backend
        res = result_from_store(server.store, b.epoch, int(b.cluster.total_gpus), policy=server.policy)
        jobs = res.jobs.astype(object).where(res.jobs.notna(), None)
        nodes = [{"name": n.name, "rack": n.rack, "gpu_type": n.gpu_type, "gpus": n.gpus, "cpus": n.cpus}
                 for n in b.nodes]
        return {"summary": res.summary, "jobs": jobs.to_dict(orient="records"),
                "timeline": res.timeline.to_dict(orient="list"),
                "calibration": calibration_from_store(server.store, b.epoch, nodes=nodes, policy=server.policy)}

    @api.get("/log")
    def schedlog(since_id: int = 0, limit: int = 10000):
        """The scheduler's typed event log (dlsched.scheduler.eventlog), oldest first."""
        return server.store.schedlog(since_id=since_id, limit=max(1, min(limit, 100000)))

    @api.get("/jobs/{job_id}/stats")
    def stats(job_id: str, since: int = -1, limit: int = 100000):
        job_or_404(job_id)
        return server.store.stats(job_id, since_step=since, limit=limit)

    @api.get("/jobs/{job_id}/events")
    def events(job_id: str):
        job_or_404(job_id)
        return server.store.events(job_id)

    def op(kind: str, job_id: str, **kw):
        job_or_404(job_id)
        try:
            return server.backend.command(kind, job_id, **kw)
        except DlschedError as e:
            raise HTTPException(409, str(e))

    @api.post("/jobs/{job_id}/cancel")
    def cancel(job_id: str):
        return op("cancel", job_id)

    @api.post("/jobs/{job_id}/suspend")
    def suspend(job_id: str):
        return op("suspend", job_id)

    @api.post("/jobs/{job_id}/resume")
    def resume(job_id: str):
        return op("resume", job_id)

    @api.post("/jobs/{job_id}/migrate")
    def migrate(job_id: str, body: MigrateBody | None = None):
        body = body or MigrateBody()
        return op("migrate", job_id, nodes=body.nodes, workers=body.workers)

    @api.get("/jobs/{job_id}/output")
    def output(job_id: str, rank: int = 0, tail_bytes: int = 65536):
        """What rank `rank` of the job printed (stdout and stderr, every run, newest last)."""
        job_or_404(job_id)
        from dlsched.runtime.joblogs import rank_log, read_tail
        return {"job_id": job_id, "rank": rank,
                "ranks": sorted(int(p.stem.split("-")[1]) for p in rank_log(server.state_dir, job_id, 0).parent.glob("rank-*.log")),
                "text": read_tail(rank_log(server.state_dir, job_id, rank), min(max(tail_bytes, 0), MAX_OUTPUT_BYTES))}

    @api.get("/allocations")
    def allocations():
        """Every job's allocation now ({job: [{rank, node, gpu_ids}]}), as GET /jobs/{id} names one's."""
        return server.store.allocations_all()

    @api.get("/timeline")
    def timeline(since: Optional[float] = None, until: Optional[float] = None, job_id: Optional[str] = None,
                 limit: int = 20000):
        """Where jobs ran and when, from the scheduler's event log: one interval per task
        placement {job_id, task, node, gpus, start, end} in Unix seconds (end null while it
        lasts), those overlapping [since, until], at most `limit` (the latest started); and the
        nodes with their GPUs. Node names are today's: the log names nodes by their index in the
        node list the server found at start."""
        from dlsched.web import placements
        b = server.backend
        ivs = placements.intervals(server.store.schedlog_kinds(placements.KINDS), [n.name for n in b.nodes],
                                   offset=b.epoch)
        keep, cut = placements.select(ivs, since, until, job_id, limit)
        return {"now": time.time(), "intervals": keep, "truncated": cut,
                "nodes": [{"name": n.name, "rack": n.rack, "gpus": n.gpus} for n in b.nodes]}

    @api.get("/nodes")
    def nodes():
        b = server.backend
        free = b.state.free
        up = b.snapshot().up
        load = b.state.gpu_load.copy()
        return [{"name": n.name, "rack": n.rack, "gpu_type": n.gpu_type, "gpus": n.gpus,
                 "free_gpus": float(free[i, 0]), "cpus": n.cpus, "free_cpus": float(free[i, 1]),
                 "gpu_load": [int(x) for x in load[i, :n.gpus]],      # tasks per GPU id (sharing: > 1)
                 "up": bool(b.state.up[i]), "schedulable": bool(up[i]), "ray_id": n.ray_id,
                 "warm_workers": len(b.pool[i]), "warm_ready": b.warm_ready(i)} for i, n in enumerate(b.nodes)]

    @api.get("/state")
    def state():
        """The live cluster as a simulator state document ("dlsched-state", dlsched.sim.midflight):
        nodes, running jobs with placement and steps left, waiting jobs, measured speeds."""
        return server.backend.command("state", "")

    @api.get("/export")
    def export():
        """The history as a workload in the common schema: arrivals and measured run times."""
        from dlsched.runtime.whatif import history
        return history(server.store)

    @api.get("/whatif")
    def whatif(policies: str = "", horizon: str = "6h"):
        """Each policy simulated from the live state: mean wait, mean JCT, utilisation over the
        horizon, and each job's predicted start and finish (default: the server's policy)."""
        from dlsched.runtime.whatif import MAX_HORIZON_S, MAX_POLICIES, predict
        from dlsched.scheduler.framework import REGISTRY
        names = [p.strip() for p in policies.split(",") if p.strip()] or [server.scheduler.profile.name]
        if len(names) > MAX_POLICIES:
            raise HTTPException(422, f"policies: at most {MAX_POLICIES}")
        unknown = [p for p in names if p not in REGISTRY.names("profile")]
        if unknown:
            raise HTTPException(422, f"policies: unknown policy {unknown[0]!r} (see dlsched policies)")
        try:
            h = parse_duration(horizon)
        except ValueError as e:
            raise HTTPException(422, f"horizon: {e}")
        if not 0 < h <= MAX_HORIZON_S:
            raise HTTPException(422, f"horizon: must be > 0 and at most {MAX_HORIZON_S / 86400:g} days")
        return predict(server.backend.command("state", ""), names, h)

    @api.get("/metrics", response_class=Response)
    def prometheus():
        """Prometheus metrics in the text exposition format: queue, running jobs, GPUs, job
        state transitions, switch costs, round and decision latencies (dlsched.runtime.metrics)."""
        from dlsched.runtime.metrics import CONTENT_TYPE_LATEST
        return Response(server.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @api.get("/metrics/scheduler")
    def metrics():
        lat = list(server.backend.latencies)
        return {"rounds": len(server.scheduler.rounds), "decisions": len(lat), "decision_latency_s": lat[-1000:],
                "round_errors": [{"time": t, "job_id": j, "error": e} for t, j, e in server.scheduler.round_errors[-100:]],
                "round_wall_s": [r[1] for r in server.scheduler.rounds[-1000:]]}

    app.include_router(api)
    return app


_NOT_WAITING = {"queue_position": None, "waiting_reason": ""}
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds of "90", "90s", "30m", "6h", "2d"."""
    t = str(text).strip().lower()
    unit = _UNITS.get(t[-1:], None)
    try:
        v = float(t[:-1] if unit else t) * (unit or 1.0)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 30m, 6h, 2d)") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 30m, 6h, 2d)")
    return v


def _summary(j: dict) -> dict:
    s = j["spec"]
    total = s.get("iterations")
    return {"job_id": j["job_id"], "name": j["name"], "state": j["state"], "step": j["step"],
            "total_steps": total, "epochs": s.get("epochs"), "workers": j["workers"], "ps": s.get("ps", 0),
            "gpus_per_worker": s.get("gpus_per_worker"), "priority": s.get("priority"),
            "submit_time": j["submit_time"], "start_time": j["start_time"],
            "finish_time": j["finish_time"], "attempts": j["attempts"],
            "reason": (j["error"] or "").splitlines()[0][:300] if j["error"] else ""}


DEFAULT_ROUND_S = 30.0     # the periodic round of a profile that has none of its own


class Server:
    """The scheduler thread + the API. `start()` connects to Ray and recovers; `serve()` blocks."""

    def __init__(self, state_dir: str | Path, *, policy: str = "fifo", ray_address: str,
                 host: str = "127.0.0.1", port: int = 8470, warm_per_node: int | None = None,
                 round_s: float | None = None, embedded: bool = False, namespace: str = "dlsched",
                 cleanup_on_exit: bool = False, policy_settings: dict | None = None, **backend_kw):
        self.state_dir = Path(state_dir)
        self.policy, self.ray_address = policy, ray_address
        self.host, self.port = host, port
        self.warm_per_node, self.round_s, self.embedded = warm_per_node, round_s, embedded
        self.policy_settings = dict(policy_settings or {})    # a --policy-config's settings for it
        self.backend_kw = backend_kw
        self.namespace, self.cleanup_on_exit = namespace, cleanup_on_exit
        self.thread: threading.Thread | None = None
        os.umask(0o077)                   # the store, its WAL, checkpoints, logs: owner only
        self.token = ensure_token(self.state_dir)
        self.lock = StateLock(self.state_dir)
        self.lock.acquire({"pid": os.getpid(), "policy": policy, "ray_address": ray_address,
                           "started": time.time()})

    def profile_settings(self) -> dict:
        """The policy's settings: the config's, then --round-s; without either, the profile's own
        round interval, or DEFAULT_ROUND_S for a profile without one (its periodic fallback)."""
        import dlsched.policies  # noqa: F401  (registers every policy)
        from dlsched.scheduler.framework import REGISTRY
        over = dict(self.policy_settings)
        if self.round_s:
            over["round_s"] = self.round_s
        elif over.get("round_s") is None and REGISTRY.get("profile", self.policy).round_s is None:
            over["round_s"] = DEFAULT_ROUND_S
        return over

    def start(self) -> dict:
        from dlsched.runtime.backend import RayBackend
        from dlsched.runtime.store import Store
        from dlsched.scheduler.core import Scheduler, build_profile
        import dlsched.policies  # noqa: F401  (registers every policy)
        ray_env(self.embedded)
        from dlsched.runtime.cluster import LOCAL_ONLY_ENV, _is_loopback
        if _is_loopback(self.ray_address):         # else Ray rewrites 127.0.0.1 to an outward address
            os.environ.setdefault(LOCAL_ONLY_ENV, "0")
        import ray
        profile = build_profile(self.policy, self.profile_settings(), runtime=True)
        if not ray.is_initialized():
            ray.init(address=self.ray_address, namespace=self.namespace, log_to_driver=False,
                     logging_level=logging.WARNING)
        self.store = Store(self.state_dir / "dlsched.db")
        self.backend = RayBackend(self.store, self.state_dir, namespace=self.namespace,
                                  warm_per_node=self.warm_per_node,
                                  **self.backend_kw)
        self.scheduler = Scheduler(profile)
        if "gpu_sharing" in profile.needs() and not self.backend.gpu_slots:
            raise DlschedError(f"--policy {self.policy} shares GPUs, and this Ray cluster cannot: "
                               + self.backend.no_slots_reason())
        if not self.backend.gpu_slots:
            log.info("GPU sharing is off: %s", self.backend.no_slots_reason())
        self.scheduler.check_backend(self.backend)    # a profile that needs more is refused here
        self.backend.use_capabilities(profile.needs())   # before recovery: re-attached runs too
        from dlsched.runtime.metrics import Metrics
        self.metrics = Metrics(self.store, self.backend, self.scheduler)   # recovery's changes count
        counts = self.backend.recover(self.scheduler)
        # the typed event log, kept in the store from here on (recovery's replay is not new)
        self.scheduler.sink = self.store.log_record
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

    def bind(self):
        """The listening socket, bound before anything is announced: a port in use is an error
        here, not a server.json that names another process's server."""
        import socket
        fam = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(fam, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as e:
            sock.close()
            raise DlschedError(f"cannot listen on {self.host}:{self.port}: {e.strerror}") from None
        sock.listen(128)
        return sock

    def waiting(self) -> dict[str, dict]:
        """Each waiting job's place in the last round's order (1-based) and why it waits, from
        the scheduler ("why pending?"; read from an API thread: a consistent copy of two fields
        the scheduler thread replaces, never edits in place)."""
        sched = self.scheduler
        out, pos = {}, 0
        for jid in sched.queue_order:
            rec = sched.jobs.get(jid)
            if rec is None or not rec.queued:
                continue
            pos += 1
            out[jid] = {"queue_position": pos, "waiting_reason": rec.why or "waiting for the next round"}
        for rec in list(sched.queue):            # arrived since the last round: last, in arrival order
            if rec.job_id not in out:
                pos += 1
                out[rec.job_id] = {"queue_position": pos, "waiting_reason": "arrived after the last round"}
        return out

    def serve(self, sock=None) -> None:
        import uvicorn
        sock = sock or self.bind()
        config = uvicorn.Config(make_app(self), log_level="warning", access_log=False)
        srv = uvicorn.Server(config)
        info = {"url": f"http://{self.host}:{self.port}", "pid": os.getpid(), "policy": self.policy,
                "ray_address": self.ray_address, "started": time.time()}
        self.lock.update(info)
        p = self.state_dir / "server.json"
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(info))
        tmp.replace(p)
        try:
            srv.run(sockets=[sock])
        finally:
            self.stop()
