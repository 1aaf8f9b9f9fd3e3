"""The server's REST API (FastAPI): the routes the module docstring of dlsched.runtime.server
lists, each a thin reader of the store or a command on the backend's queue; the request-body
limit; and how a job is summarised for `GET /jobs`."""

import json
import os
import time
from typing import TYPE_CHECKING, Any, Optional

from dlsched.core.errors import DlschedError
from dlsched.runtime.byo_launch import redact

if TYPE_CHECKING:
    from dlsched.runtime.server import Server

MAX_BODY_BYTES = 2 * 1024 ** 2          # any request body
MAX_SPEC_BYTES = 1024 ** 2              # one job spec, as JSON
MAX_OUTPUT_BYTES = 1024 ** 2            # one answer of /jobs/{id}/output


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
    from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Response
    from pydantic import BaseModel

    from dlsched.runtime.apidocs import install_docs
    from dlsched.runtime.progress import job_stats
    app = FastAPI(title="dlsched", version="0.1.0", docs_url=None, redoc_url=None,
                  description="Schedules deep-learning training jobs on a Ray cluster.")
    install_docs(app)
    app.add_middleware(BodyLimit)

    from dlsched.web.auth import Sessions
    from dlsched.web.routes import install_web, require
    # each user's token is theirs (dlsched.runtime.users); the state dir's token is the first admin's
    sessions = Sessions(server.token, server.port, identify=server.users.identify, lookup=server.users.get)
    install_web(app, sessions, lambda: {"mode": "live", "title": f"dlsched server, policy {server.policy}",
                                        "now": time.time(), "policy": server.policy})

    class Submit(BaseModel):
        spec: dict[str, Any]
        source: Optional[str] = None

    class MigrateBody(BaseModel):
        nodes: Optional[list[str]] = None
        workers: Optional[int] = None

    class NewUser(BaseModel):
        name: str
        queues: list[str] = []
        admin: bool = False

    def job_or_404(job_id: str, request: Request | None = None) -> dict:
        """The job; with `request`, only for its owner or an admin (403 with the reason)."""
        j = server.store.job(job_id)
        if j is None:
            raise HTTPException(404, f"unknown job {job_id}")
        if request is not None:
            u, owner = request.state.user, j["spec"].get("user") or "default"
            if not (u.admin or owner == u.name):
                raise HTTPException(403, f"{u.name} may not touch {job_id}: it is {owner}'s (its owner or an admin may)")
        return j

    def admin_only(request: Request, what: str) -> None:
        u = request.state.user
        if not u.admin:
            raise HTTPException(403, f"{what} needs an admin; {u.name} is not one")

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
    def submit(body: Submit, request: Request):
        from dlsched.runtime.spec import job_spec_from_dict
        size = len(json.dumps(body.spec))
        if size > MAX_SPEC_BYTES:
            raise HTTPException(413, f"job spec is {size} bytes as JSON; the limit is {MAX_SPEC_BYTES}")
        d = _owned(dict(body.spec), request.state.user, server.tree, body.source)
        try:
            spec = job_spec_from_dict(d, file=body.source, script_roots=server.backend.script_roots)
        except DlschedError as e:
            raise HTTPException(422, str(e))
        cap = server.backend.max_grace_s
        if spec.command and spec.grace_s > cap:
            raise HTTPException(422, f"{body.source or 'job spec'}: field 'grace_s': {spec.grace_s:g} s is over "
                                     f"this server's maximum of {cap:g} s (--max-grace-s)")
        # a job that can never fit this cluster is refused now, not rejected after it is queued
        never = server.backend.command("admit", "", spec=spec)
        if never:
            raise HTTPException(422, f"{body.source or 'job spec'}: {never}")
        job_id = server.store.add_job(spec.to_dict(), time.time())
        server.backend.submit(job_id)
        from dlsched.runtime.byo_runs import no_progress_note
        note = no_progress_note(server.policy, spec)
        if note:
            server.store.event(job_id, "no_progress", note)
            return {"job_id": job_id, "note": note}
        return {"job_id": job_id}

    @api.get("/jobs/{job_id}")
    def job(job_id: str, request: Request):
        j = job_or_404(job_id, request)
        last = server.store.stats(job_id, since_step=max(j["step"] - 2, -1))
        return {**_summary(j), **server.waiting().get(job_id, _NOT_WAITING), "spec": redact(j["spec"]), "error": j["error"], "failed_rank": j.get("failed_rank"),
                "allocation": server.store.allocation(job_id),
                "checkpoints": server.store.checkpoints(job_id), "last_stats": last[-1] if last else None,
                # what the policies read (dlsched.scheduler.backend.STATS_KEYS), measured
                "progress": job_stats(server.store, job_id, server.backend.epoch, time.time())}

    @api.get("/report")
    def report(request: Request):
        """The run's summary, per-job table and utilisation samples, computed from the event log
        exactly as a simulation's (dlsched.runtime.report). Admins only: the whole history."""
        admin_only(request, "the report of every job")
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
    def schedlog(request: Request, since_id: int = 0, limit: int = 10000):
        """The scheduler's typed event log (dlsched.scheduler.eventlog), oldest first (admins)."""
        admin_only(request, "the scheduler's log")
        return server.store.schedlog(since_id=since_id, limit=max(1, min(limit, 100000)))

    @api.get("/jobs/{job_id}/stats")
    def stats(job_id: str, request: Request, since: int = -1, limit: int = 100000):
        job_or_404(job_id, request)
        return server.store.stats(job_id, since_step=since, limit=limit)

    @api.get("/jobs/{job_id}/events")
    def events(job_id: str, request: Request):
        job_or_404(job_id, request)
        return server.store.events(job_id)

    def op(kind: str, job_id: str, request: Request, **kw):
        job_or_404(job_id, request)
        try:
            return server.backend.command(kind, job_id, **kw)
        except DlschedError as e:
            raise HTTPException(409, str(e))

    @api.post("/jobs/{job_id}/cancel")
    def cancel(job_id: str, request: Request):
        return op("cancel", job_id, request)

    @api.post("/jobs/{job_id}/suspend")
    def suspend(job_id: str, request: Request):
        return op("suspend", job_id, request, by=request.state.user.name)

    @api.post("/jobs/{job_id}/resume")
    def resume(job_id: str, request: Request):
        return op("resume", job_id, request)

    @api.post("/jobs/{job_id}/migrate")
    def migrate(job_id: str, request: Request, body: MigrateBody | None = None):
        admin_only(request, "moving a job")
        body = body or MigrateBody()
        return op("migrate", job_id, request, nodes=body.nodes, workers=body.workers)

    @api.get("/jobs/{job_id}/output")
    def output(job_id: str, request: Request, rank: int = 0, tail_bytes: int = 65536):
        """What rank `rank` of the job printed (stdout and stderr, every run, newest last)."""
        job_or_404(job_id, request)
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
    def state(request: Request):
        """The live cluster as a simulator state document ("dlsched-state", dlsched.sim.midflight):
        nodes, running jobs with placement and steps left, waiting jobs, measured speeds (admins)."""
        admin_only(request, "the cluster's state document")
        return server.backend.command("state", "")

    @api.get("/export")
    def export(request: Request):
        """The history as a workload in the common schema: arrivals and measured run times (admins)."""
        admin_only(request, "the history of every job")
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

    @api.get("/users")
    def users(request: Request):
        """Every user: name, queues, admin (admins only; tokens are never shown again)."""
        admin_only(request, "the list of users")
        return server.users.list()

    @api.post("/users", status_code=201)
    def add_user(body: NewUser, request: Request):
        """A new user allowed on `queues` (leaves of the server's queue tree); the answer holds
        their token, once: the store keeps only its SHA-256."""
        admin_only(request, "adding a user")
        tree = server.tree
        bad = [q for q in body.queues if not tree.is_leaf(q)]
        if bad:
            raise HTTPException(422, f"queues: unknown queue {bad[0]!r} (the queues jobs run in: {', '.join(tree.leaves)})")
        try:
            token = server.users.add(body.name, body.queues, body.admin)
        except DlschedError as e:
            raise HTTPException(409 if "exists" in str(e) else 422, str(e))
        return {**server.users.get(body.name).to_dict(), "token": token}

    @api.get("/whoami")
    def whoami(request: Request):
        """Who this token (or session) is: name, queues, admin."""
        u = request.state.user
        return {"name": u.name, "admin": u.admin, "queues": list(u.queues)}

    from dlsched.runtime.queues_api import install_queues
    install_queues(api, server)             # GET /queues, /queues/{queue}/pending
    app.include_router(api)
    return app


