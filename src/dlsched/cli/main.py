"""`dlsched`: simulate, compare, list policies, and generate / convert / describe workloads.

Every user error (bad file, bad row, bad config, unknown option, bad value, unwritable --out) is
printed on one line to stderr with exit status 2, before any work where it can be found before;
no output folder is left half-written, and an earlier run's folder is replaced only with --force.
"""
from __future__ import annotations

import hashlib
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from dlsched.cli.client import new_app
from dlsched.core.errors import DlschedError, Refused

app = new_app(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
              help="dlsched: schedule deep-learning training jobs on shared GPU clusters.")
workload_app = new_app(no_args_is_help=True, help="Generate, convert and describe workloads.")
app.add_typer(workload_app, name="workload")

CLUSTER_HELP = "a preset (seed000, seed002, liquid-N, v100-N, pollux, philly) or a cluster YAML file"
SPEED_HELP = "YAML overriding the speed model: overlap, interference table"
WORKLOAD_HELP = "a workload file (CSV, Parquet, JSON lines; gzipped or not) or a generator name"
FORCE_HELP = "replace the contents of a non-empty --out folder (once the inputs have validated)"
from dlsched.cli.speed import THROUGHPUTS_OPTION, apply_throughputs  # noqa: E402
from dlsched.cli.semantics import SEMANTICS_OPTION, check_semantics  # noqa: E402
from dlsched.cli.tenancy import QUEUES_OPTION, TENANCY_OPTION  # noqa: E402
from dlsched.cli.workload import FORMAT_OPTION, MAP_OPTION  # noqa: E402
from dlsched.cli.against import AGAINST_OPTION, check_against, report_against  # noqa: E402

_ARGV: list[str] = []   # the command line main() ran, recorded in summary.json


def _non_negative(value):
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise typer.BadParameter(f"must be a finite number >= 0, got {value}")
    return value


def _delay(default: float, flag: str, help: str):
    return typer.Option(default, flag, callback=_non_negative, help=f"{help} (seconds >= 0)")


def _seed():
    return typer.Option(0, "--seed", min=0, help="random seed (generators and policies)")


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
             start_delay_s=0.0, tenancy=(None, None), gavel=None, semantics="native"):
    from dlsched.api import simulate
    horizon = max((j.submit_time_s for j in jobs), default=0.0)
    prog = _Progress(policy, len(jobs), horizon)
    try:
        if gavel is not None:       # --semantics gavel: gavel = (its throughput table,)
            from dlsched.cli.semantics import run_gavel
            res = run_gavel(cluster, jobs, wname, policy, seed, gavel[0], prog)
        else:
            res = simulate(cluster, jobs, policy, seed=seed, policy_config=policy_config,
                           restart_delay_s=restart_delay_s, speed=speed, progress=prog,
                           start_delay_s=start_delay_s, queues=tenancy[0], tenancy=tenancy[1],
                           semantics=semantics)
    finally:
        prog.close()
    res.workload = wname
    res.summary["workload"] = wname
    return res


def _check_policies(flag: str, names: list[str], gavel: bool = False) -> None:
    import dlsched.policies  # noqa: F401
    from dlsched.scheduler.framework import REGISTRY
    from dlsched.sim.gavel import GAVEL_POLICIES
    known = list(GAVEL_POLICIES) if gavel else REGISTRY.names("profile") + list(GAVEL_POLICIES)
    for p in names:
        if p not in known:
            raise DlschedError(f"{flag}: unknown profile {p!r} (registered: {', '.join(known)})")


