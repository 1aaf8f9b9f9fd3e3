"""The API docs page (/docs), served entirely by this server, so it works on air-gapped machines.

FastAPI's default /docs loads Swagger UI's JS and CSS from a CDN (cdn.jsdelivr.net), so on a
machine without internet the page is blank. Here the same Swagger UI files come from the
`fastapi-offline` package (it ships swagger-ui-bundle.js, swagger-ui.css and a favicon, the same
Swagger UI 5 as FastAPI's CDN default) and are served under /docs/static/.

/docs, /docs/oauth2-redirect, /docs/static/* and /openapi.json need no token, unlike the rest of
the API: they describe the API and hold no job data (no specs, paths or outputs).
"""
import importlib.resources
from pathlib import Path

# fastapi at module level (this module is imported only by make_app): FastAPI resolves the
# `request: Request` annotation from these globals
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request

STATIC_URL = "/docs/static"
ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon.png")


def swagger_ui_dir() -> Path:
    """The installed Swagger UI files. `fastapi_offline/static` is that package's layout, not
    its API, so check it here: a change shows up as a clear error at start-up, not a blank page."""
    d = Path(str(importlib.resources.files("fastapi_offline") / "static"))
    missing = [a for a in ASSETS if not (d / a).is_file()]
    if missing:
        raise RuntimeError(f"fastapi-offline has no {', '.join(missing)} in {d}: the /docs page "
                           "cannot be served; reinstall dlsched's dependencies")
    return d


def install_docs(app) -> None:
    """Add /docs (Swagger UI from local files), /docs/static/* and /docs/oauth2-redirect to an
    app made with docs_url=None (FastAPI's own /docs would point at the CDN)."""
    oauth2_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"
    # validatorUrl None: Swagger UI must never call validator.swagger.io (outside requests hang
    # or fail on an air-gapped machine)
    params = {"validatorUrl": None, **(app.swagger_ui_parameters or {})}

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request):
        root = request.scope.get("root_path", "")  # behind a proxy that strips a prefix
        return get_swagger_ui_html(
            openapi_url=root + app.openapi_url, title=f"{app.title} API",
            swagger_js_url=f"{root}{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{STATIC_URL}/favicon.png",
            oauth2_redirect_url=root + oauth2_url, init_oauth=app.swagger_ui_init_oauth,
            swagger_ui_parameters=params)

    # Swagger UI opens this page in the popup of its OAuth2 "Authorize" flow; it is inline HTML
    # with no outside assets
    @app.get(oauth2_url, include_in_schema=False)
    def oauth2_redirect():
        return get_swagger_ui_oauth2_redirect_html()

    app.mount(STATIC_URL, StaticFiles(directory=swagger_ui_dir()), name="docs-static")
