"""`dlsched estimator train|evaluate`: Liquid's requirement estimator (dlsched.estimate) trained and
scored on generated jobs or on a user's own history (a workload file with measured durations, or
the runtime's store). Errors in the data are one line naming the file, line (or job) and field,
exit status 2, as everywhere in the CLI."""
from __future__ import annotations

import json
from pathlib import Path

import typer

from dlsched.core.errors import DlschedError

SOURCE_HELP = ("synthetic[:jobs=N] (jobs and allocations drawn at random, labelled by the speed model), "
               "a workload file whose rows carry measured duration_s, or a runtime store "
               "(<state dir>/dlsched.db, or the state dir)")
MODEL_HELP = "a saved estimator's name (in the cache: $DLSCHED_CACHE_DIR or ~/.cache/dlsched) or a .joblib path"


def _metrics_table(metrics: dict, title: str):
    from rich.table import Table

    from dlsched.estimate.label import TARGETS
    t = Table(title=title)
    t.add_column("method")
    for target in TARGETS:
        t.add_column(f"{target} RMSE", justify="right")
        t.add_column(f"{target} R^2", justify="right")
    t.add_column("mean R^2", justify="right")
    for method, s in metrics.items():
        t.add_row(method, *[f"{s[x][k]:.3f}" for x in TARGETS for k in ("rmse", "r2")], f"{s['mean_r2']:.3f}")
    return t


def register(app: typer.Typer) -> None:
    from dlsched.cli.client import new_app
    est_app = new_app(no_args_is_help=True,
                      help="Liquid's resource requirement estimator: train and evaluate.")
    app.add_typer(est_app, name="estimator")

    @est_app.command("train")
    def train_cmd(
        source: str = typer.Argument("synthetic", help=SOURCE_HELP),
        name: str = typer.Option("default", "--name", "-n", help=MODEL_HELP + " to save as"),
        seed: int = typer.Option(0, "--seed", min=0, help="random seed (generated jobs, split, forest)"),
        tolerance: float = typer.Option(0.05, "--tolerance", min=0.0, max=1.0,
                                        help="a size is enough when its run time is within this fraction of the best"),
        cluster: str = typer.Option("liquid-20", "--cluster", "-c", help="reference cluster of the labels"),
        force: bool = typer.Option(False, "--force", help="replace a saved estimator of that name"),
    ):
        """Train on SOURCE (80 % of its jobs), score on the rest, save with its provenance."""
        from dlsched.cli.main import _console
        from dlsched.estimate import saved
        path = saved.model_path(name)
        if path.exists() and not force:
            raise DlschedError(f"--name {name}: {path} exists; give --force to replace it")
        est, prov = saved.train(source, seed=seed, tolerance=tolerance, cluster=cluster)
        saved.save(est, name, prov)
        _console().print(_metrics_table(prov["metrics"], f"held-out jobs: {prov['test_rows']} of {prov['rows']} rows"))
        typer.echo(f"model: {path}\nprovenance: {saved.sidecar_path(path)}")

    @est_app.command("evaluate")
    def evaluate_cmd(
        source: str = typer.Argument(..., help=SOURCE_HELP),
        model: str = typer.Option("default", "--model", "-m", "--name", "-n", help=MODEL_HELP),
        seed: int = typer.Option(1, "--seed", min=0, help="random seed of generated jobs"),
        as_json: bool = typer.Option(False, "--json", help="print JSON"),
    ):
        """Score a saved estimator on every job of SOURCE: forest vs linear regression vs the requests."""
        from dlsched.cli.main import _console
        from dlsched.estimate import saved
        from dlsched.estimate.data import load_data
        from dlsched.estimate.label import Oracle
        from dlsched.estimate.model import evaluate
        est, prov = saved.load(model)
        oracle = Oracle(prov["source"].get("reference_cluster", "liquid-20"), prov["tolerance"])
        data = load_data(source, seed=seed, oracle=oracle)
        metrics = evaluate(est, data)
        if as_json:
            typer.echo(json.dumps({"model": str(saved.model_path(model)), "data": data.source,
                                   "rows": len(data), "metrics": metrics}, indent=2))
            return
        _console().print(_metrics_table(metrics, f"{Path(str(source)).name}: {len(data)} rows, model {model}"))

