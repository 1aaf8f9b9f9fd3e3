"""What every client command shares: the state dir, the server's URL and token, a console, and
the REST client (`Client`) whose errors are one line a user can act on."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from dlsched.core.errors import DlschedError, Refused

STATE_HELP = "state dir (db, checkpoints, logs, token); default $DLSCHED_STATE_DIR or ~/.dlsched"


def new_app(**kw):
    """A Typer app (or sub-app) whose help is Markdown: a command's docstring is a one-line
    summary, then paragraphs that rich wraps to the terminal (a docstring's own line breaks are
    not kept; a list or a code block still is)."""
    import typer
    return typer.Typer(rich_markup_mode="markdown", **kw)


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
        # $DLSCHED_TOKEN (a user's own token) over the state dir's (the operator's)
        tp = sd / "token"
        self.token = os.environ.get("DLSCHED_TOKEN") or (tp.read_text().strip() if tp.exists() else "")

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
            if r.status_code in (413, 422):        # the input was refused: the server names the field
                raise DlschedError(str(detail))
            if r.status_code in (403, 404, 409):   # refused or not there: the server's reason, exit 1
                raise Refused(str(detail))
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

