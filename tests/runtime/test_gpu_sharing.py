"""GPU sharing on the real runtime: the scenario in gpu_sharing_scenario.py (read it for what is
checked), run by pytest in a process of its own. It makes this process a Ray driver of its own
small cluster, and Ray keeps per-process state (the GCS client, the auth mode and token) that a
driver of another cluster earlier in the same pytest process leaves behind: run in the session's
process after the chaos test, its ray.init hung connecting to the GCS."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_gpu_sharing_scenario_in_its_own_process():
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "python_files=*.py", "-o", "addopts=",
                        str(HERE / "gpu_sharing_scenario.py")], capture_output=True, text=True, timeout=420,
                       cwd=HERE.parents[1])
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    assert " passed" in r.stdout and "failed" not in r.stdout and "error" not in r.stdout, r.stdout[-2000:]