def _load(cluster: str, workload: str, fmt: Optional[str], seed: int, policy_config: Optional[Path],
          speed_config: Optional[Path], queues: Optional[str] = None, mode: Optional[str] = None,
          throughputs: Optional[str] = None, mapping: Optional[str] = None):
    """Every input of simulate / compare, validated before any run: (cluster, jobs, workload name,
    speed model, provenance, (queue tree or None, tenancy mode))."""
    from dlsched.api import load_policy_config
    from dlsched.cluster.topology import is_preset, load_cluster
    from dlsched.workload.io import is_named_workload, load_workload
    load_policy_config(policy_config)
    speed = None
    if speed_config is not None:
        from dlsched.workload.speed import load_speed_config
        speed = load_speed_config(speed_config)
    cl = load_cluster(cluster)
    jobs = load_workload(workload, format=fmt, seed=seed, mapping=mapping)
    speed, jobs = apply_throughputs(throughputs, speed, jobs)
    from dlsched.cli.tenancy import load_tenancy
    ten = load_tenancy(queues, mode, jobs, workload)
    prov = _provenance(seed, cluster=(cluster, is_preset(cluster)), workload=(workload, is_named_workload(workload)),
                       policy_config=(policy_config, False), speed_config=(speed_config, False),
                       queues=(queues, queues is not None and not Path(queues).exists()),
                       throughputs=(throughputs, throughputs is not None and not Path(throughputs).exists()))
    return cl, jobs, Path(workload).name, speed, prov, ten


def _provenance(seed, **inputs: tuple) -> dict:
    """How a summary.json was made: dlsched version, argv, seed(s), and each input (name=(ref,
    is_name)): a file by its path and sha256, a preset, generator or bundled workload by its name."""
    import dlsched

    def one(ref, is_name: bool) -> dict:
        if is_name:
            return {"name": str(ref)}
        with open(ref, "rb") as fh:
            return {"file": str(ref), "sha256": hashlib.file_digest(fh, "sha256").hexdigest()}
    return {"dlsched_version": dlsched.__version__, "argv": _ARGV or sys.argv[1:], "seed": seed,
            "inputs": {k: one(*v) for k, v in inputs.items() if v[0] is not None}}


def _check_out(out: Path, force: bool = False, *, file: bool = False) -> None:
    """Find an --out that cannot be written before any work is done: a folder (or, with `file`, a
    workload file) whose nearest existing folder is writable; a non-empty folder only with --force,
    and never the current folder, one above it or the home folder."""
    where = f"--out {out}"
    if file:
        from dlsched.workload.io import save_kind
        if out.is_dir():
            raise DlschedError(f"{where}: is a folder; give a file name")
        save_kind(out)
        base = out.parent
        if not base.is_dir():
            raise DlschedError(f"{where}: {base} is not an existing folder")
    else:
        if out.exists() and not out.is_dir():
            raise DlschedError(f"{where}: exists and is not a folder")
        if out.is_dir() and any(out.iterdir()):
            if not force:
                raise DlschedError(f"{where}: folder is not empty (an earlier run?); give --force to replace "
                                   f"its contents, or another --out")
            cwd = Path.cwd().resolve()
            if out.resolve() in (cwd, *cwd.parents, Path.home().resolve()):
                raise DlschedError(f"{where}: --force would delete the current folder, one above it or home")
        base = out
        while not base.exists():
            base = base.parent
        if not base.is_dir():
            raise DlschedError(f"{where}: {base} is a file, not a folder")
    # a real try, not os.access: a folder the permission bits allow may still refuse (root in
    # /sys or /proc, a read-only mount); the probe is gone at once, nothing is left behind
    import tempfile
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dlsched-probe-", dir=base))
    except OSError as e:
        raise DlschedError(f"{where}: cannot write in {base}: {e.strerror or e}") from None


def _clear_out(out: Path) -> None:
    """Empty --out (checked by _check_out, force given): called once a run has its results, so a
    bad input or a failed run leaves the earlier results as they were."""
    if out.is_dir():
        for p in out.iterdir():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()


