"""What each runtime mechanism costs on the real runtime (issue 12): time-slice switch, pack,
migrate, resize and Optimus's refit, measured from the stores of real runs on an embedded Ray
cluster (2 nodes x 2 virtual GPUs, as the two experiments; examples/timed_steps.py, warm rank
workers):

- Gandiva, Figure 9's workload (seed001-figure9: six 1-GPU jobs on 4 GPUs, 10 s quanta, jobs
  run to the end): time-slice switches, and the migrations to freed GPUs once jobs end;
- Gandiva, the packing workload (seed001-packing): packs (and the unpack of the heavy pair);
- Optimus, 6 parameter-server jobs (examples/ps_synthetic.py) re-allocated every 5 s: resizes
  and the allocator's refit (the round's wall time, from the round records).

Definitions (seconds, wall clock):
- time-slice switch: the suspend of a turn's holder -> the first step of the member that takes
  its GPUs (the holder's checkpoint and stop, the next member's start and restore);
- pack: a packed launch / resume -> its first step beside the holder (the holder's GPU share
  re-booked, the new member's start and restore);
- migrate: the decision -> the first step on the new GPUs; resize: the decision -> the first
  step with the new number of workers (stop, checkpoint, new ranks, restore);
- Optimus refit: the wall time of an Optimus round (refit of the speed and convergence models
  from what was measured, then the marginal-gain allocation).

    python benchmarks/bench_mechanisms.py [--runs figure9,packing,optimus] [--optimus-jobs 6]
                                          [--iterations 300] [--results]

`--runs` picks some of the three runs; `--optimus-jobs` and `--iterations` size the Optimus run
(the smoke test runs `--runs optimus --optimus-jobs 1 --iterations 20`).

Not in CI (about 5 minutes); `--results` writes the block `mechanisms` of benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import update_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTE = ("Each figure includes the wait for the stopping job's mini-batch boundary (up to one 0.2 s "
        "step) and the first step itself (0.2 s): the mechanism's own cost is about 0.2-0.4 s less. The "
        "slowest resize and refit are the first of the run (a cold worker, the first fit).")


def costs_from_store(store, epoch: float) -> dict[str, list[float]]:
    """Per mechanism, the costs (module docstring) seen in one run's store."""
    log = store.schedlog_all()
    out: dict[str, list[float]] = {"time-slice switch": [], "pack": [], "migrate": [], "resize": [],
                                   "Optimus refit": []}

    def first_step(jid: str, t_rel: float) -> float | None:
        t = store.first_step_time(jid, epoch + t_rel)
        return None if t is None else t - epoch - t_rel

    gpus = lambda r: {(n, g) for _, n, ids in r["placements"] for g in ids}   # noqa: E731
    for i, r in enumerate(log):
        kind = r["kind"]
        if kind == "round":
            if r["detail"]:
                out["Optimus refit"].append(float(r["detail"].split()[0]))
        elif kind in ("migrate", "resize"):
            c = first_step(r["job_id"], r["time_s"])
            if c is not None:
                out[kind].append(c)
        elif kind in ("launch", "resume") and r["packed"]:
            c = first_step(r["job_id"], r["time_s"])
            if c is not None:
                out["pack"].append(c)
        elif kind == "suspend":
            held = {(n, g) for n, g in _held_before(log, i, r["job_id"])}
            nxt = next((x for x in log[i + 1:] if x["kind"] in ("launch", "resume") and x["job_id"] != r["job_id"]
                        and not x["packed"] and gpus(x) & held and x["time_s"] - r["time_s"] < 5.0), None)
            if nxt is not None:
                t = store.first_step_time(nxt["job_id"], epoch + r["time_s"])
                if t is not None:
                    out["time-slice switch"].append(t - epoch - r["time_s"])
    return out


def _held_before(log: list[dict], i: int, jid: str) -> set:
    for x in reversed(log[:i]):
        if x["job_id"] == jid and x["kind"] in ("launch", "resume", "migrate", "resize"):
            return {(n, g) for _, n, ids in x["placements"] for g in ids}
    return set()


