"""Headless Chromium for the browser tests: find it, dump a page's DOM after its scripts ran, drive
it over the DevTools protocol, and read from its net log which URLs the pages asked for.

Chromium resolves no host but 127.0.0.1 (--host-resolver-rules), so an asset from a CDN would fail
to load and the page would stay blank; its net log (--log-net-log) then shows every request the
pages made, and the tests assert that all went to 127.0.0.1.

`DevTools` speaks the DevTools protocol over a pipe (--remote-debugging-pipe: JSON messages ended
by NUL on file descriptors 3 and 4, put there by a small Python exec wrapper), so there is no debugging port and no extra package: it types
into forms and follows the page across logins, which `--dump-dom` alone cannot (a session cookie
comes from a POST)."""
from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update",
         # Chromium's autofill asks Google about a page's forms (the login page's password field),
         # under the page's network isolation key: off, so that the log holds the page's own requests
         "--disable-features=AutofillServerCommunication",
         # every host but 127.0.0.1 fails to resolve: an outside asset cannot load
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")


# run in the child: the pipe ends onto fds 3 and 4 (where --remote-debugging-pipe looks), then Chromium
MOVE_FDS = ("import os, sys; r, w = int(sys.argv[1]), int(sys.argv[2]); os.dup2(r, 3); os.dup2(w, 4); "
            "os.close(r); os.close(w); os.execv(sys.argv[3], sys.argv[3:])")


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def page_requests(netlog: dict) -> list[str]:
    """URLs the pages at 127.0.0.1 asked for. Chromium's own background requests (updates, sign-in,
    spelling dictionaries) are in the log too, under other network isolation keys: skip those."""
    start = netlog["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [p["url"] for e in netlog["events"] if e["type"] == start
            for p in [e.get("params", {})]
            if p.get("network_isolation_key", "").startswith("http://127.0.0.1 ")]


def dump_dom(exe: str, url: str, profile: Path, netlog: Path | None = None, budget_ms: int = 10000) -> str:
    """The DOM of `url` once its scripts ran (virtual time), in the browser profile `profile`
    (cookies persist there from one call to the next)."""
    log = [f"--log-net-log={netlog}"] if netlog else []
    r = subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", *log, f"--virtual-time-budget={budget_ms}",
                        "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout, r.stderr[-3000:]
    return r.stdout


def _above(fd: int, low: int) -> int:
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low)
    os.close(fd)
    return new


class DevTools:
    """One headless Chromium with one page, driven over the DevTools protocol on a pipe."""

    def __init__(self, exe: str, profile: Path, netlog: Path):
        cmd_r, cmd_w = os.pipe()
        ev_r, ev_w = os.pipe()
        # the child's ends above 9, so that moving them to 3 and 4 overwrites neither
        cmd_r, ev_w = (_above(fd, 10) for fd in (cmd_r, ev_w))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", MOVE_FDS, str(cmd_r), str(ev_w), exe, *FLAGS, f"--user-data-dir={profile}",
             f"--log-net-log={netlog}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(cmd_r, ev_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(cmd_r)
        os.close(ev_w)
        self.w, self.r, self.buf, self.seq = cmd_w, ev_r, b"", 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def call(self, method: str, timeout: float = 30.0, **params) -> dict:
        self.seq += 1
        msg = {"id": self.seq, "method": method, "params": params}
        if method.split(".")[0] not in ("Target", "Browser"):
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:                           # events in between are not needed: pages are polled
            m = self._message(deadline)
            if m.get("id") == self.seq:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise EOFError("Chromium closed the pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def js(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, *texts: str, timeout: float = 30.0) -> str:
        """The page's HTML once it holds every one of `texts` (polled: pages render asynchronously)."""
        t0, html = time.monotonic(), ""
        while time.monotonic() - t0 < timeout:
            try:                              # between two documents there is none to read
                html = self.js("document.documentElement ? document.documentElement.outerHTML : ''") or ""
            except RuntimeError:
                html = ""
            if all(t in html for t in texts):
                return html
            time.sleep(0.2)
        missing = [t for t in texts if t not in html]
        raise AssertionError(f"page never showed {missing}:\n{html[-4000:]}")

    def close(self) -> None:
        """Close the browser (it writes its net log as it exits)."""
        try:
            self.call("Browser.close", timeout=10)
        except (EOFError, TimeoutError, RuntimeError):
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(10)
        os.close(self.w)
        os.close(self.r)