@app.command()
def simulate(
    cluster: str = typer.Option(..., "--cluster", "-c", help=CLUSTER_HELP),
    workload: str = typer.Option(..., "--workload", "-w", help=WORKLOAD_HELP),
    policy: str = typer.Option("fifo", "--policy", "-p", help="a policy name (see `dlsched policies`)"),
    out: Path = typer.Option(Path("out/run"), "--out", "-o", help="output folder"),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    fmt: Optional[str] = FORMAT_OPTION, mapping: Optional[str] = MAP_OPTION,
    policy_config: Optional[Path] = typer.Option(None, "--policy-config", help="YAML of policy parameters"),
    seed: int = _seed(),
    restart_delay_s: float = _delay(30.0, "--restart-delay-s", "cost of resume / migrate / resize"),
    start_delay_s: float = _delay(0.0, "--start-delay-s", "cost of a job's first start (Pollux: 30)"),
    speed_config: Optional[Path] = typer.Option(None, "--speed-config", help=SPEED_HELP),
    report: bool = typer.Option(False, "--report/--no-report", help="also write report.html with plots"),
    queues: Optional[str] = QUEUES_OPTION, tenancy: str = TENANCY_OPTION,
    throughputs: Optional[str] = THROUGHPUTS_OPTION, semantics: str = SEMANTICS_OPTION,
    against: bool = AGAINST_OPTION,
):
    """Simulate one policy; write jobs.parquet, summary.json, timeline and events to --out."""
    _check_out(out, force)
    _check_policies("--policy", [policy])
    table = check_semantics(semantics, "--policy", [policy], queues=queues, throughputs=throughputs)
    gavel = None if table is None else (table,)
    cl, jobs, wname, speed, prov, ten = _load(cluster, workload, fmt, seed, policy_config, speed_config, queues, tenancy,
                                                  None if gavel else throughputs, mapping)
    check_against(against, jobs, wname)
    res = _run_one(cl, jobs, wname, policy, seed, policy_config, restart_delay_s, speed, start_delay_s, ten, gavel,
                   semantics if semantics in ("tiresias", "pollux") else "native")
    _clear_out(out)
    res.save(out, prov)
    _print_summary([res], f"{policy} on {cl.name} / {wname}")
    if against:
        report_against([res], out, per_policy=False)
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
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    fmt: Optional[str] = FORMAT_OPTION, mapping: Optional[str] = MAP_OPTION,
    policy_config: Optional[Path] = typer.Option(None, "--policy-config", help="YAML of policy parameters"),
    seed: int = _seed(),
    restart_delay_s: float = _delay(30.0, "--restart-delay-s", "cost of resume / migrate / resize"),
    start_delay_s: float = _delay(0.0, "--start-delay-s", "cost of a job's first start (Pollux: 30)"),
    speed_config: Optional[Path] = typer.Option(None, "--speed-config", help=SPEED_HELP),
    queues: Optional[str] = QUEUES_OPTION, tenancy: str = TENANCY_OPTION,
    throughputs: Optional[str] = THROUGHPUTS_OPTION, semantics: str = SEMANTICS_OPTION,
    against: bool = AGAINST_OPTION,
):
    """Run several policies on the same cluster and workload; print a table, write an HTML report."""
    from dlsched.metrics.result import write_json
    _check_out(out, force)
    names = [p.strip() for p in policies.split(",") if p.strip()]
    if not names:
        raise DlschedError("--policies: give at least one policy name")
    if len(set(names)) < len(names):
        raise DlschedError(f"--policies: a policy is named twice ({policies})")
    _check_policies("--policies", names)
    table = check_semantics(semantics, "--policies", names, queues=queues, throughputs=throughputs)
    gavel = None if table is None else (table,)
    cl, jobs, wname, speed, prov, ten = _load(cluster, workload, fmt, seed, policy_config, speed_config, queues, tenancy,
                                                  None if gavel else throughputs, mapping)
    check_against(against, jobs, wname)
    results = [_run_one(cl, jobs, wname, p, seed, policy_config, restart_delay_s, speed, start_delay_s, ten, gavel,
                        semantics if semantics in ("tiresias", "pollux") else "native")
               for p in names]
    _clear_out(out)
    for res in results:
        res.save(out / res.policy, prov)
    write_json(out / "summary.json", {"provenance": prov, "policies": {r.policy: r.summary for r in results}})
    from dlsched.report import write_compare_report
    _print_summary(results, f"{cl.name} / {wname}")
    if against:
        report_against(results, out, per_policy=True)
    path = write_compare_report(results, out, title=f"dlsched: {', '.join(names)} on {cl.name} / {wname}")
    typer.echo(f"report: {path}")


