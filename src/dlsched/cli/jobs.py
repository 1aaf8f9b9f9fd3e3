"""The job commands: `dlsched submit|jobs|logs` and `dlsched job show|suspend|resume|migrate|cancel`.

They talk to the server's REST API (dlsched.cli.client). A command on one job prints one line
that says what happened ("j0003 suspended at step 180 (checkpoint at step 180, nothing lost)");
`--json` prints the server's answer instead, for scripts.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer

from dlsched.cli.client import STATE_HELP, Client, _table, new_app
from dlsched.core.errors import DlschedError

job_app = new_app(no_args_is_help=True, help="Inspect or control one job: show, suspend, resume, migrate, cancel.")

# the states a job can be in (GET /jobs), in the order `dlsched jobs --state` documents them
STATES = ("queued", "starting", "running", "suspended", "held", "done", "failed", "cancelled", "rejected")
ENDED = ("done", "failed", "cancelled", "rejected")
JSON_HELP = "print the server's answer as JSON (for scripts)"


def _since(text: str) -> float:
    """--since: a duration back from now (90s, 30m, 6h, 2d) as a UNIX time."""
    from dlsched.runtime.api import parse_duration
    try:
        return time.time() - parse_duration(text)
    except ValueError as e:
        raise DlschedError(f"--since: {e}") from None


def _progress(r: dict) -> str:
    tot = r["total_steps"]
    return f"{r['step']}/{tot}" if tot else f"{r['step']} ({r['epochs']} epochs)"


def _reason(r: dict) -> str:
    """A waiting job's place and why it waits; a starting one's wait; else the server's reason."""
    if r.get("queue_position"):
        return f"#{r['queue_position']}: {r['waiting_reason']}"
    return r.get("waiting_reason") or r.get("reason") or ""


