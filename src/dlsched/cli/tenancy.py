"""The CLI's tenancy options (`--queues`, `--tenancy`) and their checks, shared by simulate,
compare and the experiments."""
from __future__ import annotations

from typing import Optional

import typer

QUEUES_HELP = ("a queue tree (YAML: queues with quotas, docs/tenancy.md), or a bundled one: philly, "
               "philly-isolated; none: one tenant, no quotas")
TENANCY_HELP = ("how the queues share the cluster: kueue, kueue-fair, kai, volcano-proportion, "
                "volcano-capacity, slurm-fairtree (with --queues)")
QUEUES_OPTION = typer.Option(None, "--queues", help=QUEUES_HELP)
TENANCY_OPTION = typer.Option("kueue", "--tenancy", help=TENANCY_HELP)


def load_tenancy(queues: Optional[str], mode: str, jobs, workload: str | None = None):
    """(queue tree or None, mode), every job's queue and the mode checked: ConfigErrors name the
    file, the line and the field."""
    from dlsched.core.errors import DlschedError
    from dlsched.scheduler.framework import REGISTRY
    from dlsched.tenancy import load_queues
    from dlsched.tenancy.engine import Tenancy
    import dlsched.tenancy.modes  # noqa: F401  (the modes register themselves)
    if mode not in REGISTRY.names("tenancy"):
        raise DlschedError(f"--tenancy: unknown mode {mode!r} (modes: {', '.join(REGISTRY.names('tenancy'))})")
    if queues is None:
        if mode != "kueue":
            raise DlschedError("--tenancy: needs --queues (a queue tree to share the cluster by)")
        return None, mode
    tree = load_queues(queues)
    Tenancy(tree, mode).check_jobs(jobs, workload)
    return tree, mode
