"""Gavel's job generator (Narayanan et al., OSDI'20; stanford-futuredata/gavel), draw for draw.

`gavel:rate=R,jobs=N[,multi_gpu=0|1][,priorities=0|1][,slos=0|1]` with dlsched's `--seed S`
gives the first N jobs, in order, that Gavel's simulator generates with `--seed S` (drivers
`scripts/drivers/simulate_scheduler_with_generated_jobs.py -l L` and
`scripts/sweeps/run_sweep_continuous.py`, which sets `lam = 3600.0 / throughput`):

| parameter  | Gavel                                                              | default  |
| ---        | ---                                                                | ---      |
| rate       | jobs per hour: lam = 3600.0 / rate, the mean gap in seconds        | required |
| lam        | instead of rate: the driver's `-l/--lam` as given (0: all at 0 s)  |          |
| jobs       | how many jobs (Gavel generates until a window of job ids is done)  | 1000     |
| multi_gpu  | `--generate-multi-gpu-jobs`                                        | 0        |
| priorities | `--generate-multi-priority-jobs`                                   | 0        |
| slos       | `assign_SLOs` (see below)                                          | 0        |

(`-l L` is `lam=L`; `rate=3600/L` gives the same jobs whenever 3600 / (3600 / L) == L in floats.)

Random streams, seeded as `Scheduler._initialize_seeds(seed)` seeds them (all `random.Random`,
whose `random()`, `uniform()` and `choice()` give the same numbers on every Python 3):
seed+2 the jobs, seed+3 the gaps, seed+6 the SLOs. seed+5 shuffles worker types while
scheduling and draws nothing here. Per job, in this order (`utils.generate_job`, called with
`always_generate_scale_factor=True`, so the scale factor is drawn even without multi_gpu):

1. jobs stream `uniform(0, 1)` = r: scale factor 1 if r < 0.7, 2 if r <= 0.8, 4 if r <= 0.95,
   else 8 (Philly's shares 0.70 / 0.10 / 0.15 / 0.05); forced to 1 without multi_gpu.
2. jobs stream `random()` >= 0.8: duration `60 * 10 ** uniform(3, 4)` s, else
   `60 * 10 ** uniform(1.5, 3)` s (the run time alone on V100s).
3. jobs stream `choice(JOB_TYPES)` (Gavel's 26 templates in `job_table.py` order), drawn again
   while the scale factor is > 1 and the type is not distributed.
4. with priorities: jobs stream `uniform(0, 1)` <= 0.2 gives priority weight 5, else 1.
5. with slos: SLO stream `uniform(0, 1)`: SLO 1.2 if < 0.33, 2.0 if < 0.67, else 10.0.

total_steps = duration x `throughputs['v100'][(job_type, sf)]['null']`, read from the bundled
`gavel` table (Gavel's `simulation_throughputs.json`, unchanged). Arrivals: the first job at 0,
then each next = `-log(1 - gaps.random()) / (1.0 / lam)` + the previous one (one draw per job,
after the job; `Scheduler._sample_arrival_time_delta`).

JobSpec, as `gavel_trace.read_gavel_trace` builds one from a trace row: job_id `gavel-<i>`
(0-based generation order = Gavel's job id, zero-padded to the width of the last index), model =
job_type, iterations = total_steps, scale_factor workers of 1 GPU (+4 cores, 16 GB) as a dl gang
with comm allreduce, priority = the weight, duration_s None, submit_time_s = the arrival.

Checked against Gavel's own code (its simulator run with FIFO, jobs read from its
`_all_jobs`; the modules its generated-job run does not use stubbed): job type, scale factor,
total_steps, arrival, priority and SLO equal as floats for every job of seed 0 rate 1 (342
jobs; 319 with multi_gpu), seed 3 rate 2.5 with all three flags (596) and seed 7 rate 4 with
multi_gpu and priorities (1,504). `tests/unit/test_gavel_gen.py` holds the first jobs it printed.

Where we differ from Gavel:
- iterations keep total_steps' fraction, as Gavel's simulator holds it. A trace Gavel writes
  (`--output_trace_file_name`) prints total_steps with `%d` (truncated) and arrivals with `%f`,
  so `read_gavel_trace` of it gives floor(iterations) and arrivals rounded to 1 microsecond.
  (That file also lists the jobs running at its window start once more, at arrival 0.)
- SLO deadlines: deadline_s = SLO x duration + arrival. Gavel adds SLO x duration to the time of
  the round that admits the job, at or after its arrival: up to one round (360 s by default)
  later (0-360 s, mean 185 s, over the 596 jobs above). Gavel draws SLOs only when its scheduler
  also has a price directory (`per_instance_type_prices_dir`); here `slos=1` suffices. The trace
  reader derives the duration from total_steps / V100 steps/s (equal up to rounding).
- `jobs` is a count: the first `jobs` of Gavel's sequence, whose length depends on its run.
- `fixed_job_duration` (`-f`) and the steady-state prefill (`--simulate-steady-state`) are not
  offered; a seed must be >= 0.
- Gavel's job types are not models of dlsched's zoo, and the common schema asks a zoo model of a
  job with iterations: like `read_gavel_trace`'s, these jobs can be saved to a schema file but
  not loaded back from it.
"""
from __future__ import annotations

import math
import operator
import random
from typing import Any

from dlsched.core.errors import DlschedError
from dlsched.core.types import JobSpec
from dlsched.workload.gavel_trace import _tasks
from dlsched.workload.throughputs import load_throughputs

