"""The CLI's `--semantics` option (simulate, compare): `native` (dlsched's event-driven engine,
the default), `gavel` (Gavel's round mechanism running Gavel's policies, dlsched.sim.gavel) or
`tiresias` (the Tiresias simulator's rules on dlsched's engine, dlsched.sim.tiresias) or `pollux`
(the Pollux simulator's settings for its baselines, dlsched.sim.pollux)."""
from __future__ import annotations

import typer

from dlsched.core.errors import DlschedError

SEMANTICS_HELP = ("native (dlsched's engine), gavel (Gavel's 360 s rounds and its gavel-* policies, "
                  "with Gavel's throughput table unless --throughputs names another) or tiresias (the "
                  "Tiresias simulator's rules: fifo or tiresias, gang per node, its queue thresholds, "
                  "no restart cost) or pollux (the Pollux simulator's: tiresias or optimus, 30 s (re)start "
                  "delay, rounds at multiples of 60 s, Optimus early_factor 1.0; the delay options are not used)")
SEMANTICS_OPTION = typer.Option("native", "--semantics", help=SEMANTICS_HELP)


_PEER_SIMULATORS = {"tiresias": "Tiresias", "pollux": "Pollux"}   # semantics -> whose simulator


def check_semantics(semantics: str, flag: str, policies: list[str], *, queues=None, throughputs=None):
    """None for `native`, `tiresias` and `pollux`; for `gavel`, the throughput table it will run with (--throughputs, else
    Gavel's bundled one). A one-line error for a bad value, a policy the semantics cannot run or
    a bad table."""
    from dlsched.sim.gavel import GAVEL_POLICIES, SEMANTICS
    if semantics not in SEMANTICS:
        raise DlschedError(f"--semantics: must be one of {', '.join(SEMANTICS)}, got {semantics!r}")
    if semantics in _PEER_SIMULATORS:                 # a preset over dlsched's engine
        import importlib
        check_policy = importlib.import_module(f"dlsched.sim.{semantics}").check_policy
        for p in policies:
            check_policy(p, flag)
        if queues is not None:
            raise DlschedError(f"--queues: the {_PEER_SIMULATORS[semantics]} simulator has no tenants; "
                               "drop --queues or use --semantics native")
        return None
    gavel = semantics == "gavel"
    for p in policies:
        if gavel and p not in GAVEL_POLICIES:
            raise DlschedError(f"{flag}: --semantics gavel runs Gavel's policies ({', '.join(GAVEL_POLICIES)}), "
                               f"not {p!r}")
        if not gavel and p in GAVEL_POLICIES and GAVEL_POLICIES[p].packing:
            raise DlschedError(f"{flag}: {p} shares GPUs between pairs of jobs, which only Gavel's round mechanism "
                               "runs: add --semantics gavel")
    if gavel and queues is not None:
        raise DlschedError("--queues: Gavel's round mechanism has no queues; drop --queues or use --semantics native")
    if not gavel:
        return None
    from dlsched.workload.throughputs import load_throughputs
    return load_throughputs(throughputs or "gavel")


def run_gavel(cluster, jobs, wname: str, policy: str, seed: int, table, progress=None):
    """One run under Gavel's mechanism with `table` (check_semantics's)."""
    from dlsched.sim.gavel import simulate_gavel
    return simulate_gavel(cluster, jobs, policy, table, seed=seed, workload_name=wname, progress=progress)


def list_gavel_policies() -> None:
    """`dlsched policies`' second part."""
    from dlsched.sim.gavel import GAVEL_POLICIES
    typer.echo("\nGavel's policies [Narayanan et al. OSDI'20] under --semantics gavel (Gavel's round mechanism); "
               "without it, the profiles above (leases per GPU type):")
    for g in GAVEL_POLICIES.values():
        only = "  [--semantics gavel only: pairs share GPUs]" if g.packing else ""
        typer.echo(f"{g.name:<44} {g.summary}  (Gavel: {g.gavel}){only}")
