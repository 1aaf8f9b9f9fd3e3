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
    GET  /queues                      each queue: quotas, use, entitled and borrowed GPUs, running, pending
    GET  /queues/{q}/pending?offset&limit  a leaf's waiting jobs: positions in queue and parent, reason
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

from dlsched.core.errors import DlschedError

log = logging.getLogger("dlsched.runtime")

# the routes (dlsched.runtime.api); the limits are named here too, where the docstring says them
from dlsched.runtime.api import MAX_BODY_BYTES, MAX_OUTPUT_BYTES, MAX_SPEC_BYTES, make_app, parse_duration  # noqa: E402,F401


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


DEFAULT_ROUND_S = 30.0     # the periodic round of a profile that has none of its own


class Server:
    """The scheduler thread + the API. `start()` connects to Ray and recovers; `serve()` blocks."""

    def __init__(self, state_dir: str | Path, *, policy: str = "fifo", ray_address: str,
                 host: str = "127.0.0.1", port: int = 8470, warm_per_node: int | None = None,
                 round_s: float | None = None, embedded: bool = False, namespace: str = "dlsched",
                 cleanup_on_exit: bool = False, policy_settings: dict | None = None, queues=None,
                 tenancy: str | None = None, **backend_kw):
        self.state_dir = Path(state_dir)
        self.policy, self.ray_address = policy, ray_address
        self.host, self.port = host, port
        self.warm_per_node, self.round_s, self.embedded = warm_per_node, round_s, embedded
        self.policy_settings = dict(policy_settings or {})    # a --policy-config's settings for it
        self.backend_kw = backend_kw
        self.namespace, self.cleanup_on_exit = namespace, cleanup_on_exit
        self.thread: threading.Thread | None = None
        from dlsched.tenancy import default_tree
        from dlsched.tenancy.engine import with_default
        # the queue tree (--queues FILE; dlsched.tenancy), with a `default` leaf for jobs that name
        # no queue when the file has none (it runs on what the others lend)
        self.tree = with_default(queues) if queues is not None else default_tree()
        self.queues_given = queues is not None     # quotas are enforced only with a tree
        self.tenancy_mode = tenancy                # None: the queue file's mode, else kueue
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
        from dlsched.runtime.users import Users
        self.users = Users(self.store)
        self.users.ensure_admin(self.token)        # the state dir's token: the first admin's
        self.backend = RayBackend(self.store, self.state_dir, namespace=self.namespace,
                                  warm_per_node=self.warm_per_node,
                                  **self.backend_kw)
        tenancy = None
        if self.queues_given:
            from dlsched.tenancy.engine import Tenancy
            tenancy = Tenancy(self.tree, self.tenancy_mode)
            tenancy.keep_in(self.store)            # usage history survives a restart
        self.scheduler = Scheduler(profile, tenancy=tenancy)
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
        # placed, ranks not started yet (a cold worker imports torch): how long they have taken
        b, now = self.backend, time.time()
        for run in list(b.runs.values()):
            if run.starting:
                where = ", ".join(sorted({b.nodes[tp.node].name for tp in run.placements}))
                out[run.job_id] = {"state": "starting", "queue_position": None, "starting_s": round(now - run.started, 1),
                                   "waiting_reason": f"placed on {where} {now - run.started:.0f} s ago; "
                                                     f"ranks not started"}
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
