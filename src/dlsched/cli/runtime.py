"""The runtime's commands: `dlsched up|down|server|submit|jobs|job|nodes|logs`.

`up` starts an embedded Ray cluster of virtual GPU nodes (a keeper process) and a server, both in
their own sessions, and records their process ids in the state dir; `down` stops exactly those.
The client commands talk to the server's REST API (URL from `<state dir>/server.json` or
--url / DLSCHED_URL, token from `<state dir>/token`).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from dlsched.core.errors import DlschedError

DEFAULT_PORT = 8470
STATE_HELP = "state dir (db, checkpoints, logs, token); default $DLSCHED_STATE_DIR or ~/.dlsched"

job_app = typer.Typer(no_args_is_help=True, help="Inspect or control one job: show, suspend, resume, migrate, cancel.")


def _state(state_dir: Optional[Path]) -> Path:
    from dlsched.runtime.server import default_state_dir
    return Path(state_dir) if state_dir else default_state_dir()


def _console():
    from rich.console import Console
    c = Console()
    return c if c.is_terminal else Console(width=160)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:   # a zombie child of ours is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


class Client:
    def __init__(self, state_dir: Optional[Path] = None, url: Optional[str] = None):
        sd = _state(state_dir)
        self.state_dir = sd
        url = url or os.environ.get("DLSCHED_URL")
        if not url:
            p = sd / "server.json"
            if not p.exists():
                raise DlschedError(f"no server found ({p} missing): start one with `dlsched up` or give --url")
            url = json.loads(p.read_text())["url"]
        self.url = url.rstrip("/")
        tp = sd / "token"
        self.token = tp.read_text().strip() if tp.exists() else os.environ.get("DLSCHED_TOKEN", "")

    def _req(self, method: str, path: str, **kw):
        import httpx
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            r = httpx.request(method, self.url + path, headers=headers, timeout=180, **kw)
        except httpx.HTTPError as e:
            raise DlschedError(f"cannot reach the server at {self.url}: {e}") from None
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail")
            except Exception:
                detail = r.text
            raise DlschedError(f"{method} {path}: {r.status_code}: {detail}")
        return r.json()

    def get(self, path: str, **kw):
        return self._req("GET", path, **kw)

    def post(self, path: str, body=None):
        return self._req("POST", path, json=body)


def _table(rows: list[dict], cols: list[str], title: str):
    from rich.table import Table
    t = Table(title=title)
    for c in cols:
        t.add_column(c)
    for r in rows:
        t.add_row(*("" if r.get(c) is None else (f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]))
                    for c in cols))
    _console().print(t)


def register(app: typer.Typer) -> None:
    app.add_typer(job_app, name="job")

    @app.command("up")
    def up(nodes: int = typer.Option(4, help="virtual GPU nodes"),
           gpus_per_node: int = typer.Option(2, help="GPUs per node"),
           cpus_per_node: int = typer.Option(2), gpu_type: str = typer.Option("fake-gpu"),
           policy: str = typer.Option("fifo", help="a registered policy (dlsched policies)"),
           port: int = typer.Option(DEFAULT_PORT), warm_per_node: Optional[int] = typer.Option(
               None, help="warm rank workers per node (default: its GPU count)"),
           state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
           timeout_s: float = typer.Option(180.0, help="give up if not up in this time")):
        """Start a local Ray cluster of virtual GPU nodes and the server."""
        from dlsched.runtime.server import ensure_token
        sd = _state(state_dir)
        sd.mkdir(parents=True, exist_ok=True)
        upf = sd / "up.json"
        if upf.exists():
            info = json.loads(upf.read_text())
            if any(_alive(p) for p in (info.get("keeper_pid"), info.get("server_pid")) if p):
                raise DlschedError(f"already up (see {upf}); run `dlsched down` first")
        ensure_token(sd)
        logs = sd / "logs"
        logs.mkdir(exist_ok=True)
        cinfo = sd / "cluster.json"
        cinfo.unlink(missing_ok=True)
        (sd / "server.json").unlink(missing_ok=True)
        keeper = subprocess.Popen(
            [sys.executable, "-m", "dlsched.runtime.cluster", "--nodes", str(nodes), "--gpus-per-node",
             str(gpus_per_node), "--cpus-per-node", str(cpus_per_node), "--gpu-type", gpu_type,
             "--info", str(cinfo)], stdin=subprocess.DEVNULL, stdout=open(logs / "cluster.log", "ab"),
            stderr=subprocess.STDOUT, start_new_session=True)
        upf.write_text(json.dumps({"keeper_pid": keeper.pid}))
        t0 = time.monotonic()
        con = _console()
        with con.status(f"starting a Ray cluster of {nodes} nodes x {gpus_per_node} GPUs ..."):
            while not cinfo.exists():
                if keeper.poll() is not None or time.monotonic() - t0 > timeout_s:
                    _stop_pids(sd)
                    raise DlschedError(f"the Ray cluster did not start; see {logs / 'cluster.log'}")
                time.sleep(0.3)
        ci = json.loads(cinfo.read_text())
        env = {**os.environ, "RAY_TMPDIR": ci["ray_tmpdir"], "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
        cmd = [sys.executable, "-m", "dlsched.cli.main", "server", "--ray-address", ci["address"],
               "--state-dir", str(sd), "--policy", policy, "--port", str(port), "--embedded"]
        if warm_per_node is not None:
            cmd += ["--warm-per-node", str(warm_per_node)]
        server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(logs / "server.log", "ab"),
                                  stderr=subprocess.STDOUT, start_new_session=True, env=env)
        upf.write_text(json.dumps({"keeper_pid": keeper.pid, "server_pid": server.pid}))
        with con.status("starting the server ..."):
            while True:
                if server.poll() is not None or time.monotonic() - t0 > timeout_s:
                    _stop_pids(sd)
                    raise DlschedError(f"the server did not start; see {logs / 'server.log'}")
                try:
                    Client(sd).get("/health")
                    break
                except DlschedError:
                    time.sleep(0.3)
        typer.echo(f"up in {time.monotonic() - t0:.0f} s: {nodes} nodes x {gpus_per_node} GPUs, policy {policy}, "
                   f"API http://127.0.0.1:{port} (token in {sd / 'token'})")

    @app.command("down")
    def down(state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP)):
        """Stop the server and the Ray cluster that `dlsched up` started (nothing else)."""
        sd = _state(state_dir)
        if not (sd / "up.json").exists():
            typer.echo("nothing to stop (no up.json)")
            return
        _stop_pids(sd)
        typer.echo("stopped")

    @app.command("server")
    def server(policy: str = typer.Option("fifo", help="a registered policy"),
               ray_address: Optional[str] = typer.Option(None, help="HOST:PORT of a Ray cluster (default: the one `dlsched up` started)"),
               host: str = typer.Option("127.0.0.1", help="listen address"),
               port: int = typer.Option(DEFAULT_PORT),
               state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
               warm_per_node: Optional[int] = typer.Option(None, help="warm rank workers per node"),
               round_s: float = typer.Option(30.0, help="periodic round (fallback; rounds are event-driven)"),
               namespace: str = typer.Option("dlsched", help="Ray namespace of this server's workers and groups"),
               cleanup_on_exit: bool = typer.Option(False, help="on a clean stop, stop every job and worker (default: leave them for the next server)"),
               embedded: bool = typer.Option(False, hidden=True)):
        """Run the scheduler with a RayBackend and the REST API (blocks)."""
        import logging
        from dlsched.runtime.server import Server
        sd = _state(state_dir)
        if ray_address is None:
            ci = sd / "cluster.json"
            if not ci.exists():
                raise DlschedError("give --ray-address HOST:PORT, or start a local cluster with `dlsched up`")
            ray_address = json.loads(ci.read_text())["address"]
            embedded = True
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        s = Server(sd, policy=policy, ray_address=ray_address, host=host, port=port,
                   warm_per_node=warm_per_node, round_s=round_s, embedded=embedded, namespace=namespace,
                   cleanup_on_exit=cleanup_on_exit)
        counts = s.start()
        logging.getLogger("dlsched.runtime").info("server up: policy %s, recovered %s", policy, counts)
        s.serve()

    @app.command("submit")
    def submit(spec: Path = typer.Argument(..., help="job spec YAML"),
               state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
               url: Optional[str] = typer.Option(None, help="server URL")):
        """Validate a job spec and submit it."""
        from dlsched.runtime.spec import load_job_spec
        s = load_job_spec(spec)          # errors name the file, line and field; nothing is sent
        r = Client(state_dir, url).post("/jobs", {"spec": s.to_dict(), "source": str(spec)})
        typer.echo(r["job_id"])

    @app.command("jobs")
    def jobs(state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
             url: Optional[str] = typer.Option(None)):
        """List jobs."""
        rows = Client(state_dir, url).get("/jobs")
        for r in rows:
            tot = r["total_steps"]
            r["progress"] = f"{r['step']}/{tot}" if tot else f"{r['step']} ({r['epochs']} epochs)"
        _table(rows, ["job_id", "name", "state", "progress", "workers", "ps", "attempts"], "jobs")

    @app.command("nodes")
    def nodes(state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
              url: Optional[str] = typer.Option(None)):
        """List the cluster's nodes (from Ray) with free GPUs."""
        _table(Client(state_dir, url).get("/nodes"),
               ["name", "rack", "gpu_type", "gpus", "free_gpus", "up", "schedulable", "warm_workers"], "nodes")

    @app.command("logs")
    def logs(job_id: str, follow: bool = typer.Option(False, "--follow", "-f", help="keep printing until the job ends"),
             tail: int = typer.Option(20, help="last N steps"),
             state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
             url: Optional[str] = typer.Option(None)):
        """A job's events and per-step statistics (loss, accuracy, step time)."""
        c = Client(state_dir, url)
        for e in c.get(f"/jobs/{job_id}/events"):
            typer.echo(f"{time.strftime('%H:%M:%S', time.localtime(e['time']))} {e['kind']:<12} {e['detail']}")
        stats = c.get(f"/jobs/{job_id}/stats")
        for s in stats[-tail:]:
            typer.echo(_stat_line(s))
        last = stats[-1]["step"] if stats else -1
        while follow:
            j = c.get(f"/jobs/{job_id}")
            for s in c.get(f"/jobs/{job_id}/stats", params={"since": last}):
                typer.echo(_stat_line(s))
                last = s["step"]
            if j["state"] in ("done", "failed", "cancelled", "rejected"):
                typer.echo(f"job {job_id} {j['state']}")
                break
            time.sleep(1.0)

    @job_app.command("show")
    def job_show(job_id: str, state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
                 url: Optional[str] = typer.Option(None)):
        """A job's state, allocation and checkpoints."""
        j = Client(state_dir, url).get(f"/jobs/{job_id}")
        typer.echo(json.dumps(j, indent=2))

    def _op(kind: str, job_id: str, state_dir, url, body=None):
        r = Client(state_dir, url).post(f"/jobs/{job_id}/{kind}", body)
        typer.echo(json.dumps(r))

    @job_app.command("suspend")
    def job_suspend(job_id: str, state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
                    url: Optional[str] = typer.Option(None)):
        """Checkpoint the job, stop its ranks and free its GPUs; it waits until resumed."""
        _op("suspend", job_id, state_dir, url)

    @job_app.command("resume")
    def job_resume(job_id: str, state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
                   url: Optional[str] = typer.Option(None)):
        """Let a suspended job be scheduled again (it continues from its checkpoint)."""
        _op("resume", job_id, state_dir, url)

    @job_app.command("migrate")
    def job_migrate(job_id: str, nodes: Optional[str] = typer.Option(None, help="comma-separated node names (default: other nodes that fit)"),
                    workers: Optional[int] = typer.Option(None, help="another number of workers (resize)"),
                    state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
                    url: Optional[str] = typer.Option(None)):
        """Move a running job to other nodes (checkpoint, stop, restart there)."""
        _op("migrate", job_id, state_dir, url,
            {"nodes": nodes.split(",") if nodes else None, "workers": workers})

    @job_app.command("cancel")
    def job_cancel(job_id: str, state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
                   url: Optional[str] = typer.Option(None)):
        """Stop a job for good."""
        _op("cancel", job_id, state_dir, url)


