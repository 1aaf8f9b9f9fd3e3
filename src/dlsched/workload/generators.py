"""Synthetic workload generators, deterministic from a seed.

Every generator is a function `(seed: int, **params) -> list[JobSpec]` registered in
GENERATORS; it draws from `numpy.random.default_rng(seed)` only (`gavel`: from Gavel's own
`random.Random` streams), so the same seed and parameters give the same jobs. A workload
reference names a generator and may carry parameters: `poisson`, `poisson:jobs=200,rate=0.02`,
`seed000:jobs=10`. Values parse as int, then float, else stay strings; each generator checks its
parameters (unknown name or bad value -> DlschedError naming the parameter).

Jobs are built through the common schema (`schema.job_from_row`), so every generated workload
can be saved and loaded back unchanged.

seed000   jobs=40, tasks=30, span_s=3000
    Bag-of-tasks jobs ("tasks") with multi-resource demands, for packing policies (Tetris-like)
    on the `seed000` cluster (20 nodes x 4 GPUs, 32 cores, 128 GB, 1000 MB/s disk, 10 Gbps).
    Arrivals uniform over [0, span_s). All tasks of a job are alike (the schema has one demand
    and one duration per job), jobs differ: a quarter of the jobs ask 1 GPU per task, the
    others none; each job has a dominant resource among cpu / mem / disk / net, 25-50 % of a
    node's capacity per task, and asks 2-8 % of the other three - the skewed shapes for which
    multi-resource packing matters (Tetris). Task duration 100-600 s. With the defaults the load
    is heavy: queues build up during the 3000 s of arrivals and drain for an hour or more after
    (FIFO makespan about 6,700 s over seeds 0-5; seed 000 reports 7,083 s).

seed002   rounds=1, span_s=600, model=(all)
    Seed 002's experiment: ten image models x {CIFAR-10, ImageNet-sized} as all-reduce jobs of
    2-4 one-GPU workers, arrivals uniform over span_s, for the `seed002` cluster; `model=NAME`
    keeps one model's jobs (the experiment runs each model on its own, as the seed's figures do).

liquid    jobs=40, rate=1/60
    Parameter-server jobs (1-4 workers, 1-2 PS) with Poisson arrivals, for Liquid (seed 003).

poisson   jobs=1000, rate=1/60 (jobs/s), users=8
    DL jobs in the style of Gavel's generator on the Philly distribution: Poisson arrivals
    (first at 0), GPUs 1/2/4/8 with probabilities 0.70/0.10/0.15/0.05, model uniform over
    POISSON_MODELS, duration 60 x 10^U(1.5, 3) s with probability 0.8 else 60 x 10^U(3, 4) s
    (the run time at the ideal placement; model and batch_size = default_batch x workers are
    set too, so a speed model can slow badly placed jobs down), user uniform over u0..u<users-1>.
    4 cores and 16 GB per worker, as assumed for Philly jobs.

seed001   jobs=30, rate=1/240 (jobs/s)
    Optimus's evaluation (seed 001): parameter-server jobs (comm "ps") of the paper's kinds of
    models (image classification, language models, speech) with Poisson arrivals (first at 0),
    for the `seed001` cluster. Each job is what its owner submits: a global batch of 1-4x the
    model's default, 2/4/6/8 one-GPU workers (4 cores, 16 GB each) and 1/2/4 PS (4 cores,
    8 GB; never more PS than workers) - the fixed size DRF and Tetris run it at; Optimus
    chooses its own. Work: iterations for 1-4 hours (log-uniform) at the requested size alone on
    the `seed001` cluster, workers and PS spread evenly over the fewest servers (Optimus's
    placement principle), by the speed model. Training is synchronous (the simulator's).

gavel     rate (jobs/h, required), jobs=1000, multi_gpu=0, priorities=0, slos=0
    Gavel's own generator (stanford-futuredata/gavel), draw for draw: with the same seed, the
    same jobs as Gavel's simulator generates, with Python's `random.Random` streams seeded as
    Gavel seeds them (not numpy); mapping and differences in `gavel_gen.py`.

sample    jobs=60, span_s=7200
    A small demo workload for the `seed002` cluster (2 x 4 V100 + 2 x 2 V100): DL jobs over
    the first two hours, 1/2/4/8 GPUs (8-GPU jobs rare, at most 3), zoo models, global batch
    = default_batch x workers and `iterations` chosen so that a job needs 5-60 minutes on one
    V100 (log-uniform). About 1 in 6 multi-worker jobs uses a parameter server (comm "ps",
    1 PS); about half the jobs have a deadline at submit + 2-4x their ideal run time.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from dlsched.core.errors import DlschedError
from dlsched.core.types import JobSpec, Role, TaskPlacement
from dlsched.workload.models import get_model
from dlsched.workload.schema import job_from_row, job_like

POISSON_MODELS = ("resnet50", "vgg16", "bert", "lstm", "transformer", "resnet18", "inception3",
                  "gpt2", "yolov3", "deepspeech2")
# Models of the sample workload: all fit a 32 GB V100 at their default batch size.
SAMPLE_MODELS = ("resnet50", "resnet18", "vgg16", "inception3", "googlenet", "mobilenet", "alexnet",
                 "lstm", "transformer", "bert", "deepspeech2", "yolov3")
PHILLY_GPU_MIX = ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05))

Generator = Callable[..., list[JobSpec]]


# ----------------------------------------------------------------------------- parameters

def parse_ref(ref: str) -> tuple[str, dict[str, Any]]:
    """Split `name:key=value,key=value` into the name and its parameters (ints, floats, strings)."""
    name, _, rest = ref.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise DlschedError(f"workload {ref!r}: parameter {item!r} is not key=value")
        if key in params:
            raise DlschedError(f"workload {ref!r}: parameter {key!r} given twice")
        params[key] = _parse_value(value)
    return name.strip(), params


def _parse_value(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _check_params(gen: str, given: dict[str, Any], spec: dict[str, tuple[str, Any, float]]
                  ) -> dict[str, Any]:
    """Validate `given` against spec {name: (kind "int"/"float", default, exclusive lower bound)}."""
    for key in given:
        if key not in spec:
            raise DlschedError(f"generator {gen!r}: unknown parameter {key!r} "
                               f"(parameters: {', '.join(spec)})")
    out = {}
    for key, (kind, default, above) in spec.items():
        v = given.get(key, default)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if ok and kind == "int":
            ok = float(v).is_integer()
            v = int(v) if ok else v
        if not ok or v <= above:
            what = "an integer" if kind == "int" else "a number"
            raise DlschedError(f"generator {gen!r}: parameter {key!r} must be {what} > {above:g}, got {v!r}")
        out[key] = float(v) if kind == "float" else v
    return out


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise DlschedError(f"seed must be an integer >= 0, got {seed!r}")
    return int(seed)


# ----------------------------------------------------------------------------- seed000

# Node of the seed000 cluster preset; seed000 demands are fractions of it.
SEED000_NODE = {"cpus_per_worker": 32.0, "mem_gb_per_worker": 128.0, "disk_mbps_per_worker": 1000.0,
                "net_gbps_per_worker": 10.0}


def gen_seed000(seed: int = 0, **params: Any) -> list[JobSpec]:
    """Bag-of-tasks jobs with heterogeneous multi-resource demands (see the module docstring)."""
    p = _check_params("seed000", params, {"jobs": ("int", 40, 0), "tasks": ("int", 30, 0),
                                          "span_s": ("float", 3000.0, 0)})
    rng = np.random.default_rng(_check_seed(seed))
    n = p["jobs"]
    submit = np.sort(rng.uniform(0.0, p["span_s"], n))
    gpu_jobs = np.zeros(n, dtype=bool)
    gpu_jobs[rng.permutation(n)[:int(round(0.25 * n))]] = True
    dominant = rng.integers(0, 4, n)                          # 0 cpu, 1 mem, 2 disk, 3 net
    frac = np.where(np.arange(4)[None, :] == dominant[:, None],
                    rng.uniform(0.25, 0.5, (n, 4)), rng.uniform(0.02, 0.08, (n, 4)))
    duration = rng.uniform(100.0, 600.0, n)
    users = rng.integers(0, 4, n)
    jobs = []
    for j in range(n):
        row = {"job_id": f"job-{j:03d}", "submit_time_s": round(float(submit[j]), 3), "kind": "tasks",
               "workers": p["tasks"], "gpus_per_worker": 1.0 if gpu_jobs[j] else 0.0,
               "comm": "none", "duration_s": float(round(duration[j])), "user": f"u{users[j]}"}
        for i, (col, cap) in enumerate(SEED000_NODE.items()):
            row[col] = round(float(frac[j, i]) * cap, 2)
        jobs.append(job_from_row(row))
    return jobs


# ----------------------------------------------------------------------------- poisson

def gen_poisson(seed: int = 0, **params: Any) -> list[JobSpec]:
    """Gavel-style Poisson arrivals of Philly-like DL jobs (see the module docstring)."""
    p = _check_params("poisson", params, {"jobs": ("int", 1000, 0), "rate": ("float", 1 / 60, 0),
                                          "users": ("int", 8, 0)})
    rng = np.random.default_rng(_check_seed(seed))
    n = p["jobs"]
    gaps = rng.exponential(1.0 / p["rate"], n)
    submit = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    sizes, probs = zip(*PHILLY_GPU_MIX)
    gpus = rng.choice(np.array(sizes), size=n, p=np.array(probs))
    models = rng.integers(0, len(POISSON_MODELS), n)
    long = rng.random(n) >= 0.8
    exponent = np.where(long, rng.uniform(3.0, 4.0, n), rng.uniform(1.5, 3.0, n))
    duration = 60.0 * 10.0 ** exponent
    users = rng.integers(0, p["users"], n)
    jobs = []
    shapes: dict[tuple, JobSpec] = {}     # (model, workers) -> the first such job (job_like)
    for j in range(n):
        model = POISSON_MODELS[models[j]]
        workers = int(gpus[j])
        row = {
            "job_id": f"job-{j:05d}", "submit_time_s": round(float(submit[j]), 3), "kind": "dl",
            "workers": workers, "gpus_per_worker": 1.0, "cpus_per_worker": 4.0, "mem_gb_per_worker": 16.0,
            "model": model, "comm": "allreduce", "batch_size": get_model(model).default_batch * workers,
            "duration_s": round(float(duration[j]), 1), "user": f"u{users[j]}",
        }
        base = shapes.get((model, workers))
        if base is None:
            job = shapes[model, workers] = job_from_row(row)
        else:
            job = job_like(base, row)
        jobs.append(job)
    return jobs


# ----------------------------------------------------------------------------- sample

def _iteration_s(model: str, batch: float) -> float:
    """Rough V100 time of one iteration over `batch` samples on one GPU (compute only)."""
    m = get_model(model)
    return (m.overhead_ms + batch * m.ms_per_sample) / 1000.0


def gen_sample(seed: int = 0, **params: Any) -> list[JobSpec]:
    """The demo workload for the seed002 cluster (see the module docstring)."""
    p = _check_params("sample", params, {"jobs": ("int", 60, 0), "span_s": ("float", 7200.0, 0)})
    rng = np.random.default_rng(_check_seed(seed))
    n = p["jobs"]
    submit = np.sort(rng.uniform(0.0, p["span_s"], n))
    gpus = rng.choice(np.array([1, 2, 4, 8]), size=n, p=np.array([0.50, 0.25, 0.20, 0.05]))
    # Keep 8-GPU jobs rare: each one needs both 4-GPU servers (or all 12 GPUs' worth of room).
    for j in np.flatnonzero(gpus == 8)[3:]:
        gpus[j] = 4
    models = rng.integers(0, len(SAMPLE_MODELS), n)
    one_gpu_s = 60.0 * np.exp(rng.uniform(math.log(5.0), math.log(60.0), n))
    use_ps = rng.random(n) < 1 / 6
    has_deadline = rng.random(n) < 0.5
    slack = rng.uniform(2.0, 4.0, n)
    users = rng.integers(0, 4, n)
    jobs = []
    for j in range(n):
        model = SAMPLE_MODELS[models[j]]
        workers = int(gpus[j])
        batch = get_model(model).default_batch * workers
        iterations = float(max(1, round(one_gpu_s[j] / _iteration_s(model, batch))))
        ps = 1 if (workers > 1 and use_ps[j]) else 0
        row = {
            "job_id": f"job-{j:02d}", "submit_time_s": round(float(submit[j]), 1), "kind": "dl",
            "workers": workers, "ps": ps, "gpus_per_worker": 1.0, "cpus_per_worker": 4.0,
            "mem_gb_per_worker": 16.0, "model": model, "comm": "ps" if ps else "allreduce",
            "batch_size": batch, "iterations": iterations, "user": f"u{users[j]}",
        }
        if has_deadline[j]:
            # Ideal run time: iterations at the per-worker batch with linear scaling, no comm.
            ideal = iterations * _iteration_s(model, batch / workers)
            row["deadline_s"] = float(round(submit[j] + slack[j] * ideal))
        jobs.append(job_from_row(row))
    return jobs


# ----------------------------------------------------------------------------- seed002

# Ten image models (seed 002 trains "10 models with CIFAR10 and ImageNet").
SEED002_MODELS = ("alexnet", "vgg16", "resnet18", "resnet50", "resnet101", "resnext50", "inception3",
                  "googlenet", "mobilenet", "densenet121")
# Samples per job: CIFAR-10 (50,000 images) x 10 epochs; an ImageNet-sized subset (256,000 images)
# x 2 epochs, so that a run stays minutes long.
SEED002_DATA = {"cifar10": 50_000 * 10, "imagenet": 256_000 * 2}


def gen_seed002(seed: int = 0, **params: Any) -> list[JobSpec]:
    """Seed 002's experiment: every model on both data sets as a distributed all-reduce job with
    2-4 one-GPU workers (the kube-scheduler places workers as pods), arrivals uniform over the
    first span_s seconds, for the `seed002` cluster (2 x 4 V100 + 2 x 2 V100, 10 Gbps).
    `model=NAME` keeps one model (its jobs on both data sets, `rounds` times each)."""
    only = params.pop("model", None)
    if only is not None and only not in SEED002_MODELS:
        raise DlschedError(f"generator 'seed002': parameter 'model' must be one of "
                           f"{', '.join(SEED002_MODELS)}, got {only!r}")
    p = _check_params("seed002", params, {"rounds": ("int", 1, 0), "span_s": ("float", 600.0, 0)})
    rng = np.random.default_rng(_check_seed(seed))
    models = (only,) if only else SEED002_MODELS
    combos = [(m, d) for _ in range(p["rounds"]) for m in models for d in SEED002_DATA]
    n = len(combos)
    submit = np.sort(rng.uniform(0.0, p["span_s"], n))
    order = rng.permutation(n)
    workers = rng.integers(2, 5, n)
    jobs = []
    for j in range(n):
        model, data = combos[order[j]]
        w = int(workers[j])
        batch = get_model(model).default_batch * w
        row = {"job_id": f"{model}-{data}-{j:02d}", "submit_time_s": round(float(submit[j]), 1), "kind": "dl",
               "workers": w, "gpus_per_worker": 1.0, "cpus_per_worker": 4.0, "mem_gb_per_worker": 16.0,
               "model": model, "comm": "allreduce", "batch_size": batch,
               "iterations": float(math.ceil(SEED002_DATA[data] / batch)), "user": data}
        jobs.append(job_from_row(row))
    return jobs


# ----------------------------------------------------------------------------- liquid

LIQUID_MODELS = ("alexnet", "vgg16", "resnet18", "resnet50", "inception3", "googlenet", "mobilenet",
                 "lstm")


def gen_liquid(seed: int = 0, **params: Any) -> list[JobSpec]:
    """Liquid's setting (seed 003): parameter-server jobs, 1-4 one-GPU workers and 1-2 PS each,
    Poisson arrivals at `rate` jobs/s; each job needs 5-30 minutes on one V100."""
    p = _check_params("liquid", params, {"jobs": ("int", 40, 0), "rate": ("float", 1 / 60, 0)})
    rng = np.random.default_rng(_check_seed(seed))
    n = p["jobs"]
    gaps = rng.exponential(1.0 / p["rate"], n)
    submit = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    workers = rng.integers(1, 5, n)
    ps = rng.integers(1, 3, n)
    models = rng.integers(0, len(LIQUID_MODELS), n)
    one_gpu_s = 60.0 * rng.uniform(5.0, 30.0, n)
    jobs = []
    for j in range(n):
        model = LIQUID_MODELS[models[j]]
        w = int(workers[j])
        batch = get_model(model).default_batch * w
        row = {"job_id": f"job-{j:03d}", "submit_time_s": round(float(submit[j]), 1), "kind": "dl",
               "workers": w, "ps": int(ps[j]), "gpus_per_worker": 1.0, "cpus_per_worker": 4.0,
               "mem_gb_per_worker": 8.0, "ps_cpus": 2.0, "ps_mem_gb": 4.0, "model": model, "comm": "ps",
               "batch_size": batch,
               "iterations": float(max(1, round(one_gpu_s[j] / _iteration_s(model, batch))))}
        jobs.append(job_from_row(row))
    return jobs


# ----------------------------------------------------------------------------- seed001

# Stand-ins from the zoo for Optimus's evaluation models (ResNet-50, VGG-16, ResNeXt, Inception,
# Seq2Seq / word LM, CTC speech, and the smaller image models).
SEED001_MODELS = ("resnet50", "vgg16", "resnext50", "inception3", "lstm", "transformer", "deepspeech",
                  "alexnet", "googlenet", "resnet18")


def gen_seed001(seed: int = 0, **params: Any) -> list[JobSpec]:
    """Optimus's parameter-server workload (see the module docstring)."""
    p = _check_params("seed001", params, {"jobs": ("int", 30, 0), "rate": ("float", 1 / 240, 0)})
    rng = np.random.default_rng(_check_seed(seed))
    n = p["jobs"]
    gaps = rng.exponential(1.0 / p["rate"], n)
    submit = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    models = rng.integers(0, len(SEED001_MODELS), n)
    batch_mult = rng.choice(np.array([1, 2, 4]), size=n)
    workers = rng.choice(np.array([2, 4, 6, 8]), size=n)
    ps = rng.choice(np.array([1, 2, 4]), size=n)
    hours = np.exp(rng.uniform(math.log(1.0), math.log(4.0), n))
    jobs = []
    for j in range(n):
        model = SEED001_MODELS[models[j]]
        w = int(workers[j])
        batch = get_model(model).default_batch * int(batch_mult[j])
        row = {"job_id": f"job-{j:03d}", "submit_time_s": round(float(submit[j]), 1), "kind": "dl",
               "workers": w, "ps": min(int(ps[j]), w), "gpus_per_worker": 1.0, "cpus_per_worker": 4.0,
               "mem_gb_per_worker": 16.0, "ps_cpus": 4.0, "ps_mem_gb": 8.0, "model": model, "comm": "ps",
               "batch_size": batch, "iterations": 1.0}
        t_iter = _seed001_iter_s(job_from_row(row))
        row["iterations"] = float(max(1, round(3600.0 * hours[j] / t_iter)))
        jobs.append(job_from_row(row))
    return jobs


