"""The runtime's users: who holds which token, which queues they may submit to, who is an admin.

A token is drawn once (`dlsched user add`, POST /users) and shown once; the store keeps only its
SHA-256 (a 256-bit random token needs no slow hash: nothing to guess). The state dir's token, the
one every server had before users existed, is the first admin's (`admin`), so nothing in place
breaks.

What a user may do (docs/tenancy.md, "Users on the runtime"):
- submit to the queues they are allowed on (an admin: to any); a job is its submitter's;
- cancel, suspend and resume their own jobs (an admin: anyone's);
- migrate a job, add users, and read the whole history (GET /log, /export, /state, /report):
  admins only;
- read the cluster's summaries (GET /jobs, /nodes, /allocations, /timeline, /whatif, /metrics,
  /queues): every user, as a shared cluster's queue is public; a job's details (its spec, events,
  statistics and output): its owner and the admins.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass

from dlsched.core.errors import DlschedError

ADMIN = "admin"                       # the first admin: the state dir's token
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_TOKEN_CHARS = 512
MAX_USERS = 100_000

SCHEMA = """CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, token_sha256 TEXT UNIQUE,
  queues TEXT, admin INTEGER, created REAL)"""


@dataclass(frozen=True)
class User:
    name: str
    queues: tuple[str, ...] = ()
    admin: bool = False

    def may_use(self, queue: str) -> bool:
        return self.admin or queue in self.queues

    @property
    def default_queue(self) -> str | None:
        return self.queues[0] if self.queues else None

    def to_dict(self) -> dict:
        return {"name": self.name, "queues": list(self.queues), "admin": self.admin}


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Users:
    """The users table of a runtime store (dlsched.runtime.store.Store)."""

    def __init__(self, store):
        self.store = store
        store._x(SCHEMA)

    def ensure_admin(self, token: str) -> None:
        """The state dir's token is the first admin's (kept when the file's token changes)."""
        self.store._x("INSERT INTO users VALUES (?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET token_sha256=?, admin=1",
                      (ADMIN, digest(token), "[]", 1, time.time(), digest(token)))

    def add(self, name: str, queues: list[str], admin: bool = False) -> str:
        """A new user and their token (returned once; only its digest is kept)."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise DlschedError(f"name: must be 1-64 letters, digits, '-', '_' or '.', got {name!r}")
        if self.get(name) is not None:
            raise DlschedError(f"user {name!r} exists already")
        if len(self.list()) >= MAX_USERS:
            raise DlschedError(f"at most {MAX_USERS} users")
        token = secrets.token_urlsafe(32)
        self.store._x("INSERT INTO users VALUES (?,?,?,?,?)",
                      (name, digest(token), json.dumps(list(queues)), int(admin), time.time()))
        return token

    def get(self, name: str) -> User | None:
        rows = self.store._x("SELECT * FROM users WHERE name=?", (name,))
        return _user(rows[0]) if rows else None

    def identify(self, token: str | None) -> User | None:
        """The user a bearer token stands for (None: no such token)."""
        t = (token or "").strip()
        if not t or len(t) > MAX_TOKEN_CHARS:
            return None
        d = digest(t)
        rows = self.store._x("SELECT * FROM users WHERE token_sha256=?", (d,))
        # the lookup is by digest; compare again in constant time all the same
        return _user(rows[0]) if rows and hmac.compare_digest(rows[0]["token_sha256"], d) else None

    def list(self) -> list[dict]:
        return [{**_user(r).to_dict(), "created": r["created"]}
                for r in self.store._x("SELECT * FROM users ORDER BY created")]


def _user(row) -> User:
    return User(row["name"], tuple(json.loads(row["queues"] or "[]")), bool(row["admin"]))