def _stat_line(s: dict) -> str:
    acc = f" acc {s['accuracy']:.3f}" if s.get("accuracy") is not None else ""
    ep = f" epoch {s['epoch']}" if s.get("epoch") is not None else ""
    return f"step {s['step']:>6}{ep} loss {s['loss']:.4f}{acc} step {1000 * (s['step_s'] or 0):.1f} ms"


def _stop_pids(sd: Path) -> None:
    """SIGTERM the server, then the cluster keeper (it shuts Ray down), then SIGKILL what is left
    of their process groups (Ray agents that outlive a raylet)."""
    upf = sd / "up.json"
    if not upf.exists():
        return
    info = json.loads(upf.read_text())
    ci = sd / "cluster.json"
    ray_tmp = json.loads(ci.read_text()).get("ray_tmpdir") if ci.exists() else None
    for key, grace in (("server_pid", 15.0), ("keeper_pid", 40.0)):
        pid = info.get(key)
        if not pid or not _alive(pid):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            continue
        t0 = time.monotonic()
        while _alive(pid) and time.monotonic() - t0 < grace:
            time.sleep(0.2)
    for key in ("server_pid", "keeper_pid"):
        pid = info.get(key)
        if pid:
            try:
                os.killpg(pid, signal.SIGKILL)     # each was started as its own session leader
            except OSError:
                pass
    if ray_tmp and Path(ray_tmp).name.startswith("rdl"):     # the keeper's private Ray temp dir
        import shutil
        shutil.rmtree(ray_tmp, ignore_errors=True)
    for f in ("up.json", "server.json", "cluster.json"):
        (sd / f).unlink(missing_ok=True)
