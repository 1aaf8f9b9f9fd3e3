"""benchmarks/RESULTS.md keeps one block per benchmark between <!-- BENCH:name --> markers; a run
replaces its own block and leaves the rest of the file as it is.

A library of the benchmark scripts, not a script itself. DLSCHED_BENCH_RESULTS=PATH sends the
blocks to another file instead (the smoke test, tests/integration/test_benchmarks_smoke.py, runs
every script at a tiny size with it, so that the figures of a tiny run never reach RESULTS.md)."""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
RESULTS_ENV = "DLSCHED_BENCH_RESULTS"


def results_path() -> Path:
    """The file the blocks go to: $DLSCHED_BENCH_RESULTS where set, else benchmarks/RESULTS.md."""
    return Path(os.environ[RESULTS_ENV]) if os.environ.get(RESULTS_ENV) else RESULTS


def update_results(name: str, lines: list[str]) -> Path:
    results = results_path()
    start, end = f"<!-- BENCH:{name} -->", f"<!-- /BENCH:{name} -->"
    block = "\n".join([start, *lines, end])
    text = results.read_text() if results.exists() else "# Benchmark results\n"
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    tmp = results.with_suffix(".tmp")
    tmp.write_text(text)      # written whole, then renamed: never half a file
    tmp.replace(results)
    return results


def cpu_reference_s() -> float:
    """Seconds of one fixed pure-Python workload (2 million small tuples put in a dict, then
    sorted: allocation, hashing and memory, as in the simulator), the best of three. The
    development machine's speed varies from day to day (on 2026-11-26 every benchmark ran 2.0-2.8x
    slower than on 2026-11-25, with the same code): this figure, printed with each block,
    says how fast the machine was when the block was measured. DLSCHED_BENCH_REFERENCE_RUNS=N
    takes the best of N instead (the smoke test: 1)."""
    best = float("inf")
    for _ in range(max(1, int(os.environ.get("DLSCHED_BENCH_REFERENCE_RUNS") or 3))):
        t = time.perf_counter()
        d = {}
        for i in range(2_000_000):
            d[i] = (i, float(i))
        sorted(d.values(), key=lambda x: -x[1])
        del d
        best = min(best, time.perf_counter() - t)
    return best


def measured(command: str) -> str:
    """The head of a block's stamp: date, CPUs, Python, the CPU reference and the command (the
    caller ends the sentence)."""
    return (f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"CPU reference {cpu_reference_s():.2f} s (results.cpu_reference_s), with `{command}`")
