"""/docs of a real `dlsched server` in headless Chromium, as on an air-gapped machine: Swagger UI
must render the API's operations from assets the server itself serves (runtime/apidocs.py).

Chromium resolves no host but 127.0.0.1 (--host-resolver-rules), so a CDN asset would fail to load
and the page would stay blank; its net log (--log-net-log) then shows every request the page made,
and all must go to 127.0.0.1. Chromium is required: `make browser` installs it; without it the
test skips locally and fails in CI (CI=true), so CI cannot pass without running it."""
from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

import httpx
from headless import dump_dom, page_requests

ASSETS = ("/docs/static/swagger-ui-bundle.js", "/docs/static/swagger-ui.css", "/docs/static/favicon.png")


def test_docs_render_offline_in_chromium(chromium, runtime, tmp_path):
    url = runtime.server.url
    # no token anywhere: the docs, their assets and the schema are public (they hold no data)
    html = httpx.get(url + "/docs", timeout=30)
    assert html.status_code == 200, html.text
    for a in ASSETS + ("/openapi.json", "/docs/oauth2-redirect"):
        r = httpx.get(url + a, timeout=30)
        assert r.status_code == 200 and r.content, (a, r.status_code)
    # the served page names only local URLs (relative, or 127.0.0.1)
    refs = re.findall(r"""(?:src|href)=["']([^"']+)|url:\s*'([^']+)'""", html.text)
    refs = [a or b for a, b in refs]
    assert set(ASSETS) <= set(refs) and "/openapi.json" in refs, refs
    assert all(urlsplit(u).hostname in (None, "127.0.0.1") for u in refs), refs
    assert not [u for u in re.findall(r"https?://[^\s\"'<>]+", html.text)
                if urlsplit(u).hostname != "127.0.0.1"], html.text

    netlog = tmp_path / "net.json"
    dom = dump_dom(chromium, url + "/docs", tmp_path / "profile", netlog)

    # Swagger UI ran: the API's title and every path of the schema are in the DOM after JS
    assert 'class="swagger-ui"' in dom and "dlsched" in dom, dom[:3000]
    paths = runtime.server.get("/openapi.json")["paths"]
    assert "/jobs" in paths and "/jobs/{job_id}/migrate" in paths
    missing = [p for p in paths if f'data-path="{p}"' not in dom]
    assert not missing, f"operations not rendered: {missing}\n{dom[:3000]}"

    # and the page fetched its assets and the schema, all from 127.0.0.1
    reqs = page_requests(json.loads(netlog.read_text()))
    assert {urlsplit(u).path for u in reqs} >= {*ASSETS, "/docs", "/openapi.json"}, reqs
    assert all(urlsplit(u).hostname == "127.0.0.1" for u in reqs), reqs
