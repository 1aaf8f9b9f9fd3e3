"""Cells as Ray tasks: a local Ray by default (this machine's cores, loopback only, token auth), or
a running cluster with --ray-address. Clusters and workloads are loaded once by the driver and
shared through Ray's object store, so the nodes need no copy of the sweep's files.
"""
from __future__ import annotations

import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable

from dlsched.sweep.cells import error_line, run_cell
from dlsched.sweep.grid import Cell, seeded

OBJECT_STORE = 256 * 1024 ** 2


@contextmanager
def ray_session(address: str | None = None, workers: int | None = None):
    """Connect to Ray for the length of the block: start a private local one (the default) or join
    `address`. The local one listens on loopback only, with a fresh token, in a private temp dir
    removed afterwards."""
    tmp = None
    if address is None:
        from dlsched.runtime.cluster import LOOPBACK, enable_token_auth, isolate_ray_tmp
        tmp = isolate_ray_tmp()
        enable_token_auth(Path(tmp) / "token")
    import ray
    try:
        if address is None:
            ray.init(num_cpus=workers or os.cpu_count() or 1, include_dashboard=False,
                     object_store_memory=OBJECT_STORE, _node_ip_address=LOOPBACK, log_to_driver=False,
                     configure_logging=False)
        else:
            _reachable(address)
            try:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                from dlsched.core.errors import DlschedError
                raise DlschedError(f"--ray-address {address}: cannot connect to Ray ({' '.join(str(e).split())[:200]})") from None
        yield ray
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds, with one line, where ray.init would retry an unreachable address for
    minutes. `auto` (a cluster this machine is part of) is left to Ray."""
    import socket

    from dlsched.core.errors import DlschedError
    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DlschedError(f"--ray-address {address!r}: give HOST:PORT of the cluster's head (GCS), or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise DlschedError(f"--ray-address {address}: no Ray head answers there ({e.strerror or e})") from None


def _task(ray):
    @ray.remote(num_cpus=1, max_retries=0)
    def cell_task(cell: Cell, cluster, jobs):
        return run_cell(cell, cluster, jobs)
    return cell_task


def run_cells(ray, cells: Iterable[Cell], on_done: Callable[[Cell, dict | None, str | None], None]) -> None:
    """Run `cells` as Ray tasks; `on_done(cell, result, error)` as each one ends (in the order they
    end). A failed cell calls on_done with its error line; the others go on."""
    from dlsched.cluster.topology import load_cluster
    from dlsched.workload.io import load_workload
    task = _task(ray)
    clusters: dict[str, object] = {}
    workloads: dict[tuple, object] = {}
    pending: dict = {}
    broken: dict = {}     # input -> why it failed to load (its cells fail, the others run)
    for cell in cells:
        # a generator's jobs depend on the seed; a trace's (bundled or a file) do not: loaded once
        wkey = (cell.workload, cell.seed if seeded(cell.workload) else None)
        for key, load, store in ((cell.cluster, lambda: load_cluster(cell.cluster), clusters),
                                 (wkey, lambda: load_workload(cell.workload, seed=cell.seed), workloads)):
            if key not in store and key not in broken:
                try:
                    store[key] = ray.put(load())
                except Exception as e:
                    broken[key] = error_line(e)
        why = broken.get(cell.cluster) or broken.get(wkey)
        if why is not None:
            on_done(cell, None, why)
            continue
        pending[task.remote(cell, clusters[cell.cluster], workloads[wkey])] = cell
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=5.0)
        for ref in ready:
            cell = pending.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as e:
                on_done(cell, None, error_line(e))
            else:
                on_done(cell, result, None)


class Throttle:
    """Call `fn` at most every `every_s` seconds (and once more with flush())."""

    def __init__(self, fn: Callable[[], None], every_s: float = 2.0):
        self.fn, self.every, self.last, self.dirty = fn, every_s, 0.0, False

    def __call__(self) -> None:
        self.dirty = True
        if time.monotonic() - self.last >= self.every:
            self.flush()

    def flush(self) -> None:
        if self.dirty:
            self.fn()
            self.last, self.dirty = time.monotonic(), False