def register_jobs(app: typer.Typer) -> None:
    from dlsched.cli.queues import register_queues
    from dlsched.cli.users import register_users
    app.add_typer(job_app, name="job")
    register_users(app)
    register_queues(app)

    @app.command("submit")
    def submit(spec: Path = typer.Argument(..., help="job spec YAML"),
               state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
               url: Optional[str] = typer.Option(None, help="server URL")):
        """Validate a job spec and submit it; prints the job id.

        The spec is checked here (its fields, and that its program parses and defines main)
        and by the server (that the job fits the cluster); a refused spec is one line, exit 2."""
        from dlsched.runtime.spec import load_job_spec
        s = load_job_spec(spec)          # errors name the file, line and field; nothing is sent
        r = Client(state_dir, url).post("/jobs", {"spec": s.to_dict(), "source": str(spec)})
        typer.echo(r["job_id"])
        if r.get("note"):           # e.g. a policy that needs progress, for a job that reports none
            typer.echo(f"note: {r['note']}", err=True)

    @app.command("jobs")
    def jobs(state: Optional[str] = typer.Option(None, "--state", help="only jobs in these states (comma-separated: "
                                                 + ", ".join(STATES) + ")"),
             user: Optional[str] = typer.Option(None, "--user", help="only this user's jobs"),
             since: Optional[str] = typer.Option(None, "--since", help="only jobs submitted in this span back "
                                                 "from now: 90s, 30m, 6h, 2d"),
             state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
             url: Optional[str] = typer.Option(None)):
        """List jobs: state, progress (the latest step the server has), and why a job waits.

        A waiting job shows its place in the policy's order and the reason; a placed job whose
        ranks have not started yet shows `starting` and how long it has waited for them."""
        states = [s.strip() for s in state.split(",") if s.strip()] if state else []
        bad = [s for s in states if s not in STATES]
        if bad:
            raise DlschedError(f"--state: unknown state {bad[0]!r} (states: {', '.join(STATES)})")
        t0 = _since(since) if since else None
        client = Client(state_dir, url)
        rows = [r for r in client.get("/jobs")
                if (not states or r["state"] in states) and (user is None or r.get("user") == user)
                and (t0 is None or r["submit_time"] >= t0)]
        for r in rows:
            r["progress"] = _progress(r)
            r["reason"] = _reason(r)
        cols = ["job_id", "name", "user", "state", "progress", "workers", "ps", "attempts", "reason"]
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
            cols.insert(5, "predicted_start")
        _table(rows, cols, "jobs")

    @app.command("logs")
    def logs(job_id: str, follow: bool = typer.Option(False, "--follow", "-f", help="keep printing until the job ends"),
             tail: int = typer.Option(20, min=0, help="last N steps (0: none, only the events)"),
             output: bool = typer.Option(False, "--output", help="what the program printed (stdout and stderr) instead"),
             rank: Optional[int] = typer.Option(None, min=0, help="with --output: this rank only (default: every rank)"),
             state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
             url: Optional[str] = typer.Option(None)):
        """A job's events and per-step statistics, or what its ranks printed.

        The statistics are loss, accuracy and step time per step; --output shows the ranks'
        stdout and stderr instead."""
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
        for s in (stats[-tail:] if tail else []):
            typer.echo(_stat_line(s))
        last = stats[-1]["step"] if stats else -1
        while follow:
            j = c.get(f"/jobs/{job_id}")
            for s in c.get(f"/jobs/{job_id}/stats", params={"since": last}):
                typer.echo(_stat_line(s))
                last = s["step"]
            if j["state"] in ENDED:
                typer.echo(f"job {job_id} {j['state']}")
                break
            time.sleep(1.0)

    @job_app.command("show")
    def job_show(job_id: str, state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
                 url: Optional[str] = typer.Option(None)):
        """A job's state, allocation and checkpoints (JSON)."""
        j = Client(state_dir, url).get(f"/jobs/{job_id}")
        typer.echo(json.dumps(j, indent=2))

    def _op(kind: str, job_id: str, state_dir, url, as_json: bool, body=None):
        r = Client(state_dir, url).post(f"/jobs/{job_id}/{kind}", body)
        typer.echo(json.dumps(r) if as_json else op_line(kind, r))

    @job_app.command("suspend")
    def job_suspend(job_id: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
                    state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
                    url: Optional[str] = typer.Option(None)):
        """Checkpoint the job, stop its ranks and free its GPUs; it waits until resumed.

        A program that never calls ctx.steps cannot stop at a mini-batch boundary: it is stopped
        at once, and the line says how many steps since its last checkpoint are lost."""
        _op("suspend", job_id, state_dir, url, as_json)

    @job_app.command("resume")
    def job_resume(job_id: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
                   state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
                   url: Optional[str] = typer.Option(None)):
        """Let a suspended job be scheduled again (it continues from its checkpoint)."""
        _op("resume", job_id, state_dir, url, as_json)

    @job_app.command("migrate")
    def job_migrate(job_id: str, nodes: Optional[str] = typer.Option(None, help="comma-separated node names (default: other nodes that fit)"),
                    workers: Optional[int] = typer.Option(None, help="another number of workers (resize)"),
                    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
                    state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
                    url: Optional[str] = typer.Option(None)):
        """Move a running job to other nodes (checkpoint, stop, restart there).

        A job that is already where it would go is not restarted: the server refuses (409)."""
        _op("migrate", job_id, state_dir, url, as_json,
            {"nodes": nodes.split(",") if nodes else None, "workers": workers})

    @job_app.command("cancel")
    def job_cancel(job_id: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
                   state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
                   url: Optional[str] = typer.Option(None)):
        """Stop a job for good."""
        _op("cancel", job_id, state_dir, url, as_json)


def op_line(kind: str, r: dict) -> str:
    """One line for a command's answer (the server's dict)."""
    jid, state = r["job_id"], r["state"]
    if not r.get("changed"):
        return f"{jid}: nothing to do ({kind}: the job is {state})"
    if kind == "suspend":
        return f"{jid} suspended at step {r.get('step', 0)}: {r.get('detail') or 'checkpointed, nothing lost'}"
    if kind == "resume":
        return f"{jid} resumed: queued, the policy places it again (it continues from its checkpoint)"
    if kind == "migrate":
        return f"{jid} {'resized' if r.get('resized') else 'moved'} to {', '.join(r.get('nodes', []))}"
    return f"{jid} {state}"


def _stat_line(s: dict) -> str:
    acc = f" acc {s['accuracy']:.3f}" if s.get("accuracy") is not None else ""
    ep = f" epoch {s['epoch']}" if s.get("epoch") is not None else ""
    return f"step {s['step']:>6}{ep} loss {s['loss']:.4f}{acc} step {1000 * (s['step_s'] or 0):.1f} ms"


def _clock(t: float) -> str:
    """A UNIX time as a local clock time, with how far from now ("14:05:09 (in 3m 20s)")."""
    d = t - time.time()
    span = abs(d)
    rel = f"{span:.0f}s" if span < 60 else f"{span // 60:.0f}m {span % 60:02.0f}s" if span < 3600 else \
        f"{span // 3600:.0f}h {span % 3600 // 60:02.0f}m"
    return f"{time.strftime('%H:%M:%S', time.localtime(t))} ({'in ' + rel if d >= 0 else rel + ' ago'})"
