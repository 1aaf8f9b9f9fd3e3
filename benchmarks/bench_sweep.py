"""Speed-up of `dlsched sweep` on a 2-node Ray cluster (`ray.cluster_utils.Cluster`: a head with
no CPUs and two nodes of 1 CPU, loopback only, token auth) over the same cells run one after the
other in one process. The cells: fifo and sjf on `poisson:jobs=N,rate=0.005` over `v100-150`,
seeds 0..S-1. Writes the "sweep" block of benchmarks/RESULTS.md.

    python benchmarks/bench_sweep.py [--jobs 4000] [--seeds 4] [--no-write]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results import measured, update_results

SWEEP = """name: bench
clusters: [v100-150]
workloads: ["poisson:jobs={jobs},rate=0.005"]
policies: [fifo, sjf]
seeds: {seeds}
"""


def one_process(sweep_file: Path) -> float:
    from dlsched.sweep.cells import run_cell
    from dlsched.sweep.grid import load_sweep
    t = time.perf_counter()
    for cell in load_sweep(sweep_file).cells:
        run_cell(cell)
    return time.perf_counter() - t


def on_cluster(sweep_file: Path, out: Path) -> float:
    from dlsched.runtime.cluster import LOOPBACK, enable_token_auth, isolate_ray_tmp, ray_client_env
    tmp = isolate_ray_tmp()
    token = enable_token_auth(Path(tmp) / "token")
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args=dict(
        node_ip_address=LOOPBACK, include_dashboard=False, num_cpus=0, object_store_memory=200 * 1024 ** 2))
    try:
        for _ in range(2):
            c.add_node(node_ip_address=LOOPBACK, num_cpus=1, object_store_memory=100 * 1024 ** 2)
        c.wait_for_nodes()
        env = {**os.environ, **ray_client_env({"address": c.address, "ray_tmpdir": tmp,
                                               "ray_token_file": str(token)})}
        dlsched = str(Path(sys.executable).parent / "dlsched")
        t = time.perf_counter()
        subprocess.run([dlsched, "sweep", str(sweep_file), "--out", str(out), "--ray-address", c.address],
                       check=True, env=env, capture_output=True, text=True)
        return time.perf_counter() - t
    finally:
        c.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "sweep.yaml"
        f.write_text(SWEEP.format(jobs=args.jobs, seeds=args.seeds))
        cells = 2 * args.seeds
        serial = one_process(f)
        print(f"one process: {cells} cells in {serial:.1f} s", flush=True)
        ray2 = on_cluster(f, Path(d) / "out")
        print(f"2-node Ray cluster: {cells} cells in {ray2:.1f} s (speed-up {serial / ray2:.2f}x)")
    if args.no_write:
        return
    lines = ["## Sweeps on Ray (`benchmarks/bench_sweep.py`)", "",
             measured(f"python benchmarks/bench_sweep.py --jobs {args.jobs} --seeds {args.seeds}") + f": {cells} cells "
             f"(fifo and sjf on `poisson:jobs={args.jobs},rate=0.005` over `v100-150`, {args.seeds} seeds).", "",
             "| how | wall (s) | speed-up |", "| --- | --- | --- |",
             f"| one process, cells one after the other | {serial:.1f} | 1.00x |",
             f"| `dlsched sweep --ray-address` to a 2-node `ray.cluster_utils.Cluster` (1 CPU each), "
             f"process wall incl. imports and connect | {ray2:.1f} | {serial / ray2:.2f}x |", "",
             "Two nodes on a 2-core machine: 2x is the ceiling; the rest is Ray's task start-up and the "
             "CLI's imports."]
    print(f"updated {update_results('sweep', lines)}")


if __name__ == "__main__":
    main()