def _owned(spec: dict, user, tree, source: str | None) -> dict:
    """A submitted spec as its submitter's: a user's job is theirs (an admin may name another
    owner), in the queue the spec names or the user's default queue (else `default`), which
    must be a leaf of the tree that the user is allowed on (403 with the reason)."""
    from fastapi import HTTPException

    from dlsched.tenancy import DEFAULT_QUEUE
    where = f"{source}: " if source else ""
    named = spec.get("user")
    if not user.admin:
        if named not in (None, "default", user.name):
            raise HTTPException(403, f"{where}{user.name} may not submit a job as {named!r}")
        spec["user"] = user.name
    queue = spec.get("queue") or user.default_queue or DEFAULT_QUEUE
    if not isinstance(queue, str) or not tree.is_leaf(queue):
        raise HTTPException(422, f"{where}field 'queue': unknown queue {queue!r} (queues: {', '.join(tree.leaves)})")
    if not user.may_use(queue):
        raise HTTPException(403, f"{where}{user.name} may not submit to queue {queue!r} "
                                 f"(allowed: {', '.join(user.queues) or 'none'})")
    spec["queue"] = queue
    return spec


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
            "finish_time": j["finish_time"], "attempts": j["attempts"], "user": s.get("user", "default"),
            "queue": s.get("queue") or "default",
            "reason": (j["error"] or "").splitlines()[0][:300] if j["error"] else ""}


