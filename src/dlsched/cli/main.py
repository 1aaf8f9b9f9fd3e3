"""`dlsched`: simulate, compare, list policies, and generate / convert / describe workloads.

Every user error (bad file, bad row, bad config) is a DlschedError: printed on one line to
stderr, exit status 2, and no output folder is left half-written.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from dlsched.core.errors import DlschedError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="dlsched: schedule deep-learning training jobs on shared GPU clusters.")
workload_app = typer.Typer(no_args_is_help=True, help="Generate, convert and describe workloads.")
app.add_typer(workload_app, name="workload")

CLUSTER_HELP = "a preset (seed000, seed002, liquid-N, pollux, philly) or a cluster YAML file"
SPEED_HELP = "YAML overriding the speed model: overlap, interference table"
WORKLOAD_HELP = "a workload file (CSV, Parquet, JSON lines; gzipped or not) or a generator name"


# The figures the terminal table shows (the HTML report and summary.json have all of them).
TERMINAL_KEYS = ("policy", "finished", "mean_jct_s", "p95_jct_s", "makespan_s", "mean_wait_s",
                 "gpu_util_pct", "nic_gb", "sched_time_s", "partial_hold_gpu_h", "deadline_hit_pct")


def _console(stderr: bool = False):
    from rich.console import Console
    c = Console(stderr=stderr)
    if not c.is_terminal:          # piped / CI: do not squeeze the table into 80 columns
        c = Console(stderr=stderr, width=160)
    return c


def _print_summary(results, title: str) -> None:
    from dlsched.report import rich_table, summary_table
    rows = [{k: r[k] for k in TERMINAL_KEYS if k in r} for r in summary_table(results)]
    _console().print(rich_table(rows, title=title))
    for res in results:
        s = res.summary
        if s.get("rejected") or s.get("unfinished"):
            typer.echo(f"note: {res.policy}: {s['rejected']} job(s) rejected (they can never fit this cluster), "
                       f"{s['unfinished']} unfinished when no event was left (see jobs.parquet, column state)",
                       err=True)


class _Progress:
    """A rich progress bar that appears only once a run has taken more than a second."""

    def __init__(self, label: str, total_jobs: int, horizon_s: float):
        self.label, self.total, self.horizon = label, total_jobs, max(horizon_s, 1.0)
        self.t0 = time.monotonic()
        self.bar = None
        self.task = None

    def __call__(self, now: float, done: int) -> None:
        if self.bar is None:
            if time.monotonic() - self.t0 < 1.0:
                return
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.completed}/{task.total} jobs"),
                                TextColumn("sim t={task.fields[t]}"), TimeElapsedColumn(),
                                console=_console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=self.total, t=f"{now:,.0f}s")
        self.bar.update(self.task, completed=done, t=f"{now:,.0f}s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _run_one(cluster, jobs, wname, policy, seed, policy_config, restart_delay_s, speed=None,
             start_delay_s=0.0):
    from dlsched.api import simulate
    horizon = max((j.submit_time_s for j in jobs), default=0.0)
    prog = _Progress(policy, len(jobs), horizon)
    try:
        res = simulate(cluster, jobs, policy, seed=seed, policy_config=policy_config,
                       restart_delay_s=restart_delay_s, speed=speed, progress=prog,
                       start_delay_s=start_delay_s)
    finally:
        prog.close()
    res.workload = wname
    res.summary["workload"] = wname
    return res


def _load(cluster: str, workload: str, fmt: Optional[str], seed: int):
    from dlsched.cluster import load_cluster
    from dlsched.workload.io import load_workload
    cl = load_cluster(cluster)
    jobs = load_workload(workload, format=fmt, seed=seed)
    return cl, jobs, Path(workload).name


def _speed(ref):
    if ref is None:
        return None
    from dlsched.workload.speed import load_speed_config
    return load_speed_config(ref)


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise DlschedError(f"--out {out} exists and is not a folder")


@app.command()
def simulate(
    cluster: str = typer.Option(..., "--cluster", "-c", help=CLUSTER_HELP),
    workload: str = typer.Option(..., "--workload", "-w", help=WORKLOAD_HELP),
    policy: str = typer.Option("fifo", "--policy", "-p", help="a policy name (see `dlsched policies`)"),
    out: Path = typer.Option(Path("out/run"), "--out", "-o", help="output folder"),
    fmt: Optional[str] = typer.Option(None, "--format", help="workload format: schema, philly or pollux"),
    policy_config: Optional[Path] = typer.Option(None, "--policy-config", help="YAML of policy parameters"),
    seed: int = typer.Option(0, "--seed", help="random seed (generators and policies)"),
    restart_delay_s: float = typer.Option(30.0, "--restart-delay-s", help="cost of resume / migrate / resize"),
    start_delay_s: float = typer.Option(0.0, "--start-delay-s", help="cost of a job's first start (Pollux: 30)"),
    speed_config: Optional[Path] = typer.Option(None, "--speed-config", help=SPEED_HELP),
    report: bool = typer.Option(False, "--report/--no-report", help="also write report.html with plots"),
):
    """Simulate one policy; write jobs.parquet, summary.json, timeline and events to --out."""
    from dlsched.api import load_policy_config
    _check_out(out)
    load_policy_config(policy_config)
    speed = _speed(speed_config)
    cl, jobs, wname = _load(cluster, workload, fmt, seed)
    res = _run_one(cl, jobs, wname, policy, seed, policy_config, restart_delay_s, speed, start_delay_s)
    res.save(out)
    _print_summary([res], f"{policy} on {cl.name} / {wname}")
    if report:
        from dlsched.report import write_run_report
        path = write_run_report(res, out)
        typer.echo(f"report: {path}")
    typer.echo(f"results: {out / 'summary.json'}")


@app.command()
def compare(
    cluster: str = typer.Option(..., "--cluster", "-c", help=CLUSTER_HELP),
    workload: str = typer.Option(..., "--workload", "-w", help=WORKLOAD_HELP),
    policies: str = typer.Option("fifo,fifo-gang,fifo-backfill", "--policies", "-p",
                                 help="comma-separated policy names"),
    out: Path = typer.Option(Path("out/compare"), "--out", "-o", help="output folder"),
    fmt: Optional[str] = typer.Option(None, "--format", help="workload format: schema, philly or pollux"),
    policy_config: Optional[Path] = typer.Option(None, "--policy-config", help="YAML of policy parameters"),
    seed: int = typer.Option(0, "--seed"),
    restart_delay_s: float = typer.Option(30.0, "--restart-delay-s"),
    start_delay_s: float = typer.Option(0.0, "--start-delay-s", help="cost of a job's first start (Pollux: 30)"),
    speed_config: Optional[Path] = typer.Option(None, "--speed-config", help=SPEED_HELP),
):
    """Run several policies on the same cluster and workload; print a table, write an HTML report."""
    import dlsched.policies  # noqa: F401
    from dlsched.api import load_policy_config
    from dlsched.scheduler.framework import REGISTRY
    _check_out(out)
    names = [p.strip() for p in policies.split(",") if p.strip()]
    if not names:
        raise DlschedError("--policies: give at least one policy name")
    for p in names:
        REGISTRY.get("profile", p)
    load_policy_config(policy_config)
    speed = _speed(speed_config)
    cl, jobs, wname = _load(cluster, workload, fmt, seed)
    results = [_run_one(cl, jobs, wname, p, seed, policy_config, restart_delay_s, speed, start_delay_s)
               for p in names]
    for res in results:
        res.save(out / res.policy)
    from dlsched.report import write_compare_report
    _print_summary(results, f"{cl.name} / {wname}")
    path = write_compare_report(results, out, title=f"dlsched: {', '.join(names)} on {cl.name} / {wname}")
    typer.echo(f"report: {path}")


@app.command("policies")
def list_policies(all_kinds: bool = typer.Option(False, "--all", help="also list components by kind")):
    """The registry: every policy (profile), one line each."""
    import dlsched.policies  # noqa: F401
    from dlsched.scheduler.framework import KINDS, REGISTRY
    for e in REGISTRY.entries("profile"):
        typer.echo(f"{e.name:<22} {e.doc}" + (f"  [{e.source}]" if e.source else ""))
    if all_kinds:
        for kind in KINDS[:-1]:
            typer.echo(f"\n{kind}:")
            for e in REGISTRY.entries(kind):
                typer.echo(f"  {e.name:<20} {e.doc}")


@app.command("cluster")
def cluster_cmd(cluster: str = typer.Argument(..., help=CLUSTER_HELP)):
    """Describe a cluster preset or YAML file."""
    from dlsched.cluster import load_cluster
    typer.echo(load_cluster(cluster).describe())


@app.command("experiment")
def experiment_cmd(
    name: Optional[str] = typer.Argument(None, help="experiment name (omit with --list)"),
    out: Path = typer.Option(Path("out/experiment"), "--out", "-o", help="output folder"),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="number of seeds (default: the experiment's)"),
    list_only: bool = typer.Option(False, "--list", help="list the experiments"),
    strict: bool = typer.Option(False, "--strict", help="exit 1 when an expected direction does not hold"),
):
    """Reproduce a published result: runs, published figures beside ours, plots, report.html."""
    from dlsched.experiments import EXPERIMENTS, run_experiment
    if list_only or name is None:
        for e in EXPERIMENTS.values():
            typer.echo(f"{e.name:<18} {e.title}  [{e.source}, {e.default_seeds} seeds]")
        return
    _check_out(out)
    res, report = run_experiment(name, out, seeds)
    from rich.table import Table
    con = _console()
    show = [k for k in ("mean_jct_s", "makespan_s", "mean_wait_s", "nic_bytes", "gpu_util", "sched_time_s")
            if k in res.rows[0]]
    t = Table(title=f"{res.title}: mean ± std over {res.rows[0]['seeds']} seeds")
    for col in (["group"] if any(r["group"] for r in res.rows) else []) + ["policy"] + show:
        t.add_column(col, justify="left" if col in ("group", "policy") else "right")
    for r in res.rows:
        cells = ([r["group"]] if any(x["group"] for x in res.rows) else []) + [r["policy"]]
        for k in show:
            m, sd = r.get(k, float("nan")), r.get(f"{k}_std", float("nan"))
            scale = 1e9 if k == "nic_bytes" else 1.0
            unit = " GB" if k == "nic_bytes" else ""
            cells.append(f"{m / scale:,.2f} ± {sd / scale:,.2f}{unit}" if k in ("gpu_util", "sched_time_s")
                         else f"{m / scale:,.0f} ± {sd / scale:,.0f}{unit}")
        t.add_row(*cells)
    con.print(t)
    if res.published:
        p = Table(title="published beside ours")
        for col in res.published[0]:
            p.add_column(str(col))
        for row in res.published:
            p.add_row(*[f"{v:,.0f}" if isinstance(v, float) else str(v) for v in row.values()])
        con.print(p)
    for c in res.checks:
        typer.echo(f"{'PASS' if c.ok else 'FAIL'}  expected: {c.text}" + (f"  ({c.detail})" if c.detail else ""))
    typer.echo(f"report: {report}")
    if strict and not res.ok:
        raise typer.Exit(1)


@workload_app.command("generate")
def wl_generate(
    name: str = typer.Argument(..., help="generator, e.g. seed000, sample, poisson:jobs=500,rate=0.02"),
    out: Path = typer.Option(..., "--out", "-o", help="file to write (.csv, .csv.gz, .parquet, .jsonl)"),
    seed: int = typer.Option(0, "--seed"),
):
    """Generate a workload into the common schema."""
    from dlsched.workload.io import load_workload, save_workload
    jobs = load_workload(name, seed=seed)
    save_workload(jobs, out)
    typer.echo(f"wrote {len(jobs)} jobs to {out}")


@workload_app.command("convert")
def wl_convert(
    src: str = typer.Argument(..., help=WORKLOAD_HELP),
    out: Path = typer.Option(..., "--out", "-o", help="file to write (.csv, .csv.gz, .parquet, .jsonl)"),
    fmt: Optional[str] = typer.Option(None, "--format", help="input format: schema, philly or pollux"),
):
    """Convert a trace (Philly, Pollux) or schema file into the common schema."""
    from dlsched.workload.io import load_workload, save_workload
    jobs = load_workload(src, format=fmt)
    save_workload(jobs, out)
    typer.echo(f"wrote {len(jobs)} jobs to {out}")


@workload_app.command("describe")
def wl_describe(
    src: str = typer.Argument(..., help=WORKLOAD_HELP),
    fmt: Optional[str] = typer.Option(None, "--format"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
):
    """Counts, GPU mix, time span and models of a workload."""
    from dlsched.workload.io import describe_workload, load_workload
    d = describe_workload(load_workload(src, format=fmt))
    if as_json:
        typer.echo(json.dumps(d, indent=2, default=str))
        return
    from rich.table import Table
    t = Table(title=f"workload {src}")
    t.add_column("field")
    t.add_column("value")
    for k, v in d.items():
        t.add_row(str(k), json.dumps(v, default=str) if isinstance(v, (dict, list)) else str(v))
    _console().print(t)


from dlsched.cli import runtime as _runtime  # noqa: E402  (the real runtime's commands)

_runtime.register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point. typer handles usage errors itself (message and exit status 2); a DlschedError
    (a user's bad input) is printed on one line, exit status 2."""
    try:
        app(args=argv, standalone_mode=True, prog_name="dlsched")
    except DlschedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