@app.command("view")
def view(
    out_dir: Path = typer.Argument(..., help="an output folder of `dlsched simulate`"),
    port: int = typer.Option(8471, "--port", min=0, max=65535, help="port on 127.0.0.1 (0: any free one)"),
):
    """Browse a simulated run in a web browser: GPU timeline, the cluster at any time, each job.

    Listens on 127.0.0.1 only, read-only; prints a login URL with a token made for this process."""
    from dlsched.web.replay import serve
    serve(out_dir, port)


@app.command("policies")
def list_policies(all_kinds: bool = typer.Option(False, "--all", help="also list components by kind")):
    """The registry: every policy (profile), one line each."""
    import dlsched.policies  # noqa: F401
    import dlsched.tenancy.modes  # noqa: F401  (the tenancy's parts and modes)
    from dlsched.scheduler.framework import KINDS, REGISTRY
    for e in REGISTRY.entries("profile"):
        typer.echo(f"{e.name:<22} {e.doc}" + (f"  [{e.source}]" if e.source else ""))
    from dlsched.cli.semantics import list_gavel_policies
    list_gavel_policies()
    if all_kinds:
        for kind in KINDS[:-1]:
            typer.echo(f"\n{kind}:")
            for e in REGISTRY.entries(kind):
                typer.echo(f"  {e.name:<20} {e.doc}")


@app.command("experiment")
def experiment_cmd(
    name: Optional[str] = typer.Argument(None, help="experiment name (omit with --list)"),
    out: Path = typer.Option(Path("out/experiment"), "--out", "-o", help="output folder"),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    seeds: Optional[int] = typer.Option(None, "--seeds", min=1, help="number of seeds (default: the experiment's)"),
    list_only: bool = typer.Option(False, "--list", help="list the experiments"),
    strict: bool = typer.Option(False, "--strict", help="exit 1 when an expected direction does not hold"),
):
    """Reproduce a published result: runs, published figures beside ours, plots, report.html."""
    from dlsched.experiments import EXPERIMENTS
    from dlsched.experiments.base import get_experiment, write_outputs
    if list_only or name is None:
        for e in EXPERIMENTS.values():
            typer.echo(f"{e.name:<18} {e.title}  [{e.source}, {e.default_seeds} seeds]")
        return
    _check_out(out, force)
    exp, n = get_experiment(name, seeds)
    res = exp.run(seeds=n)
    _clear_out(out)
    report = write_outputs(res, out, _provenance(list(range(n)), experiment=(name, True)))
    from rich.table import Table
    con = _console()
    show = [k for k in ("mean_jct_s", "makespan_s", "mean_wait_s", "nic_bytes", "gpu_util", "sched_time_s",
                        "mean_gpus_requested", "mean_gpus_held", "gpu_h_held")
            if k in res.rows[0]]
    if show:        # (an experiment without run summaries, e.g. seed000-batch-size: its table below)
        t = Table(title=f"{res.title}: mean ± std over {res.rows[0]['seeds']} seeds")
        for col in (["group"] if any(r["group"] for r in res.rows) else []) + ["policy"] + show:
            t.add_column(col, justify="left" if col in ("group", "policy") else "right")
        for r in res.rows:
            cells = ([r["group"]] if any(x["group"] for x in res.rows) else []) + [r["policy"]]
            for k in show:
                m, sd = r.get(k, float("nan")), r.get(f"{k}_std", float("nan"))
                scale = 1e9 if k == "nic_bytes" else 1.0
                unit = " GB" if k == "nic_bytes" else ""
                cells.append(f"{m / scale:,.2f} ± {sd / scale:,.2f}{unit}"
                             if k in ("gpu_util", "sched_time_s", "mean_gpus_requested", "mean_gpus_held")
                             else f"{m / scale:,.0f} ± {sd / scale:,.0f}{unit}")
            t.add_row(*cells)
        con.print(t)
    if res.published:
        p = Table(title="published beside ours" if show else f"{res.title}: published beside ours")
        for col in res.published[0]:
            p.add_column(str(col))
        for row in res.published:
            p.add_row(*[(f"{v:,.0f}" if abs(v) >= 100 else f"{v:.4g}") if isinstance(v, float) else str(v)
                        for v in row.values()])     # small figures as given: 0.4 jobs/h is not 0
        con.print(p)
    for c in res.checks:
        typer.echo(f"{'PASS' if c.ok else 'FAIL'}  expected: {c.text}" + (f"  ({c.detail})" if c.detail else ""))
    typer.echo(f"report: {report}")
    if strict and not res.ok:
        raise typer.Exit(1)


