"""The CLI's `--throughputs` option (simulate, compare): a throughput table that sets the speed
of each job whose model is one of its job types (dlsched.workload.throughputs)."""
from __future__ import annotations

import typer

THROUGHPUTS_HELP = ("a throughput table: steps/s per job type, GPU count and GPU type (CSV or Gavel's "
                    "JSON, docs/speed.md), or a bundled one: gavel, pollux-t4")
THROUGHPUTS_OPTION = typer.Option(None, "--throughputs", help=THROUGHPUTS_HELP)


def apply_throughputs(ref: str | None, speed, jobs):
    """(speed settings, jobs) with the table, checked before any run; unchanged without one."""
    if ref is None:
        return speed, jobs
    from dlsched.api import with_throughputs
    return with_throughputs(ref, speed, jobs)
