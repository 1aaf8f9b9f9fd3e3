"""`dlsched user add|list`: the runtime's users, each with a token of their own (an admin's
commands; dlsched.runtime.users says who may do what)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from dlsched.cli.client import STATE_HELP, Client, _table, new_app

user_app = new_app(no_args_is_help=True, help="Add and list the users of a server (admins only).")


def register_users(app: typer.Typer) -> None:
    app.add_typer(user_app, name="user")

    @user_app.command("add")
    def add(name: str = typer.Argument(..., help="the new user's name"),
            queues: str = typer.Option("", "--queues", help="comma-separated queues they may submit to (the first "
                                                             "is their default)"),
            admin: bool = typer.Option(False, "--admin", help="may touch every job, move jobs and add users"),
            state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
            url: Optional[str] = typer.Option(None)):
        """Add a user; prints their token on the last line, once.

        Give the token to the user: they set `DLSCHED_TOKEN` to it, or paste it into the web
        view's login page. The server keeps only its SHA-256."""
        qs = [q.strip() for q in queues.split(",") if q.strip()]
        r = Client(state_dir, url).post("/users", {"name": name, "queues": qs, "admin": admin})
        typer.echo(f"user {r['name']} added ({'admin, ' if r['admin'] else ''}queues: "
                   f"{', '.join(r['queues']) or 'none'}); their token (shown once):")
        typer.echo(r["token"])

    @user_app.command("list")
    def list_(state_dir: Optional[Path] = typer.Option(None, help=STATE_HELP),
              url: Optional[str] = typer.Option(None)):
        """List the users: name, queues, admin."""
        rows = Client(state_dir, url).get("/users")
        for r in rows:
            r["queues"] = ", ".join(r["queues"])
        _table(rows, ["name", "queues", "admin"], "users")
