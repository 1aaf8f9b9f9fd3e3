"""`dlsched workload generate | convert | describe`, and the --format / --map options every command
that reads a workload takes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

FORMAT_HELP = ("workload format (default: recognised from the file): schema, philly, pollux, gavel, tiresias, "
               "helios, acme, slurm, swf, pai, openb, spot, elasticflow, philly-raw; or an encoding: csv, parquet, jsonl")
MAP_HELP = ("read any table by its columns: name=column pairs (submit, duration, gpus, user, queue, job_id, "
            "gpu_type, start, end, deadline), e.g. submit=ts,gpus=num_gpu,queue=vc; or a YAML file of them")
FORMAT_OPTION = typer.Option(None, "--format", help=FORMAT_HELP)
MAP_OPTION = typer.Option(None, "--map", help=MAP_HELP)


def register(workload_app: typer.Typer, *, WORKLOAD_HELP: str, _check_out, _console, _seed) -> None:
    """Add the commands to `dlsched workload` (main's helpers passed in: main may run as __main__)."""

    @workload_app.command("generate")
    def wl_generate(
        name: str = typer.Argument(..., help="generator, e.g. seed000, sample, poisson:jobs=500,rate=0.02"),
        out: Path = typer.Option(..., "--out", "-o", help="file to write (.csv, .csv.gz, .parquet, .jsonl)"),
        seed: int = _seed(),
    ):
        """Generate a workload into the common schema."""
        from dlsched.workload.io import load_workload, save_workload
        _check_out(out, file=True)
        jobs = load_workload(name, seed=seed)
        save_workload(jobs, out)
        typer.echo(f"wrote {len(jobs)} jobs to {out}")

    @workload_app.command("convert")
    def wl_convert(
        src: str = typer.Argument(..., help=WORKLOAD_HELP),
        out: Path = typer.Option(..., "--out", "-o", help="file to write (.csv, .csv.gz, .parquet, .jsonl)"),
        fmt: Optional[str] = FORMAT_OPTION, mapping: Optional[str] = MAP_OPTION,
    ):
        """Convert a trace (any format dlsched reads, or any table with --map) into the common schema."""
        from dlsched.workload.io import load_workload, save_workload
        _check_out(out, file=True)
        jobs = load_workload(src, format=fmt, mapping=mapping)
        save_workload(jobs, out)
        typer.echo(f"wrote {len(jobs)} jobs to {out}")

    @workload_app.command("describe")
    def wl_describe(
        src: str = typer.Argument(..., help=WORKLOAD_HELP),
        fmt: Optional[str] = FORMAT_OPTION, mapping: Optional[str] = MAP_OPTION,
        as_json: bool = typer.Option(False, "--json", help="print JSON"),
    ):
        """Summarise a workload (users, queues, GPU types, time span) or a throughput table.

        A workload: its format, jobs, users, queues, GPU types, time span, GPU mix and models, and
        the rows a reader dropped, by reason."""
        from dlsched.cli.speed import describe_table
        from dlsched.workload.io import describe_workload, inspect_workload
        d = describe_table(src) if fmt is None and mapping is None else None
        if d is None:
            jobs, info = inspect_workload(src, format=fmt, mapping=mapping)
            d = {"format": info.get("format"), **describe_workload(jobs), "dropped": info.get("dropped", {})}
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
