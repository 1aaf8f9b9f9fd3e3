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
    def up(nodes: int = typer.Option(4, min=1, max=64, help="virtual GPU nodes"),
           gpus_per_node: int = typer.Option(2, min=0, max=16, help="GPUs per node"),
           cpus_per_node: int = typer.Option(2, min=1, max=256), gpu_type: str = typer.Option("fake-gpu"),
           policy: str = typer.Option("fifo", help="a registered policy (dlsched policies)"),
           port: int = typer.Option(DEFAULT_PORT, min=1, max=65535), warm_per_node: Optional[int] = typer.Option(
               None, min=0, max=64, help="warm rank workers per node (default: its GPU count)"),
           state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
           policy_config: Optional[Path] = typer.Option(None, "--policy-config", help=POLICY_CONFIG_HELP),
           round_s: Optional[float] = typer.Option(None, min=0.1, help=ROUND_HELP),
           timeout_s: float = typer.Option(180.0, min=1.0, help="give up if not up in this time")):
        """Start a local Ray cluster of virtual GPU nodes and the server."""
        from dlsched.runtime.server import ensure_token, holder_text, lock_holder
        check_policy(policy, policy_config)  # before anything starts
        sd = _state(state_dir)
        if lock_holder(sd) is not None:
            raise DlschedError(f"a server is already running on state dir {sd} ({holder_text(sd)}); "
                               "run `dlsched down` first")
        upf = sd / "up.json"
        if upf.exists():
            info = json.loads(upf.read_text())
            if any(_alive(p) for p in (info.get("keeper_pid"), info.get("server_pid")) if p):
                raise DlschedError(f"already up (see {upf}); run `dlsched down` first")
        _port_free(port)
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
        from dlsched.runtime.cluster import ray_client_env
        env = {**os.environ, **ray_client_env(ci)}     # loopback only, Ray's token auth on
        cmd = [sys.executable, "-m", "dlsched.cli.main", "server", "--ray-address", ci["address"],
               "--state-dir", str(sd), "--policy", policy, "--port", str(port), "--embedded"]
        if warm_per_node is not None:
            cmd += ["--warm-per-node", str(warm_per_node)]
        if policy_config is not None:
            cmd += ["--policy-config", str(policy_config.resolve())]
        if round_s is not None:
            cmd += ["--round-s", str(round_s)]
        server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(logs / "server.log", "ab"),
                                  stderr=subprocess.STDOUT, start_new_session=True, env=env)
        upf.write_text(json.dumps({"keeper_pid": keeper.pid, "server_pid": server.pid}))
        with con.status("starting the server ..."):
            while True:
                if server.poll() is not None or time.monotonic() - t0 > timeout_s:
                    _stop_pids(sd)
                    raise DlschedError(f"the server did not start; see {logs / 'server.log'}")
                try:
                    h = Client(sd).get("/health")
                except DlschedError:
                    time.sleep(0.3)
                    continue
                if h.get("pid") != server.pid:          # another process answers on that port
                    _stop_pids(sd)
                    raise DlschedError(f"port {port} is answered by another server (pid {h.get('pid')}); "
                                       f"see {logs / 'server.log'}")
                break
        typer.echo(f"up in {time.monotonic() - t0:.0f} s: {nodes} nodes x {gpus_per_node} GPUs, policy {policy}, "
                   f"API http://127.0.0.1:{port} (token in {sd / 'token'})")

    @app.command("down")
    def down(state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP)):
        """Stop the server holding this state dir (started by `up` or by hand) and the Ray
        cluster that `dlsched up` started for it (nothing else)."""
        from dlsched.runtime.server import lock_holder
        sd = _state(state_dir)
        if not (sd / "up.json").exists() and lock_holder(sd) is None:
            typer.echo(f"nothing to stop (no server holds {sd}, no cluster was started there)")
            return
        stopped = _stop_pids(sd)
        typer.echo("stopped " + (", ".join(stopped) if stopped else "nothing (already gone)"))

    @app.command("server")
    def server(policy: str = typer.Option("fifo", help="a registered policy"),
               ray_address: Optional[str] = typer.Option(None, help="HOST:PORT of a Ray cluster (default: the one `dlsched up` started)"),
               host: str = typer.Option("127.0.0.1", help="listen address"),
               port: int = typer.Option(DEFAULT_PORT, min=1, max=65535),
               state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
               warm_per_node: Optional[int] = typer.Option(None, min=0, max=64, help="warm rank workers per node"),
               round_s: Optional[float] = typer.Option(None, min=0.1, help=ROUND_HELP),
               policy_config: Optional[Path] = typer.Option(None, "--policy-config", help=POLICY_CONFIG_HELP),
               namespace: str = typer.Option("dlsched", help="Ray namespace of this server's workers and groups"),
               cleanup_on_exit: bool = typer.Option(False, help="on a clean stop, stop every job and worker (default: leave them for the next server)"),
               embedded: bool = typer.Option(False, hidden=True)):
        """Run the scheduler with a RayBackend and the REST API (blocks)."""
        import logging
        from dlsched.runtime.server import Server
        settings = check_policy(policy, policy_config)
        sd = _state(state_dir)
        if ray_address is None:
            ci = sd / "cluster.json"
            if not ci.exists():
                raise DlschedError("give --ray-address HOST:PORT, or start a local cluster with `dlsched up`")
            cinfo = json.loads(ci.read_text())
            ray_address = cinfo["address"]
            embedded = True
            from dlsched.runtime.cluster import ray_client_env
            os.environ.update(ray_client_env(cinfo))      # before Ray is imported
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        s = Server(sd, policy=policy, ray_address=ray_address, host=host, port=port,
                   warm_per_node=warm_per_node, round_s=round_s, policy_settings=settings,
                   embedded=embedded, namespace=namespace,
                   cleanup_on_exit=cleanup_on_exit)      # takes the state dir's lock, or refuses
        sock = s.bind()                                  # a port in use is refused before Ray
        counts = s.start()
        logging.getLogger("dlsched.runtime").info("server up: policy %s, recovered %s", policy, counts)
        s.serve(sock)

    @app.command("report")
    def report(out: Path = typer.Option(..., "--out", help="folder for summary.json, the Parquet tables and report.html"),
               force: bool = typer.Option(False, "--force", help="replace the contents of a non-empty --out"),
               state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
               url: Optional[str] = typer.Option(None)):
        """The real run so far as a simulation reports one: summary.json, jobs / timeline Parquet
        and report.html, computed from the server's event log; and calibration.json, the step
        times and switch costs it measured (the simulator's input to replay it)."""
        from dlsched.cli.main import _check_out, _clear_out
        _check_out(out, force)
        data = Client(state_dir, url).get("/report")
        import pandas as pd

        from dlsched.metrics.result import SimResult
        from dlsched.report import write_run_report
        sm = data["summary"]
        res = SimResult(sm.get("policy") or "runtime", sm.get("cluster") or "ray", "runtime", int(sm.get("total_gpus") or 0),
                        pd.DataFrame(data["jobs"]), sm, pd.DataFrame(data["timeline"]),
                        pd.DataFrame(columns=["time_s", "wall_s", "queued_jobs"]))
        if force:
            _clear_out(out)
        res.save(out)
        path = write_run_report(res, out)
        if data.get("calibration"):   # what the simulator needs to replay this run (dlsched.workload.calibrated)
            from dlsched.runtime.calibration import write_calibration
            write_calibration(out / "calibration.json", data["calibration"])
        jct = "-" if sm["mean_jct_s"] is None else f"{sm['mean_jct_s']:.1f} s"
        typer.echo(f"{sm['jobs']} jobs, {sm['finished']} finished; mean JCT {jct}; report: {path}")

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
        client = Client(state_dir, url)
        rows = client.get("/jobs")
        for r in rows:
            tot = r["total_steps"]
            r["progress"] = f"{r['step']}/{tot}" if tot else f"{r['step']} ({r['epochs']} epochs)"
            # a waiting job: its place in the policy's order and why it waits ("why pending?")
            if r.get("queue_position"):
                r["reason"] = f"#{r['queue_position']}: {r['waiting_reason']}"
        cols = ["job_id", "name", "state", "progress", "workers", "ps", "attempts", "reason"]
        if any(r.get("queue_position") for r in rows):
            # the current policy's predicted start of each waiting job (simulated from the live
            # state: GET /whatif); the listing stands without it where the simulation fails
            try:
                pred = next(iter(client.get("/whatif")["policies"].values()))["jobs"]
            except DlschedError as e:
                pred = {}
                typer.echo(f"(no predicted starts: {e})", err=True)
            for r in rows:
                j = pred.get(r["job_id"]) if r.get("queue_position") else None
                r["predicted_start"] = _clock(j["start_time"]) if j and j["start_time"] is not None else ""
            cols.insert(4, "predicted_start")
        _table(rows, cols, "jobs")

    @app.command("whatif")
    def whatif(policies: Optional[str] = typer.Option(None, "--policies", "-p",
                                                     help="comma-separated policies (default: the server's)"),
               horizon: str = typer.Option("6h", help="utilisation window: 90s, 30m, 6h, 2d"),
               state: Optional[Path] = typer.Option(None, "--state",
                                                    help="a dlsched-state file instead of the live server"),
               save_state: Optional[Path] = typer.Option(None, help="also write the live state document here"),
               as_json: bool = typer.Option(False, "--json", help="the whole answer as JSON"),
               state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
               url: Optional[str] = typer.Option(None)):
        """What if: simulate each policy from the cluster's state now (or a state file): mean
        wait, mean JCT, utilisation, and each waiting job's predicted start and finish."""
        from dlsched.runtime.server import parse_duration
        try:
            h = parse_duration(horizon)
        except ValueError as e:
            raise DlschedError(f"--horizon: {e}") from None
        names = [p.strip() for p in (policies or "").split(",") if p.strip()]
        if state is not None:
            from dlsched.runtime.whatif import predict
            from dlsched.sim.midflight import load_state
            import yaml
            load_state(state)                        # errors name the file and the field
            doc = yaml.safe_load(state.read_text())
            names = names or [doc.get("policy") or "fifo"]
            _check_policies(names)
            ans = predict(doc, names, h, runtime=False)
        else:
            client = Client(state_dir, url)
            if save_state is not None:
                from dlsched.runtime.cluster import write_private
                write_private(save_state, json.dumps(client.get("/state"), indent=1))
            params = {"horizon": horizon}
            if names:
                params["policies"] = ",".join(names)
            ans = client.get("/whatif", params=params)
        if as_json:
            typer.echo(json.dumps(ans, indent=1))
            return
        _whatif_tables(ans)

    @app.command("export")
    def export(out: Path = typer.Option(..., "--out", "-o", help="workload file: .csv, .parquet or .jsonl (.gz)"),
               state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
               url: Optional[str] = typer.Option(None)):
        """The live history as a workload in the common schema (replay it under any policy with
        `dlsched simulate -w FILE`): each job's arrival and its measured run time."""
        from dlsched.workload.io import save_kind, save_workload
        from dlsched.workload.schema import job_from_row
        save_kind(out)                               # an unknown extension: one line, before asking
        ans = Client(state_dir, url).get("/export")
        jobs = [job_from_row(r) for r in ans["jobs"]]
        if not jobs:
            raise DlschedError("no job has run yet: nothing to export")
        save_workload(jobs, out)
        typer.echo(f"{len(jobs)} jobs written to {out} ({ans['skipped']} not written: never ran a step)")

    @app.command("nodes")
    def nodes(state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
              url: Optional[str] = typer.Option(None)):
        """List the cluster's nodes (from Ray) with free GPUs."""
        _table(Client(state_dir, url).get("/nodes"),
               ["name", "rack", "gpu_type", "gpus", "free_gpus", "up", "schedulable", "warm_workers"], "nodes")

    @app.command("logs")
    def logs(job_id: str, follow: bool = typer.Option(False, "--follow", "-f", help="keep printing until the job ends"),
             tail: int = typer.Option(20, min=0, help="last N steps"),
             output: bool = typer.Option(False, "--output", help="what the program printed (stdout and stderr) instead"),
             rank: Optional[int] = typer.Option(None, min=0, help="with --output: this rank only (default: every rank)"),
             state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
             url: Optional[str] = typer.Option(None)):
        """A job's events and per-step statistics (loss, accuracy, step time), or with --output
        what its ranks printed."""
        c = Client(state_dir, url)
        if output:
            first = c.get(f"/jobs/{job_id}/output", params={"rank": rank or 0})
            for r in ([rank] if rank is not None else first["ranks"] or [0]):
                text = first["text"] if r == first["rank"] else c.get(f"/jobs/{job_id}/output", params={"rank": r})["text"]
                typer.echo(f"==> {job_id} rank {r} <==")
                typer.echo(text.rstrip("\n") if text else "(nothing printed)")
            return
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


