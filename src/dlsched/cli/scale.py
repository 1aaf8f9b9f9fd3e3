"""Scale out on Ray: `dlsched sweep` (a grid of simulations) and `dlsched plan` (capacity planning).
Both run their simulations as Ray tasks: a private local Ray by default, a cluster with
--ray-address."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from dlsched.cli.tenancy import QUEUES_OPTION, TENANCY_OPTION
from dlsched.core.errors import DlschedError

RAY_HELP = "a running Ray cluster (HOST:PORT); default: a private local Ray on this machine's cores"
WORKERS_HELP = "CPUs of the local Ray (default: all of this machine's)"


def _bar(label: str, unit: str):
    """A rich progress bar on stderr: update(done, total)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from dlsched.cli.main import _console
    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn(unit), TimeElapsedColumn(),
                   console=_console(stderr=True), transient=True)
    task = bar.add_task(label, total=None)
    return bar, lambda done, total: bar.update(task, completed=done, total=total)


def _sweep_out(out: Path, force: bool) -> None:
    """A new folder, an earlier run of a sweep (it has cells/: its done cells are kept), or, with
    --force, anything _check_out allows replacing."""
    import os

    from dlsched.cli.main import _check_out, _clear_out
    if out.is_dir() and (out / "cells").is_dir() and not force:
        if not os.access(out, os.W_OK | os.X_OK) or not os.access(out / "cells", os.W_OK | os.X_OK):
            raise DlschedError(f"--out {out}: is not writable")
        return
    _check_out(out, force)
    if force:
        _clear_out(out)


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep(
        file: Path = typer.Argument(..., help="the sweep file (YAML: clusters, workloads, policies, parameters, seeds)"),
        out: Path = typer.Option(Path("out/sweep"), "--out", "-o", help="output folder; an earlier run's done cells are skipped"),
        force: bool = typer.Option(False, "--force", help="start over: delete the folder's earlier results first"),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help=RAY_HELP),
        workers: Optional[int] = typer.Option(None, "--workers", min=1, max=1024, help=WORKERS_HELP),
    ):
        """Run every cell of a sweep as Ray tasks and compare them.

        The cells are clusters x workloads x policies x parameters x seeds; they stream into
        OUT/results.parquet and are compared in OUT/report.md."""
        from dlsched.cli.main import _console
        from dlsched.report import rich_table
        from dlsched.sweep.grid import load_sweep
        from dlsched.sweep.run import report_rows, run_sweep
        sw = load_sweep(file)            # every error before any work
        _sweep_out(out, force)
        bar, update = _bar(f"sweep {sw.name}", "cells")
        with bar:
            o = run_sweep(file, out, address=ray_address, workers=workers, progress=update, sweep=sw)
        header, rows = report_rows(o.groups)
        # the terminal shows the columns that differ between rows (report.md has them all)
        keep = [i for i, h in enumerate(header) if h in ("policy", "seeds") or len({r[i] for r in rows}) > 1
                or i >= 5]
        _console().print(rich_table([{header[i]: r[i] for i in keep} for r in rows], title=f"sweep {sw.name}"))
        typer.echo(f"{len(sw.cells)} cells: {o.ran - len(o.failed)} run, {o.skipped} already done, "
                   f"{len(o.failed)} failed")
        typer.echo(f"results: {out / 'results.parquet'}\nreport: {out / 'report.md'}")
        for f in o.failed[:10]:
            typer.echo(f"failed: {f['policy']} / {Path(f['workload']).name} / seed {f['seed']}: {f['error']}", err=True)
        if o.failed:
            print(f"error: {len(o.failed)} of {len(sw.cells)} cells failed (listed in {out / 'report.md'}); "
                  "run the sweep again to retry them", file=sys.stderr)
            raise typer.Exit(1)

    @app.command("plan")
    def plan(
        workload: str = typer.Option(..., "--workload", "-w", help="a workload file, generator or bundled name"),
        cluster: str = typer.Option(..., "--cluster", "-c", help="a preset or cluster YAML: the shape to scale"),
        target: str = typer.Option(..., "--target", "-t", help="e.g. p95_wait_s<=1h, mean_jct_s<=2d, gpu_util>=0.7"),
        policies: str = typer.Option("fifo", "--policies", "-p", help="comma-separated policies to compare"),
        group: int = typer.Option(0, "--group", min=0, help="the node group to scale (index in node_groups)"),
        min_nodes: int = typer.Option(1, "--min-nodes", min=1, help="smallest size to consider"),
        max_nodes: Optional[int] = typer.Option(None, "--max-nodes", min=1, max=100_000,
                                                help="largest size to consider (default: up to 100,000)"),
        tenant: Optional[str] = typer.Option(None, "--tenant", help="comma-separated users (Philly: virtual "
                                             "clusters): size a cluster for each one's jobs alone"),
        queues: Optional[str] = QUEUES_OPTION,
        tenancy: Optional[str] = TENANCY_OPTION,
        seed: int = typer.Option(0, "--seed", min=0, help="random seed (generators and policies)"),
        out: Path = typer.Option(Path("out/plan"), "--out", "-o", help="output folder"),
        force: bool = typer.Option(False, "--force", help="replace the contents of a non-empty --out folder"),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help=RAY_HELP),
        workers: Optional[int] = typer.Option(None, "--workers", min=1, max=1024, help=WORKERS_HELP),
    ):
        """Capacity planning: the smallest cluster and the best policy that meet a target.

        One node group of the cluster is scaled, by parallel bisection on Ray, on the workload
        given; prints the curve. With --queues every run keeps the queue tree's quotas as they
        are while the nodes grow."""
        from dlsched.cli.main import _check_out, _check_policies, _clear_out, _console
        from dlsched.report import rich_table
        from dlsched.sweep.plan import parse_target, run_plan, write_plan
        tgt = parse_target(target)
        names = [p.strip() for p in policies.split(",") if p.strip()]
        if not names or len(set(names)) < len(names):
            raise DlschedError("--policies: give distinct policy names, comma-separated")
        _check_policies("--policies", names)
        tenants = [t.strip() for t in tenant.split(",") if t.strip()] if tenant else None
        if tenant is not None and not tenants:
            raise DlschedError("--tenant: give at least one user name")
        if max_nodes is not None and max_nodes < min_nodes:
            raise DlschedError(f"--max-nodes {max_nodes}: must be >= --min-nodes ({min_nodes})")
        _check_out(out, force)
        bar, update = _bar("plan", "runs")
        with bar:
            o = run_plan(workload, cluster, names, tgt, group=group, min_nodes=min_nodes, max_nodes=max_nodes,
                         tenants=tenants, seed=seed, address=ray_address, workers=workers,
                         queues=queues, tenancy=tenancy,
                         progress=lambda rounds, runs: update(runs, None))
        _clear_out(out)
        paths = write_plan(o, out)
        rows = [{"tenant": r["tenant"], "policy": r["policy"], "nodes": str(r["nodes"]), "GPUs": str(r["gpus"]),
                 tgt.metric: "-" if r[tgt.metric] is None else f"{r[tgt.metric]:,.2f}",
                 "jobs done": f"{r['finished']:.0f} of {r['jobs']:.0f}", "meets": "yes" if r["met"] else "no"}
                for r in o.curve()]
        if not tenants:
            for r in rows:
                del r["tenant"]
        _console().print(rich_table(rows, title=f"{tgt.text()}: the curve (node group {group})"))
        for tnt, a in o.answers().items():
            who = f"tenant {tnt}: " if tnt else ""
            if a is None:
                typer.echo(f"{who}no size up to the limit meets {tgt.text()} with {', '.join(names)}")
            else:
                typer.echo(f"{who}answer: {a['nodes']} nodes ({a['gpus']} GPUs) in node group {group} with "
                           f"{a['policy']} ({tgt.metric} = {a['metric']:,.2f})")
        typer.echo(f"curve: {paths['curve']}\nplot: {paths['plot']}\nplan: {paths['plan']}")
