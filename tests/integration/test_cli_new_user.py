"""The smaller defects a new user found (issue "The runtime as a new user found it"), each
through the real CLI or the real app: an --out that refuses names the option, a cluster file's
error names its line, `up` says who holds its port, GET /login leads to the login page, a
typo in `dlsched jobs`' filters is one line, and the README's commands name bundled files."""
from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlsched.cli.main", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={"PATH": "/usr/bin:/bin", "HOME": str(cwd),
                                                     "DLSCHED_STATE_DIR": str(cwd / "state")})


def test_an_out_folder_that_refuses_names_the_option(tmp_path):
    for args in (["simulate", "-c", "seed002", "-w", "sample"], ["compare", "-c", "seed002", "-w", "sample", "-p", "fifo"]):
        r = cli(*args, "--out", "/proc/1/dlsched-out", cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("error: --out /proc/1/dlsched-out: cannot write in /proc/1"), r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_a_cluster_file_error_names_file_line_and_field(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("name: x\nnode_groups:\n  - count: 2\n    gpus: 1\n    gpu_mem_gb: 4\n    bogus: 3\n")
    r = cli("simulate", "-c", str(bad), "-w", "sample", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert r.returncode == 2
    assert f"{bad}, line 6: node_groups[0].bogus: unknown field" in r.stderr, r.stderr
    neg = tmp_path / "n.yaml"
    neg.write_text("name: x\nnode_groups:\n  - count: 2\n    gpu_mem_gb: 4\n    gpus: -1\n")
    r = cli("simulate", "-c", str(neg), "-w", "sample", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert f"{neg}, line 5: node_groups[0].gpus" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_up_says_who_took_its_port(tmp_path):
    """The server `up` started exited because its port was taken meanwhile: the reason names
    the port and the process that holds it (a real listening socket of this process)."""
    from dlsched.cli.runtime import _why_not
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        log = tmp_path / "server.log"
        log.write_text(f"INFO starting\nerror: cannot listen on 127.0.0.1:{port}: Address already in use\n")
        why = _why_not(log, port)
    assert why.startswith(f"port {port} is taken (taken by pid ") and str(sys.executable).split("/")[-1] in why, why
    log.write_text("error: --policy: unknown policy 'x'\n")
    assert _why_not(log, 1) == "--policy: unknown policy 'x'"


def test_get_login_redirects_to_the_login_page():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from dlsched.web.auth import Sessions
    from dlsched.web.routes import install_web
    app = FastAPI()
    install_web(app, Sessions("a-token", 1), lambda: {"mode": "live"})
    r = TestClient(app).get("/login", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"


def test_a_typo_in_a_jobs_filter_is_one_line(tmp_path):
    r = cli("jobs", "--state", "runing", cwd=tmp_path)
    assert r.returncode == 2 and "--state: unknown state 'runing'" in r.stderr and "running" in r.stderr
    r = cli("jobs", "--since", "5q", cwd=tmp_path)
    assert r.returncode == 2 and "--since: '5q' is not a duration" in r.stderr


def test_the_readmes_commands_name_files_a_clone_has():
    """Every path a README command line reads (not an --out) exists in a clone."""
    text = (ROOT / "README.md").read_text()
    for line in text.splitlines():
        if not line.startswith("dlsched "):
            continue
        for tok in re.findall(r"(?<![-\w])((?:\.\./|src/|examples/)[\w./-]+\.(?:csv|ya?ml|py|json))", line.split(" --out ")[0]):
            assert (ROOT / tok).exists(), f"README: {line}: {tok} is not in the project"