def load_plugins() -> None:
    """Import the modules named in $DLSCHED_PLUGINS (comma-separated): a site's own policies,
    registered as the built-in ones are, without editing the package."""
    import importlib
    for mod in filter(None, (m.strip() for m in os.environ.get("DLSCHED_PLUGINS", "").split(","))):
        try:
            importlib.import_module(mod)
        except Exception as e:
            raise DlschedError(f"DLSCHED_PLUGINS: cannot import {mod}: {type(e).__name__}: {e}") from None


POLICY_CONFIG_HELP = "YAML of policy settings, as `dlsched simulate --policy-config` takes"
ROUND_HELP = ("seconds between periodic rounds (default: the policy's own, e.g. gandiva's 60 s quantum or "
              "optimus's 60 s re-allocation; 30 s for the others, whose rounds are event-driven)")


def check_policy(name: str, policy_config: Path | None = None) -> dict:
    """A typo in --policy, a bad --policy-config or a policy the runtime cannot carry out is
    refused before anything starts, on one line. Returns the policy's settings from the config
    ({} without one)."""
    import dlsched.policies  # noqa: F401  (registers every policy)
    from dlsched.scheduler.framework import REGISTRY
    load_plugins()
    if name not in REGISTRY.names("profile"):
        raise DlschedError(f"--policy: unknown policy {name!r} (known: {', '.join(REGISTRY.names('profile'))})")
    from dlsched.api import load_policy_config
    from dlsched.runtime.progress import RUNTIME_CAPABILITIES
    from dlsched.scheduler.backend import capability_gap
    from dlsched.scheduler.profile import build_profile
    settings = load_policy_config(policy_config).get(name, {})
    gap = capability_gap(build_profile(name, settings, runtime=True).needs(), RUNTIME_CAPABILITIES, "runtime")
    if gap:
        raise DlschedError(f"--policy {name}: needs what the real runtime cannot do yet: {gap} "
                           f"(`dlsched simulate` runs every policy)")
    return settings