def optimus_workload(jobs: int = 6, iterations: int = 300) -> list[tuple[float, dict]]:
    prog = str(ROOT / "examples" / "ps_synthetic.py")
    return [(3.0 * i, {"name": f"ps-{i}", "entry": prog, "args": {"lr": 0.05, "seed": i}, "workers": 2, "ps": 1,
                       "gpus_per_worker": 1, "batch_size": 128, "iterations": iterations,
                       "checkpoint_every": min(50, max(1, iterations // 2))})
            for i in range(jobs)]


RUNS = ("figure9", "packing", "optimus")


def run(which: tuple[str, ...] = RUNS, optimus_jobs: int = 6, iterations: int = 300) -> dict:
    from dlsched.experiments import seed001_figure9 as f9
    from dlsched.experiments.runtime_fidelity import run_real, warm_up
    from dlsched.runtime.cluster import LocalRay
    runs = {"figure9": ("gandiva", f9.workload(), f9.CONFIG["gandiva"], f9.ROUND_S, 240.0),
            "packing": ("gandiva", f9.pack_workload(), f9.PACK_CONFIG, f9.ROUND_S, f9.PACK_STOP_S),
            "optimus": ("optimus", optimus_workload(optimus_jobs, iterations), {"round_s": 5.0}, 5.0, 240.0)}
    runs = [runs[w] for w in which]
    total: dict[str, list[float]] = {k: [] for k in ("time-slice switch", "pack", "migrate", "resize",
                                                     "Optimus refit")}
    with LocalRay(f9.NODES, f9.GPUS_PER_NODE, gpu_type=f9.GPU_TYPE) as rc:     # 4 GPUs: overloaded
        warm_up(rc.address, namespace="mech", gpus=f9.NODES * f9.GPUS_PER_NODE)
        for policy, jobs, cfg, round_s, timeout in runs:
            o = run_real(rc.address, policy, jobs, round_s=round_s, namespace="mech", timeout_s=timeout,
                         policy_config=cfg, collect=costs_from_store)
            if "refused" in o:
                raise SystemExit(f"{policy} refused: {o['refused']}")
            for k, v in o["collected"].items():
                if k == "Optimus refit" and policy != "optimus":
                    continue
                total.setdefault(k, []).extend(v)
    return total


def table(total: dict[str, list[float]]) -> str:
    rows = ["| mechanism | n | median (s) | min | max |", "| --- | --- | --- | --- | --- |"]
    for k, v in total.items():
        if v:
            rows.append(f"| {k} | {len(v)} | {statistics.median(v):.3f} | {min(v):.3f} | {max(v):.3f} |")
        else:
            rows.append(f"| {k} | 0 | - | - | - |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    ap.add_argument("--optimus-jobs", type=int, default=6, help="parameter-server jobs of the optimus run")
    ap.add_argument("--iterations", type=int, default=300, help="iterations of each of them")
    ap.add_argument("--results", action="store_true", help="write the block into benchmarks/RESULTS.md")
    a = ap.parse_args()
    which = tuple(w for w in a.runs.split(",") if w)
    if not which or any(w not in RUNS for w in which):
        ap.error(f"--runs: give some of {', '.join(RUNS)}")
    if a.optimus_jobs < 1 or a.iterations < 1:
        ap.error("--optimus-jobs and --iterations: give 1 or more")
    total = run(which, a.optimus_jobs, a.iterations)
    t = table(total)
    print(t)
    if a.results:
        import ray
        body = (f"## What each runtime mechanism costs (`benchmarks/bench_mechanisms.py`)\n\n"
                f"2 CPUs, Python {platform.python_version()}, Ray {ray.__version__}: an embedded cluster of 2 nodes "
                "x 2 virtual GPUs, warm rank workers, examples/timed_steps.py (0.2 s steps) and "
                "examples/ps_synthetic.py; Figure 9's and the packing workloads under gandiva, six PS jobs under "
                "optimus with 5 s rounds. Definitions in the script's docstring."
                + ("" if which == RUNS and (a.optimus_jobs, a.iterations) == (6, 300) else
                   f" This time only: {', '.join(which)}; {a.optimus_jobs} PS job(s) of {a.iterations} iterations.")
                + "\n\n" + t + "\n\n"
                + NOTE)
        print(f"updated {update_results('mechanisms', body.split(chr(10)))}")


if __name__ == "__main__":
    main()
