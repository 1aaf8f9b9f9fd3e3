"""`dlsched queues [QUEUE]`: each queue's quota, use and jobs (GET /queues), or one queue's waiting
jobs with their places and why each waits (GET /queues/{queue}/pending). Every user may run it;
`--json` prints the server's answer instead, for scripts."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import typer

from dlsched.cli.client import STATE_HELP, Client, _table

JSON_HELP = "print the server's answer as JSON (for scripts)"
MAX_LIMIT = 1000                       # the server's page size (dlsched.runtime.queues_api)
QUEUE_ARG = typer.Argument(None, metavar="QUEUE", help="a queue: list its waiting jobs")
OFFSET_OPTION = typer.Option(0, "--offset", min=0, help="with QUEUE: skip this many waiting jobs")
LIMIT_OPTION = typer.Option(MAX_LIMIT, "--limit", min=1, max=MAX_LIMIT, help="with QUEUE: list at most this many")
JSON_OPTION = typer.Option(False, "--json", help=JSON_HELP)
STATE_OPTION = typer.Option(None, help=STATE_HELP)
URL_OPTION = typer.Option(None, help="server URL")


def register_queues(app: typer.Typer) -> None:

    @app.command("queues")
    def queues(queue: str | None = QUEUE_ARG, offset: int = OFFSET_OPTION, limit: int = LIMIT_OPTION,
               as_json: bool = JSON_OPTION, state_dir: Path | None = STATE_OPTION,
               url: str | None = URL_OPTION):
        """List the queues: quota, GPUs used, entitled and borrowed, jobs running and pending.

        With a QUEUE (a leaf of the queue tree), list its waiting jobs instead, in the last
        round's order: the place of each in its queue and among the jobs of its parent's
        queues (the cluster's, for a top-level queue), and why it waits.

        A server started without `--queues` has one queue, `default`, with no quota."""
        c = Client(state_dir, url)
        if queue is None:
            ans = c.get("/queues")
            if as_json:
                typer.echo(json.dumps(ans, indent=2))
                return
            _table([queue_row(q) for q in ans["queues"]],
                   ["queue", "parent", "nominal", "limit", "used", "entitled", "borrowed", "running", "pending"],
                   f"queues (GPUs; tenancy {ans['mode']})" if ans["mode"] else "queues (GPUs; no quotas)")
            return
        ans = c.get(f"/queues/{quote(queue, safe='')}/pending", params={"offset": offset, "limit": limit})
        if as_json:
            typer.echo(json.dumps(ans, indent=2))
            return
        items = ans["items"]
        if not items:
            typer.echo(f"no job waits in queue {queue}" if not ans["total"] else
                       f"{ans['total']} jobs wait in queue {queue}; none after --offset {offset}")
            return
        shown = "" if len(items) == ans["total"] else \
            f", {offset + 1} to {offset + len(items)} shown"
        _table([{**r, "#queue": r["position_in_queue"], "#parent": r["position_in_parent"],
                 "job": r["job_id"]} for r in items],
               ["#queue", "#parent", "job", "user", "gpus", "reason"],
               f"queue {queue}: {ans['total']} waiting{shown}")


def queue_row(q: dict) -> dict:
    """A row of the table: GPU quota (limit: `limit`, else nominal + borrowing_limit, else none),
    use, entitlement, borrowing, jobs."""
    gq = q["quotas"].get("gpu") or {}
    nominal = gq.get("nominal")
    if gq.get("limit") is not None:
        limit = gq["limit"]
    elif gq.get("borrowing_limit") is not None:
        limit = (nominal or 0.0) + gq["borrowing_limit"]
    else:
        limit = None
    return {"queue": q["name"], "parent": q["parent"] or "-", "nominal": _num(nominal), "limit": _num(limit),
            "used": _num(q["usage"].get("gpu", 0.0)), "entitled": _num(q["entitled_gpus"]),
            "borrowed": _num(q["borrowed_gpus"]), "running": q["running"], "pending": q["pending"]}


def _num(x) -> str:
    return "-" if x is None else f"{x:.4g}"
