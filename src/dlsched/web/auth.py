"""Sessions of the web view: a signed, expiring cookie that stands for the token, never the token.

The browser logs in once by pasting the API token (the token file in the state dir); the server
then sets a cookie (HttpOnly, SameSite=Strict, Path=/) whose value is

    <expiry>.<nonce>.<HMAC-SHA256(key, "<expiry>.<nonce>")>,  key = HMAC-SHA256(token, KEY_LABEL + salt)

where the nonce carries the user the session is for (`<random>~<base64url(user)>`): each user
logs in with their own token (a server with users, dlsched.runtime.users) and the session opens
what that user may read.

and checks it on every request. Why not the token itself in an HttpOnly cookie: cookies are not
isolated by port, so every web server on 127.0.0.1 (another user's included) is sent the cookies
of every other port when the browser visits it. A leaked session value opens only what the
cookie opens (reads: GET and HEAD), for at most SESSION_S, and only until logout (its nonce is
revoked), a new token or a restart of the server (the key follows the token and a salt drawn at
start); the token itself opens everything, for good.
The cookie's name carries the port, so the server and `dlsched view` on other ports of one host
do not overwrite each other's session.

Writes need the token (Authorization: Bearer): a cookie is never accepted for POST, so a page
elsewhere cannot make the browser act with it (no CSRF), whatever SameSite a browser honours.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable

KEY_LABEL = b"dlsched web session v1"
SESSION_S = 12 * 3600            # a session lasts at most this long
MAX_COOKIE_CHARS = 200           # a longer cookie value is refused before any HMAC
MAX_TOKEN_CHARS = 512            # a longer pasted token is refused before any comparison
MAX_REVOKED = 10_000             # logged-out nonces kept until their expiry (oldest dropped first)
READ_METHODS = ("GET", "HEAD")


@dataclass(frozen=True)
class Viewer:
    """Who holds the one token of a server without users (`dlsched view`): may read everything."""
    name: str = "admin"
    admin: bool = True
    queues: tuple = ()


class Sessions:
    """Issue, check and revoke the session cookies of one server (its key token, one port).
    `identify(token)`: the user a bearer token stands for, or None (default: the key token is
    the one user, a Viewer); `lookup(name)`: a session's user by name (default: that Viewer)."""

    def __init__(self, token: str, port: int, lifetime_s: float = SESSION_S,
                 identify: Callable[[str | None], Any] | None = None, lookup: Callable[[str], Any] | None = None):
        self.token, self.lifetime_s = token, lifetime_s
        self.identify = identify or (lambda t: Viewer() if self.token_ok(t) else None)
        self.lookup = lookup or (lambda name: Viewer() if name == Viewer.name else None)
        # a fresh salt per process: a restart ends every session, so a logout (kept in memory) is final
        self.key = hmac.new(token.encode(), KEY_LABEL + secrets.token_bytes(16), hashlib.sha256).digest()
        self.cookie = f"dlsched_session_{port}"
        self.revoked: dict[str, int] = {}        # nonce -> its expiry

    def token_ok(self, candidate: str | None) -> bool:
        """The API token, compared in constant time."""
        c = (candidate or "").strip()
        return bool(c) and len(c) <= MAX_TOKEN_CHARS and hmac.compare_digest(c.encode(), self.token.encode())

    def issue(self, now: float | None = None, user: str = Viewer.name) -> str:
        exp = int((time.time() if now is None else now) + self.lifetime_s)
        nonce = f"{secrets.token_urlsafe(16)}~{base64.urlsafe_b64encode(user.encode()).rstrip(b'=').decode()}"
        return f"{exp}.{nonce}.{self._sign(exp, nonce)}"

    def session_user(self, value: str | None, now: float | None = None):
        """The user of a valid session cookie (None: no valid session, or a user gone since)."""
        if not self.valid(value, now):
            return None
        b = _parts(value)[1].partition("~")[2]
        try:
            name = base64.urlsafe_b64decode(b + "=" * (-len(b) % 4)).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        return self.lookup(name)

    def who(self, method: str, bearer: str | None, cookie: str | None):
        """The caller: the bearer token's user for any request, a session's user for reads."""
        if bearer:
            return self.identify(bearer)
        return self.session_user(cookie) if method in READ_METHODS else None

    def valid(self, value: str | None, now: float | None = None) -> bool:
        parts = _parts(value)
        if parts is None:
            return False
        exp, nonce, sig = parts
        return (hmac.compare_digest(sig.encode(), self._sign(exp, nonce).encode()) and exp > (time.time() if now is None else now)
                and nonce not in self.revoked)

    def revoke(self, value: str | None, now: float | None = None) -> None:
        """Logout: the session is refused from now on, even if a copy of the cookie is kept."""
        if not self.valid(value, now):
            return
        exp, nonce, _ = _parts(value)
        t = time.time() if now is None else now
        self.revoked = {n: e for n, e in self.revoked.items() if e > t}
        while len(self.revoked) >= MAX_REVOKED:
            self.revoked.pop(next(iter(self.revoked)))
        self.revoked[nonce] = exp

    def authorized(self, method: str, bearer: str | None, cookie: str | None) -> bool:
        """A token opens everything its user may do; a session opens reads."""
        return self.who(method, bearer, cookie) is not None

    def _sign(self, exp: int, nonce: str) -> str:
        mac = hmac.new(self.key, f"{exp}.{nonce}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def _parts(value: str | None) -> tuple[int, str, str] | None:
    if not value or len(value) > MAX_COOKIE_CHARS:
        return None
    parts = value.split(".")
    if len(parts) != 3 or not parts[0].isdigit():
        return None
    return int(parts[0]), parts[1], parts[2]