def _port_free(port: int) -> None:
    import socket
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise DlschedError(f"--port {port}: cannot listen on 127.0.0.1:{port}: {e.strerror}") from None


def _stop_pids(sd: Path) -> list[str]:
    """SIGTERM the server holding the state dir (whoever started it) and the one `up` started,
    then the cluster keeper (it shuts Ray down), then SIGKILL what is left of their process
    groups (Ray agents that outlive a raylet). Returns what was stopped."""
    from dlsched.runtime.server import lock_holder
    upf = sd / "up.json"
    info = json.loads(upf.read_text()) if upf.exists() else {}
    holder = lock_holder(sd) or {}
    ci = sd / "cluster.json"
    cinfo = json.loads(ci.read_text()) if ci.exists() else {}
    ray_tmp = cinfo.get("ray_tmpdir")
    targets = [("server", holder.get("pid"), 15.0), ("server", info.get("server_pid"), 15.0),
               ("cluster", info.get("keeper_pid") or cinfo.get("pid"), 40.0)]
    stopped = []
    for what, pid, grace in targets:
        if not pid or not _alive(pid) or f"{what} (pid {pid})" in stopped:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            continue
        stopped.append(f"{what} (pid {pid})")
        t0 = time.monotonic()
        while _alive(pid) and time.monotonic() - t0 < grace:
            time.sleep(0.2)
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    for pid in (info.get("server_pid"), info.get("keeper_pid") or cinfo.get("pid")):
        if pid:
            try:
                os.killpg(pid, signal.SIGKILL)     # `up` started each as its own session leader
            except OSError:
                pass
    if ray_tmp and Path(ray_tmp).name.startswith("rdl"):     # the keeper's private Ray temp dir
        import shutil
        shutil.rmtree(ray_tmp, ignore_errors=True)
    for f in ("up.json", "server.json", "cluster.json"):
        (sd / f).unlink(missing_ok=True)
    return stopped


