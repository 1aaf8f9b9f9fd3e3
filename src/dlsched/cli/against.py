"""`--against-trace` of `dlsched simulate` and `dlsched compare`: each run's waits and JCTs set
beside what the trace recorded (dlsched.metrics.recorded), printed and kept in
against_trace.json next to the run's summary.json."""
from __future__ import annotations

from pathlib import Path

import typer

from dlsched.core.errors import DlschedError

AGAINST_HELP = ("set each run beside what the trace recorded: per-queue median and p95 wait, simulated "
                "and recorded, and the Spearman rank correlation of wait and JCT (the workload must "
                "record start times: raw Philly, Helios, PAI, Slurm, SWF, or --map start=...,end=...)")
AGAINST_OPTION = typer.Option(False, "--against-trace", help=AGAINST_HELP)


def check_against(asked: bool, jobs, workload: str) -> None:
    """Before any run: with --against-trace, a workload none of whose jobs has a recorded start
    is refused in one line (exit 2)."""
    from dlsched.metrics.recorded import has_recorded
    if asked and not has_recorded(jobs):
        raise DlschedError(f"--against-trace: workload {workload} records no start times (none of its "
                           f"{len(jobs)} jobs has one), so there is nothing to compare with; give a trace "
                           "that records them (raw Philly, Helios, PAI, Slurm, SWF, or --map start=...,end=...)")


def report_against(results, out: Path, *, per_policy: bool) -> None:
    """Print each run's comparison and write it to against_trace.json (out/<policy>/ when
    `per_policy`, else out/)."""
    from rich.table import Table

    from dlsched.cli.client import _console
    from dlsched.metrics.recorded import against_trace, jsonable, report_lines
    from dlsched.metrics.result import write_json
    con = _console()
    for res in results:
        rep = against_trace(res.jobs)
        head, rows, foot = report_lines(res.policy, rep)
        t = Table(title=f"{res.policy}: simulated against recorded wait (s)")
        for i, h in enumerate(head):
            t.add_column(h, justify="left" if i == 0 else "right")
        for r in rows:
            t.add_row(*r)
        con.print(t)
        typer.echo(foot)
        write_json((out / res.policy if per_policy else out) / "against_trace.json",
                   jsonable({"policy": res.policy, "workload": res.workload, **rep}))
