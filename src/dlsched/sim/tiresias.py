"""`--semantics tiresias`: dlsched's engine set up as the Tiresias simulator runs (Gu et al.,
NSDI'19; SymbioticLab/Tiresias, `simulator/`, commit 959f9b0). No new engine: the preset only
sets existing knobs, each from the simulator's code:

| rule                         | Tiresias's simulator                                    | here                               |
| ---                          | ---                                                     | ---                                |
| no (re)start cost            | a job runs its `duration`; preemption and resumption    | restart_delay_s = start_delay_s = 0|
|                              | are free (run_sim.py)                                   |                                    |
| `fifo`: gang per node        | `one_queue_fifo_sim_jobs` with `--scheme=yarn`          | `fifo` with gang, strict head of   |
|                              | (switch.py `ms_yarn_alloc_res`): one node when the job  | line and the `tiresias_node` filter|
|                              | fits a node, else whole free nodes + one for the rest;  |                                    |
|                              | the head of the queue blocks the rest                   |                                    |
| `tiresias`: 2D-LAS queues    | `dlas_sim_jobs(gputime=True)` (`--schedule=dlas-gpu`):  | `tiresias` with thresholds         |
|                              | jobs.py `num_queue = 3`, `queue_limit = [3250, 7200,    | [3250, 7200] GPU-seconds           |
|                              | 18000]` (the third limit is never read with 3 queues)   |                                    |
| no starvation guard          | `dlas-gpu` calls `dlas_sim_jobs(True)`: solve_starvation| starve_factor = 0                  |
|                              | = 0 (the `dlas-gpu-N` variants set N)                   |                                    |
| running before waiting       | after each pass a queue's pending jobs move behind its  | running_first = true               |
|                              | running ones: no preemption inside a queue              |                                    |
| GPU counting for 2D-LAS      | `dlas_sim_jobs` checks `CLUSTER.free_gpu` only (the     | `fits` + `first_fit`, no node rule |
|                              | placement scheme is not used)                           |                                    |
| event-driven                 | events at arrivals, completions and queue jumps; no     | rounds on events (event_rounds) and|
|                              | time step                                               | at threshold crossings, no round_s |

Policies: `fifo` (Tiresias's `fifo`) and `tiresias` (its `dlas-gpu`); other names are refused.
"""
from __future__ import annotations

from dataclasses import replace

from dlsched.core.errors import DlschedError

#: jobs.py, `_TFJobs.__init__`: `self.num_queue = 3`, `self.queue_limit = [3250, 7200, 18000]`
#: (GPU-seconds for dlas-gpu); with 3 queues only the first two limits are thresholds.
THRESHOLDS = (3250.0, 7200.0)
RESTART_DELAY_S = 0.0
START_DELAY_S = 0.0
#: dlsched policy -> the Tiresias simulator's `--schedule` it reproduces
POLICIES = {"fifo": "fifo (--scheme=yarn)", "tiresias": "dlas-gpu"}


def check_policy(policy: str, flag: str = "policy") -> None:
    if policy not in POLICIES:
        raise DlschedError(f"{flag}: --semantics tiresias runs {', '.join(POLICIES)} (Tiresias's "
                           f"{' and '.join(POLICIES.values())}), not {policy!r}")


def profile(policy: str, settings: dict | None = None):
    """The built profile for `policy` under Tiresias's rules; `settings` (a policy config's entry
    for the policy) go on top, as for any profile."""
    import dlsched.policies  # noqa: F401  (registers the profiles and tiresias_node)
    from dlsched.scheduler.framework import REGISTRY
    from dlsched.scheduler.profile import Profile
    check_policy(policy)
    spec = REGISTRY.get("profile", policy)
    if policy == "fifo":
        spec = replace(spec, filters=(*spec.filters, "tiresias_node"), gang=True, blocking=True)
    else:
        params = {**spec.params, "tiresias": {**spec.params.get("tiresias", {}), "thresholds": list(THRESHOLDS),
                                              "starve_factor": 0.0, "running_first": True}}
        spec = replace(spec, params=params, round_s=None, event_rounds=True)
    return Profile(spec, settings)