# Gavel's job templates in job_table.py order: (job type, may run on several GPUs).
JOB_TYPES: tuple[tuple[str, bool], ...] = (
    *((f"ResNet-18 (batch size {b})", True) for b in (16, 32, 64, 128, 256)),
    *((f"ResNet-50 (batch size {b})", True) for b in (16, 32, 64, 128)),
    *((f"Transformer (batch size {b})", True) for b in (16, 32, 64, 128, 256)),
    *((f"LM (batch size {b})", True) for b in (5, 10, 20, 40, 80)),
    *((f"Recommendation (batch size {b})", False) for b in (512, 1024, 2048, 4096, 8192)),
    ("A3C", False),
    ("CycleGAN", False),
)
REFERENCE_GPU = "V100"     # Gavel's reference_worker_type: total_steps are V100 steps
# Offsets of Gavel's seeds (Scheduler._initialize_seeds) for the streams the generator uses.
JOB_SEED, GAP_SEED, SLO_SEED = 2, 3, 6
FLAGS = ("multi_gpu", "priorities", "slos")


def _scale_factor(r: float) -> int:
    if r < 0.7:
        return 1
    if r <= 0.8:
        return 2
    return 4 if r <= 0.95 else 8


def _duration(rng: random.Random) -> float:
    if rng.random() >= 0.8:
        return 60 * (10 ** rng.uniform(3, 4))
    return 60 * (10 ** rng.uniform(1.5, 3))


def _slo(r: float) -> float:
    return 1.2 if r < 0.33 else 2.0 if r < 0.67 else 10.0


def _bad(key: str, what: str, v: Any) -> DlschedError:
    # the wording of generators._check_params (not imported: generators imports this module)
    return DlschedError(f"generator 'gavel': parameter {key!r} must be {what}, got {v!r}")


def _number(key: str, v: Any, what: str, *, integer: bool = False, strict: bool = True) -> float:
    """v as a finite number > 0 (>= 0 unless strict), an integer if asked, else the error."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or (integer and not float(v).is_integer()) or v < 0 or (strict and v == 0):
        raise _bad(key, what, v)
    return int(v) if integer else float(v)


def _params(params: dict[str, Any]) -> tuple[int, float, dict[str, bool]]:
    """(jobs, lam, flags) from the reference's parameters; errors name the parameter."""
    known = ("jobs", "rate", "lam", *FLAGS)
    for key in params:
        if key not in known:
            raise DlschedError(f"generator 'gavel': unknown parameter {key!r} (parameters: {', '.join(known)})")
    flags = {}
    for key in FLAGS:
        v = params.get(key, 0)
        if isinstance(v, bool) or v not in (0, 1):
            raise _bad(key, "0 or 1", v)
        flags[key] = bool(v)
    jobs = int(_number("jobs", params.get("jobs", 1000), "an integer > 0", integer=True))
    if "lam" in params:
        if "rate" in params:
            raise DlschedError("generator 'gavel': parameter 'lam' replaces 'rate' (lam = 3600 / rate): give one")
        return jobs, _number("lam", params["lam"], "a number >= 0 (the mean gap in s; 0: all jobs at 0)",
                             strict=False), flags
    if "rate" not in params:
        raise DlschedError("generator 'gavel': parameter 'rate' is required (jobs per hour; "
                           "or lam, the mean gap in seconds, as Gavel's -l)")
    rate = _number("rate", params["rate"], "a number > 0 (jobs per hour)")
    if not math.isfinite(lam := 3600.0 / rate):
        raise _bad("rate", "a number > 0 (jobs per hour) with 3600 / rate finite", rate)
    return jobs, lam, flags


def _seed(seed: Any) -> int:
    try:                           # int or numpy integer, as generators._check_seed
        ok = not isinstance(seed, bool) and operator.index(seed) >= 0
    except TypeError:
        ok = False
    if not ok:
        raise DlschedError(f"seed must be an integer >= 0, got {seed!r}")
    return operator.index(seed)


def gen_gavel(seed: int = 0, **params: Any) -> list[JobSpec]:
    """The jobs Gavel's generator draws with this seed (see the module docstring)."""
    n, lam, flags = _params(params)
    seed = _seed(seed)
    table = load_throughputs("gavel")
    rng, gaps = random.Random(seed + JOB_SEED), random.Random(seed + GAP_SEED)
    slo_rng = random.Random(seed + SLO_SEED) if flags["slos"] else None
    width = len(str(max(n - 1, 0)))
    jobs: list[JobSpec] = []
    arrival = 0.0
    for i in range(n):
        sf = _scale_factor(rng.uniform(0, 1))
        duration = _duration(rng)
        if not flags["multi_gpu"]:
            sf = 1
        while True:
            job_type, distributed = rng.choice(JOB_TYPES)
            if sf == 1 or distributed:
                break
        steps = duration * table.steps_per_s(job_type, sf, REFERENCE_GPU)
        weight = 5 if flags["priorities"] and rng.uniform(0, 1) <= 0.2 else 1
        deadline = None if slo_rng is None else _slo(slo_rng.uniform(0, 1)) * duration + arrival
        jobs.append(JobSpec(job_id=f"gavel-{i:0{width}d}", submit_time_s=arrival, kind="dl", tasks=_tasks(sf),
                            priority=weight, deadline_s=deadline, model=job_type, comm="allreduce",
                            iterations=steps, duration_s=None))
        if lam > 0:
            arrival = -math.log(1.0 - gaps.random()) / (1.0 / lam) + arrival
    return jobs


__all__ = ["JOB_TYPES", "gen_gavel"]