def _clock(t: float) -> str:
    """A UNIX time as a local clock time, with how far from now ("14:05:09 (in 3m 20s)")."""
    d = t - time.time()
    span = abs(d)
    rel = f"{span:.0f}s" if span < 60 else f"{span // 60:.0f}m {span % 60:02.0f}s" if span < 3600 else \
        f"{span // 3600:.0f}h {span % 3600 // 60:02.0f}m"
    return f"{time.strftime('%H:%M:%S', time.localtime(t))} ({'in ' + rel if d >= 0 else rel + ' ago'})"


def _check_policies(names: list[str]) -> None:
    import dlsched.policies  # noqa: F401 (registers them)
    from dlsched.scheduler.framework import REGISTRY
    bad = [p for p in names if p not in REGISTRY.names("profile")]
    if bad:
        raise DlschedError(f"--policies: unknown policy {bad[0]!r} (see dlsched policies)")


def _whatif_tables(ans: dict) -> None:
    from rich.table import Table
    con = _console()
    if not any(p["jobs"] for p in ans["policies"].values()):
        con.print("no job is running or waiting: nothing to simulate")
        return
    t = Table(title=f"what if (from now, utilisation over {ans['horizon_s'] / 3600:g} h)")
    for c in ("policy", "mean wait", "mean JCT", "utilisation", "last job done"):
        t.add_column(c)
    for name, p in ans["policies"].items():
        t.add_row(name, _span(p["mean_wait_s"]), _span(p["mean_jct_s"]), f"{p['utilisation']:.1%}",
                  _span(p["makespan_s"], "in "))
    con.print(t)
    pols = list(ans["policies"])
    first = ans["policies"][pols[0]]["jobs"]
    waiting = sorted((j for j, v in first.items() if v["start_s"] is None or v["start_s"] >= 0),
                     key=lambda j: (first[j]["submit_s"], j))
    if not waiting:
        return
    t = Table(title="waiting jobs: predicted start / finish (from now)")
    t.add_column("job")
    for name in pols:
        t.add_column(name)
    for j in waiting:
        t.add_row(j + (" *" if first[j].get("estimated") else ""),
                  *[f"{_span(ans['policies'][p]['jobs'][j]['start_s'], 'in ')} / "
                    f"{_span(ans['policies'][p]['jobs'][j]['finish_s'], 'in ')}" for p in pols])
    con.print(t)
    if any(first[j].get("estimated") for j in waiting):
        con.print("* run time estimated: its model's step time was never measured here")


def _span(s, prefix: str = "") -> str:
    if s is None:
        return "-"
    s = float(s)
    txt = f"{s:.0f}s" if s < 60 else f"{s / 60:.1f}m" if s < 3600 else f"{s / 3600:.2f}h"
    return prefix + txt