from dlsched.cli import workload as _workload  # noqa: E402  (generate, convert, describe)

_workload.register(workload_app, WORKLOAD_HELP=WORKLOAD_HELP, _check_out=_check_out, _console=_console, _seed=_seed)

from dlsched.cli import clusters as _clusters  # noqa: E402  (describe, from-trace)

_clusters.register(app, cluster_help=CLUSTER_HELP)

from dlsched.cli import runtime as _runtime  # noqa: E402  (the real runtime's commands)

_runtime.register(app)

from dlsched.cli import scale as _scale  # noqa: E402  (sweep and plan on Ray)

_scale.register(app)

from dlsched.cli import estimator as _estimator  # noqa: E402  (Liquid's requirement estimator)

_estimator.register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point. What a user can cause ends in one line on stderr (`error: ...`) and exit status
    2: a usage error (unknown command or option, bad value), a DlschedError (bad input, unwritable
    --out) or an OSError (a file that cannot be read or written). A command the server refused
    (Refused: not allowed, not there, not possible now) gives its reason, exit status 1. Anything
    else is a bug: one line, exit status 1; DLSCHED_DEBUG=1 raises it with its traceback instead."""
    try:   # recent typer vendors click as typer._click
        from typer._click.exceptions import ClickException, NoArgsIsHelpError
    except ImportError:  # pragma: no cover
        from click.exceptions import ClickException, NoArgsIsHelpError
    global _ARGV
    _ARGV = list(sys.argv[1:] if argv is None else argv)
    try:
        rc = app(args=_ARGV, standalone_mode=False, prog_name="dlsched")
        return rc if isinstance(rc, int) else 0
    except NoArgsIsHelpError as e:
        e.show()
        return 2
    except ClickException as e:     # usage errors: unknown command or option, missing or bad value
        ctx = getattr(e, "ctx", None)
        where = f"{ctx.command_path}: " if ctx else ""
        hint = f" (see '{ctx.command_path} --help')" if ctx else ""
        return _fail(f"{where}{e.format_message()}{hint}", e.exit_code)
    except typer.Abort:
        return _fail("aborted", 1)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Refused as e:            # the server said no: its reason, exit 1
        return _fail(str(e), 1)
    except (DlschedError, OSError) as e:
        return _fail(str(e), 2)
    except Exception as e:
        if os.environ.get("DLSCHED_DEBUG"):
            raise
        return _fail(f"internal error (please report it; DLSCHED_DEBUG=1 shows the traceback): "
                     f"{type(e).__name__}: {e}", 1)


def _fail(message: str, code: int) -> int:
    print("error: " + " ".join(str(message).split()), file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
