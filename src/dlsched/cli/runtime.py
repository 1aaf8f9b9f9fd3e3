"""The runtime's cluster commands: `dlsched up|down|server|report|whatif|export|nodes` (the
job commands, `submit|jobs|job|logs`, are in dlsched.cli.jobs).

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

from dlsched.cli.tenancy import TENANCY_OPTION

from dlsched.core.errors import DlschedError

from dlsched.cli.client import STATE_HELP, Client, _alive, _console, _state, _table

DEFAULT_PORT = 8470


def register(app: typer.Typer) -> None:
    from dlsched.cli.jobs import register_jobs
    register_jobs(app)

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
           queues: Optional[Path] = typer.Option(None, "--queues", help=QUEUES_HELP),
           tenancy: str = TENANCY_OPTION,
           timeout_s: float = typer.Option(180.0, min=1.0, help="give up if not up in this time")):
        """Start a local Ray cluster of virtual GPU nodes and the server."""
        from dlsched.runtime.server import ensure_token, holder_text, lock_holder
        check_policy(policy, policy_config)  # before anything starts
        from dlsched.cli.tenancy import load_tenancy
        load_tenancy(queues, tenancy, ())    # a bad queue file or mode: one line, before anything starts
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
        if queues is not None:
            cmd += ["--queues", str(queues.resolve())] + (["--tenancy", tenancy] if tenancy else [])
        server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(logs / "server.log", "ab"),
                                  stderr=subprocess.STDOUT, start_new_session=True, env=env)
        upf.write_text(json.dumps({"keeper_pid": keeper.pid, "server_pid": server.pid}))
        with con.status("starting the server ..."):
            while True:
                if server.poll() is not None or time.monotonic() - t0 > timeout_s:
                    _stop_pids(sd)
                    raise DlschedError(f"the server did not start: {_why_not(logs / 'server.log', port)}; "
                                       f"see {logs / 'server.log'}")
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
        """Stop the server of this state dir and the Ray cluster `up` started for it.

        The server is stopped whoever started it (`up` or by hand); the Ray cluster only when
        `dlsched up` started it, and nothing else."""
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
               queues: Optional[Path] = typer.Option(None, "--queues", help=QUEUES_HELP),
               tenancy: str = TENANCY_OPTION,
               max_grace_s: float = typer.Option(300.0, "--max-grace-s", min=0.0, max=3600.0,
                                                 help="the longest SIGTERM grace period a command job may ask for (grace_s)"),
               script_root: list[Path] = typer.Option([], "--script-root",
                                                      help="a directory a torchrun job's script may lie in, beside its workdir (repeatable)"),
               embedded: bool = typer.Option(False, hidden=True)):
        """Run the scheduler with a RayBackend and the REST API (blocks)."""
        import logging
        from dlsched.runtime.server import Server
        settings = check_policy(policy, policy_config)
        if any(not r.is_dir() for r in script_root):
            raise DlschedError(f"--script-root: no such directory: {next(r for r in script_root if not r.is_dir())}")
        from dlsched.cli.tenancy import load_tenancy
        tree, _ = load_tenancy(queues, tenancy, ())
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
                   embedded=embedded, namespace=namespace, queues=tree, tenancy=tenancy,
                   cleanup_on_exit=cleanup_on_exit, max_grace_s=max_grace_s,   # takes the state dir's lock, or refuses
                   script_roots=tuple(str(r.resolve()) for r in script_root))
        sock = s.bind()                                  # a port in use is refused before Ray
        counts = s.start()
        logging.getLogger("dlsched.runtime").info("server up: policy %s, recovered %s", policy, counts)
        s.serve(sock)

    @app.command("report")
    def report(out: Path = typer.Option(..., "--out", help="folder for summary.json, the Parquet tables and report.html"),
               force: bool = typer.Option(False, "--force", help="replace the contents of a non-empty --out"),
               state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
               url: Optional[str] = typer.Option(None)):
        """The real run so far, reported as a simulation is.

        Writes summary.json, the jobs and timeline Parquet tables and report.html, computed from
        the server's event log; and calibration.json, the step times and switch costs it
        measured (the simulator's input to replay it)."""
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

    @app.command("whatif")
    def whatif(policies: Optional[str] = typer.Option(None, "--policies", "-p",
                                                     help="comma-separated policies (default: the server's)"),
               horizon: str = typer.Option("6h", help="utilisation window: 90s, 30m, 6h, 2d"),
               state: Optional[Path] = typer.Option(None, "--state",
                                                    help="a dlsched-state file instead of the live server"),
               save_state: Optional[Path] = typer.Option(None, help="also write the live state document here"),
               as_json: bool = typer.Option(False, "--json", help="the whole answer as JSON"),
               queues: Optional[str] = typer.Option(None, "--queues", help="a queue file: each queue's "
                                                    "wait under it, beside the server's own queues"),
               tenancy: Optional[str] = typer.Option(None, "--tenancy", help="the mode with --queues "
                                                     "(default: the server's)"),
               state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
               url: Optional[str] = typer.Option(None)):
        """What if: simulate each policy from the cluster's state now (or a state file).

        Prints each policy's mean wait, mean JCT and utilisation, and each waiting job's
        predicted start and finish."""
        from dlsched.runtime.server import parse_duration
        try:
            h = parse_duration(horizon)
        except ValueError as e:
            raise DlschedError(f"--horizon: {e}") from None
        from dlsched.cli.tenancy import load_tenancy
        load_tenancy(queues, tenancy, [])          # the file and the mode, before the server is asked
        names = [p.strip() for p in (policies or "").split(",") if p.strip()]
        if state is not None:
            from dlsched.runtime.whatif import predict
            from dlsched.sim.midflight import load_state
            import yaml
            load_state(state)                        # errors name the file and the field
            doc = yaml.safe_load(state.read_text())
            names = names or [doc.get("policy") or "fifo"]
            _check_policies(names)
            ans = (predict(doc, names, h, runtime=False) if queues is None
                   else _whatif_queues(doc, names, h, queues, tenancy, as_json))
            if queues is not None:
                return
        elif queues is not None:
            doc = Client(state_dir, url).get("/state")
            _whatif_queues(doc, names or [doc.get("policy") or "fifo"], h, queues, tenancy, as_json)
            return
        else:
            client = Client(state_dir, url)
            if save_state is not None:
                from dlsched.runtime.cluster import write_private
                try:
                    write_private(save_state, json.dumps(client.get("/state"), indent=1))
                except OSError as e:
                    raise DlschedError(f"--save-state {save_state}: {e.strerror or e}") from None
            params = {"horizon": horizon}
            if names:
                params["policies"] = ",".join(names)
            ans = client.get("/whatif", params=params)
        if as_json:
            typer.echo(json.dumps(ans, indent=1))
            return
        _whatif_tables(ans)

    def _whatif_queues(doc, names, h, queues, tenancy, as_json):
        from dlsched.cli.tenancy import load_tenancy, whatif_queues
        load_tenancy(queues, tenancy or doc.get("tenancy") or "kueue", ())     # a bad file: one line
        ans = whatif_queues(doc, names, h, queues, tenancy)
        if as_json:
            typer.echo(json.dumps(ans, indent=1))
            return
        fmt = lambda s: "-" if s is None else f"{s:,.0f} s"  # noqa: E731
        _table([{"policy": r["policy"], "queue": r["queue"], "now": fmt(r["wait_now_s"]),
                 "with the new queues": fmt(r["wait_with_new_queues_s"])} for r in ans["rows"]],
               ["policy", "queue", "now", "with the new queues"],
               f"what if the queues were {queues} ({ans['mode']}): mean wait of the waiting jobs")

    @app.command("export")
    def export(out: Path = typer.Option(..., "--out", "-o", help="workload file: .csv, .parquet or .jsonl (.gz)"),
               state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
               url: Optional[str] = typer.Option(None)):
        """Write the live history as a workload in the common schema.

        Each job's arrival and its measured run time: replay it under any policy with
        `dlsched simulate -w FILE`."""
        from dlsched.cli.main import _check_out
        from dlsched.workload.io import save_workload
        from dlsched.workload.schema import job_from_row
        _check_out(out, file=True)                   # an unknown extension or a folder that refuses: one line, first
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


def load_plugins() -> None:
    """Import the modules named in $DLSCHED_PLUGINS (comma-separated): a site's own policies,
    registered as the built-in ones are, without editing the package."""
    import importlib
    for mod in filter(None, (m.strip() for m in os.environ.get("DLSCHED_PLUGINS", "").split(","))):
        try:
            importlib.import_module(mod)
        except Exception as e:
            raise DlschedError(f"DLSCHED_PLUGINS: cannot import {mod}: {type(e).__name__}: {e}") from None


QUEUES_HELP = "the queue tree (YAML: queues with quotas); default: one queue, `default`, with no quota"
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
            raise DlschedError(f"--port {port}: cannot listen on 127.0.0.1:{port}: {e.strerror}"
                               f"{port_holder(port)}") from None


def port_holder(port: int) -> str:
    """Who listens on TCP `port`, as a suffix for an error line: ' (taken by pid N: its command
    line)', read from /proc (Linux); '' where it cannot be told."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:   # LISTEN
                        inodes.add(f"socket:[{parts[9]}]")
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    if not inodes:
        return ""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                return f" (taken by pid {pid}: {cmd[:200]})"
        except OSError:
            continue
    return " (taken by a process this user cannot see)"


def _why_not(log: Path, port: int) -> str:
    """Why a server `up` started did not come up: its last error line (the CLI's `error: ...`),
    and who holds the port when that is the reason."""
    try:
        lines = log.read_text(errors="replace").splitlines()[-200:]
    except OSError:
        lines = []
    err = next((ln[len("error: "):] for ln in reversed(lines) if ln.startswith("error: ")), "")
    if "cannot listen" in err or not err:
        held = port_holder(port)
        if held:
            return f"port {port} is taken{held}"
    return err or "it exited without saying why"


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