def _seed001_iter_s(job: JobSpec) -> float:
    """Iteration time of `job` alone on the seed001 cluster, its workers and PS spread evenly
    over the fewest servers that hold its workers (remainders on the first ones)."""
    # Imported here, not for a cycle (speed imports nothing of this module) but because only
    # this generator needs the cluster and the speed model: `import dlsched.workload` stays light.
    from dlsched.cluster.topology import load_cluster
    from dlsched.workload.speed import SpeedModel
    global _SEED001_SPEED
    if _SEED001_SPEED is None:
        _SEED001_SPEED = SpeedModel(load_cluster("seed001"))
    sm = _SEED001_SPEED
    per = max(sm.cluster.nodes[0].gpus, 1)
    ws = [t for t in job.tasks if t.role is Role.WORKER]
    ps = [t for t in job.tasks if t.role is Role.PS]
    k = -(-len(ws) // per)
    pl, slot = [], [0] * k
    for i, t in enumerate(ws):
        node = i % k
        pl.append(TaskPlacement(t.index, node, (slot[node],)))
        slot[node] += 1
    pl += [TaskPlacement(t.index, i % k, ()) for i, t in enumerate(ps)]
    return sm.isolated_iter_time(job, tuple(pl))


_SEED001_SPEED = None


def gen_gavel(seed: int = 0, **params: Any) -> list[JobSpec]:
    """Gavel's own job generator, draw for draw (`gavel_gen.py`; imported here, as it imports
    this module's parameter checks)."""
    from dlsched.workload.gavel_gen import gen_gavel as gen
    return gen(seed, **params)


GENERATORS: dict[str, Generator] = {
    "seed001": gen_seed001,
    "seed000": gen_seed000,
    "seed002": gen_seed002,
    "poisson": gen_poisson,
    "sample": gen_sample,
    "liquid": gen_liquid,
    "gavel": gen_gavel,
}


def generate(ref: str, seed: int = 0, **params: Any) -> list[JobSpec]:
    """Run the generator a reference names (`name` or `name:k=v,...`); `params` add to the ref's.

    A `seed` parameter in the reference overrides the `seed` argument."""
    name, ref_params = parse_ref(ref)
    gen = GENERATORS.get(name)
    if gen is None:
        raise DlschedError(f"unknown workload generator {name!r} (generators: {', '.join(GENERATORS)})")
    merged = {**ref_params, **params}
    if "seed" in merged:
        seed = merged.pop("seed")
    return gen(seed, **merged)
