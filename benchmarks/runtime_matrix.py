"""Every registered policy on the real runtime, as a new user tries it: for each profile, a
`dlsched server` on a fresh state dir against one local Ray cluster (4 nodes x 2 virtual GPUs; --nodes),
the two shipped examples submitted through the API, and what became of them. A profile that
needs what the runtime cannot do is refused at start (its one-line message is recorded).

    python benchmarks/runtime_matrix.py [--policies a,b] [--timeout-s 150] [--nodes 4] [--results]

Not in CI (about 4 minutes); the figures go to benchmarks/RESULTS.md, block `runtime-matrix`.
"""
from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import ServerProc  # noqa: E402
from results import update_results  # noqa: E402

EXAMPLES = ("allreduce.yaml", "ps.yaml")
FINAL = ("done", "failed", "held", "rejected", "cancelled")


def run_matrix(timeout_s: float = 150.0, policies: list[str] | None = None, nodes: int = 4) -> dict:
    """Each profile (`policies`: these only, default every registered one) on a fresh server,
    the two examples submitted; a row per profile: what became of each after at most
    `timeout_s`. `nodes`: the cluster's nodes of 2 GPUs (2 hold both examples at once)."""
    import dlsched.policies  # noqa: F401
    from dlsched.runtime.cluster import isolate_ray_tmp, start_cluster
    from dlsched.runtime.spec import load_job_spec
    from dlsched.scheduler.framework import REGISTRY
    known = REGISTRY.names("profile")
    unknown = [p for p in policies or () if p not in known]
    if unknown:
        raise SystemExit(f"error: --policies: unknown profile {unknown[0]!r} (registered: {', '.join(known)})")
    tmp = isolate_ray_tmp()
    cluster = start_cluster(nodes, 2, cpus_per_node=2)
    out = {}
    try:
        for policy in policies or known:
            sd = Path(tempfile.mkdtemp(prefix="dlsched-matrix-"))
            try:
                try:
                    s = ServerProc(cluster.address, sd, policy, "matrix").start(timeout=90)
                except AssertionError as e:          # the server exited: its last line says why
                    lines = [x for x in str(e).splitlines() if x.strip()]
                    out[policy] = {"refused": lines[-1].removeprefix("error: ") if lines else "?"}
                    print(policy, out[policy], flush=True)
                    continue
                try:
                    ids = {ex: s.submit(load_job_spec(ROOT / "examples" / ex).to_dict()) for ex in EXAMPLES}
                    t0 = time.monotonic()
                    while time.monotonic() - t0 < timeout_s:
                        if all(s.get(f"/jobs/{j}")["state"] in FINAL for j in ids.values()):
                            break
                        time.sleep(0.5)
                    row = {"wall_s": round(time.monotonic() - t0, 1)}
                    for ex, j in ids.items():
                        jj = s.get(f"/jobs/{j}")
                        row[ex] = {"state": jj["state"], "steps": jj["step"], "runs": jj["attempts"],
                                   "error": (jj["error"] or "").splitlines()[0][:160] if jj["error"] else ""}
                    out[policy] = row
                finally:
                    s.stop()
                print(policy, out[policy], flush=True)
            finally:
                shutil.rmtree(sd, ignore_errors=True)
    finally:
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def results_lines(res: dict, nodes: int = 4) -> list[str]:
    lines = ["## Every policy on the real runtime (`benchmarks/runtime_matrix.py`)", "",
             f"Measured {time.strftime('%Y-%m-%d')} on {__import__('os').cpu_count()} CPUs, Python "
             f"{platform.python_version()}, Ray {__import__('ray').__version__}: each registered profile on a "
             f"`dlsched server` (fresh state dir) against a local Ray cluster of {nodes} nodes x 2 GPUs, "
             "with `examples/allreduce.yaml` and `examples/ps.yaml` submitted through the API.", "",
             "| policy | allreduce.yaml | ps.yaml | wall (s) |", "| --- | --- | --- | --- |"]
    for policy, row in res.items():
        if "refused" in row:
            lines.append(f"| {policy} | refused at start: {row['refused']} | | |")
            continue
        cells = []
        for ex in EXAMPLES:
            r = row[ex]
            cell = f"{r['state']}, {r['steps']} steps, {r['runs']} run(s)"
            cells.append(cell + (f": {r['error']}" if r["error"] else ""))
        lines.append(f"| {policy} | {cells[0]} | {cells[1]} | {row['wall_s']} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="", help="comma-separated profiles (default: every registered one)")
    ap.add_argument("--timeout-s", type=float, default=150.0, help="how long each profile's jobs may take")
    ap.add_argument("--nodes", type=int, default=4, help="virtual nodes of 2 GPUs (at least 2: both examples "
                    "at once)")
    ap.add_argument("--results", action="store_true", help="write the table into benchmarks/RESULTS.md")
    a = ap.parse_args(argv)
    if a.nodes < 2:
        ap.error("--nodes: at least 2 (the two examples ask for 4 GPUs between them)")
    res = run_matrix(a.timeout_s, [p for p in a.policies.split(",") if p] or None, a.nodes)
    print("\n".join(results_lines(res, a.nodes)[4:]))          # the table
    if a.results:
        print(f"wrote {update_results('runtime-matrix', results_lines(res, a.nodes))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
