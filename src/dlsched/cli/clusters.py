"""`dlsched cluster NAME` (describe a preset or a cluster file; also `dlsched cluster describe
NAME`) and `dlsched cluster from-trace FILE --format ...` (dlsched.cluster.fromtrace)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperGroup

from dlsched.cli.client import new_app
from dlsched.core.errors import DlschedError


_NAME = re.compile(r"[A-Za-z0-9._:-]{1,64}")


class _DescribeByDefault(TyperGroup):
    """`dlsched cluster philly` reads as `dlsched cluster describe philly`: a first word that is
    no subcommand (and no option) is the cluster to describe."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["describe", *args]
        return super().parse_args(ctx, args)


def register(app: typer.Typer, *, cluster_help: str) -> None:
    cluster_app = new_app(cls=_DescribeByDefault, no_args_is_help=True,
                          help="Describe a cluster (`dlsched cluster NAME`), or build one from a trace's machine list.")
    app.add_typer(cluster_app, name="cluster")

    @cluster_app.command("describe")
    def describe(cluster: str = typer.Argument(..., help=cluster_help)):
        """Describe a cluster preset or YAML file."""
        from dlsched.cluster import load_cluster
        typer.echo(load_cluster(cluster).describe())

    @cluster_app.command("from-trace")
    def from_trace(
        file: Path = typer.Argument(..., help="the trace's machine list"),
        fmt: str = typer.Option(..., "--format", help="pai-machines, philly-machines, helios-vc or openb-nodes"),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="cluster YAML to write (default: print it)"),
        queues_out: Optional[Path] = typer.Option(None, "--queues-out",
                                                  help="helios-vc: also write the queue tree, one queue per VC"),
        cluster_name: Optional[str] = typer.Option(None, "--name", help="the cluster's name (default: the file's; "
                                                   "1-64 letters, digits, '.', '_', ':' or '-')"),
        date: Optional[str] = typer.Option(None, "--date", help="helios-vc: the day (YYYY-MM-DD; default: the last)"),
    ):
        """Build a cluster file from a public trace's machine list.

        The lists read: PAI's machine spec, Philly's machine list, Helios's GPUs per VC (with
        --queues-out, a queue per VC with its GPUs as nominal quota), OpenB's node list.

        Both files are checked before either is written, and each is written whole or not at all."""
        from dlsched.cluster.fromtrace import cluster_from_trace, dump, write_atomic
        if cluster_name is not None and not _NAME.fullmatch(cluster_name):
            raise DlschedError(f"--name {cluster_name[:80]!r}: 1-64 letters, digits, '.', '_', ':' or '-'")
        if queues_out is not None and fmt != "helios-vc":
            raise DlschedError("--queues-out: only with --format helios-vc (the other machine lists name no VC)")
        for flag, p in (("--out", out), ("--queues-out", queues_out)):
            if p is not None and (p.is_dir() or not p.parent.is_dir()):
                raise DlschedError(f"{flag} {p}: give a file in an existing folder")
        if out is not None and queues_out is not None and out.resolve() == queues_out.resolve():
            raise DlschedError("--queues-out: the same file as --out")
        spec, queues, note = cluster_from_trace(file, fmt, name=cluster_name, date=date)
        text = dump(spec, note)
        qtext = dump(queues, note.replace("`dlsched cluster from-trace", "`dlsched cluster from-trace --queues-out"))\
            if queues_out is not None else None
        if out is None:
            typer.echo(text, nl=False)
        else:
            write_atomic(out, text)
        if qtext is not None:
            write_atomic(queues_out, qtext)
        from dlsched.cluster.topology import cluster_from_dict
        summary = cluster_from_dict(spec).describe()
        if out is not None:
            typer.echo(f"wrote {out}: {summary}")
        if queues_out is not None:
            typer.echo(f"wrote {queues_out}: {len(queues['queues'])} queues", err=out is None)
