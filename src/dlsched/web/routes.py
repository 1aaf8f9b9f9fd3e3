"""The web view's routes, the same for `dlsched server` and `dlsched view`: the page at `/`, login
and logout, the pages' settings (/web/config) and their static files (/web/static/*).

`/` is the login page without a valid session and the app with one (one HTML page; its views
are #/cluster, #/queue, #/queues, #/job/<id>, #/timeline and #/whatif). The app reads the same
JSON API as the CLI (GET /nodes, /jobs, /jobs/{id}, /jobs/{id}/events, /jobs/{id}/stats,
/allocations, /timeline, /queues, /queues/{q}/pending, /whatif) with its session cookie:
`require` accepts a Bearer token for any method and the cookie for reads only
(dlsched.web.auth). `dlsched view` answers the same paths from a simulated run's files (not
/queues nor /whatif: those pages are live only), so one app draws both.

The static files hold no data and are served without a session, as /docs's are; every page is
sent with a Content-Security-Policy that allows scripts, styles and requests to this server only
(no inline script, no outside host), and is never cached.
"""
import importlib.resources
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import parse_qs

# at module level: FastAPI resolves the handlers' annotations (Request, ...) from these globals
from fastapi import Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles

from dlsched.web.auth import Sessions

MAX_LOGIN_BYTES = 4096          # the login form: one token field
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
PAGE_HEADERS = {"Content-Security-Policy": CSP, "Cache-Control": "no-store", "X-Frame-Options": "DENY",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
UNAUTHORIZED = "missing or wrong bearer token (see the token file in the state dir)"
WRONG_TOKEN = '<p class="error" role="alert">That is not the token of this server.</p>'

bearer = HTTPBearer(auto_error=False, description="the token file in the state dir")


def static_dir() -> Path:
    return Path(str(importlib.resources.files("dlsched.web") / "static"))


def require(sessions: Sessions):
    """The API's auth dependency: a Bearer token for any request, a session cookie for reads.
    Declared on HTTPBearer, so the docs page offers "Authorize"."""
    def auth(request: Request, cred: Optional[HTTPAuthorizationCredentials] = Depends(bearer)) -> None:
        token = cred.credentials if cred is not None else None
        user = sessions.who(request.method, token, request.cookies.get(sessions.cookie))
        if user is None:
            raise HTTPException(401, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
        request.state.user = user              # who asks (the routes check what they may do)
    return auth


def page(name: str, status: int = 200, error: str = "") -> HTMLResponse:
    html = (static_dir() / name).read_text().replace("<!--error-->", error)
    return HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)


def install_web(app, sessions: Sessions, config: Callable[[], dict], link_login: bool = False) -> None:
    """Add the web view to an app. `config()`: the pages' settings (mode "live" or "replay",
    title, times). `link_login`: also accept the token in GET /login?token=... (a link that
    `dlsched view` prints; its token lives only as long as that process)."""

    @app.get("/", include_in_schema=False)
    def index(request: Request):
        return page("index.html" if sessions.valid(request.cookies.get(sessions.cookie)) else "login.html")

    @app.post("/login", include_in_schema=False)
    async def login(request: Request):
        body = await _small_body(request)
        return _login(request, sessions, parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0])

    if link_login:
        @app.get("/login", include_in_schema=False)
        def login_link(request: Request, token: str = ""):
            return _login(request, sessions, token)
    else:
        @app.get("/login", include_in_schema=False)
        def login_page():
            """The login page lives at `/` (a bookmark or a guess of /login lands there)."""
            return RedirectResponse("/", status_code=303, headers=PAGE_HEADERS)

    @app.post("/logout", include_in_schema=False)
    def logout(request: Request):
        sessions.revoke(request.cookies.get(sessions.cookie))
        resp = RedirectResponse("/", status_code=303, headers=PAGE_HEADERS)
        resp.delete_cookie(sessions.cookie, path="/", httponly=True, samesite="strict")
        return resp

    @app.get("/web/config", include_in_schema=False, dependencies=[Depends(require(sessions))])
    def web_config():
        return config()

    app.mount("/web/static", StaticFiles(directory=static_dir()), name="web-static")


def _login(request: Request, sessions: Sessions, token: str):
    user = sessions.identify(token)             # each user logs in with their own token
    if user is None:
        return page("login.html", 401, WRONG_TOKEN)
    resp = RedirectResponse("/", status_code=303, headers=PAGE_HEADERS)
    resp.set_cookie(sessions.cookie, sessions.issue(user=user.name), max_age=int(sessions.lifetime_s), path="/",
                    httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return resp


async def _small_body(request: Request) -> bytes:
    """The request body, refused with 413 past MAX_LOGIN_BYTES (read no further)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_LOGIN_BYTES:
            raise HTTPException(413, f"login form over {MAX_LOGIN_BYTES} bytes")
    return body
