"""`--semantics pollux`: dlsched's engine set up as the Pollux simulator runs its baselines (Qiao et
al., OSDI'21; petuum/adaptdl, branch osdi21-artifact, `simulator/`): the settings the
pollux-fidelity experiment (dlsched.experiments.pollux_fidelity) runs Tiresias and Optimus with,
as one named preset. No new engine: the preset only sets existing knobs.

| rule                          | Pollux's simulator                                        | here                              |
| ---                           | ---                                                       | ---                               |
| (re)start cost on every       | `rescale_time = 30`: a job pays 30 s each time its         | start_delay_s = restart_delay_s   |
| allocation change, the first  | allocation changes, its first start included              | = 30                              |
| included                      | (simulator.py)                                            |                                   |
| rounds at multiples of 60 s   | `--interval 60`: the policy runs every 60 s of simulated  | round_s = 60, event_rounds = false|
|                               | time, not on arrivals or completions                      |                                   |
| Optimus: no early-state       | its estimates come from the applications' profiles from   | optimus early_factor = 1.0        |
| discount                      | the start (simulator/optimus.py)                          |                                   |
| Tiresias: one 2D-LAS threshold| `_queue_threshold = 3600 * 16` GPU-seconds, starvation     | tiresias's defaults (already       |
| and most-free placement       | guard off, most-free-GPU chunks (simulator/tiresias.py)   | Pollux's: policies/order/tiresias) |

Run it on the `pollux` cluster preset (16 nodes x 4 T4) with the pollux-1 .. pollux-8 workloads
for the artifact's setting; the preset itself is the semantics, not the cluster or the jobs.
Policies: `tiresias` and `optimus` (the two baselines whose figures pollux-fidelity checks);
other names are refused. A policy config's settings for the policy go on top of the preset's.
"""
from __future__ import annotations

from dlsched.core.errors import DlschedError

#: simulator.py: `rescale_time = 30` on every reallocation, the first included
START_DELAY_S = 30.0
RESTART_DELAY_S = 30.0
#: `--interval 60`: rounds at multiples of 60 s only
ROUND_S = 60.0
#: each policy's settings under the preset (a policy config's entry, as `--policy-config` gives)
SETTINGS = {
    "tiresias": {"round_s": ROUND_S, "event_rounds": False},
    "optimus": {"round_s": ROUND_S, "event_rounds": False, "params": {"optimus": {"early_factor": 1.0}}},
}
#: dlsched policy -> the Pollux simulator's policy it reproduces
POLICIES = {"tiresias": "simulator/tiresias.py TiresiasPolicy", "optimus": "simulator/optimus.py OptimusPolicy"}


def check_policy(policy: str, flag: str = "policy") -> None:
    if policy not in POLICIES:
        raise DlschedError(f"{flag}: --semantics pollux runs {', '.join(POLICIES)} (the Pollux simulator's "
                           f"baselines), not {policy!r}")


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def settings(policy: str, user: dict | None = None) -> dict:
    """The preset's settings for `policy`, with `user` (a policy config's entry) on top."""
    check_policy(policy)
    return _merge(SETTINGS[policy], user or {})


def profile(policy: str, user: dict | None = None):
    """The built profile for `policy` under Pollux's rules."""
    import dlsched.policies  # noqa: F401  (registers the profiles)
    from dlsched.scheduler.profile import build_profile
    return build_profile(policy, settings(policy, user))
