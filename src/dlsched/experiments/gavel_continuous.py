"""gavel-continuous: Gavel's continuous single-GPU experiment (OSDI'20, Figure 8), under Gavel's
round mechanism (`--semantics gavel`).

Setting, as Gavel's `run_sweep_continuous.py -s 4000 -e 5000 -c 36:36:36` runs it: 36 V100 + 36
P100 + 36 K80 (one GPU per server), jobs from Gavel's own generator (`gavel:rate=R`, seed 0,
1-GPU jobs: dlsched.workload.gavel_gen, draw for draw), 360 s rounds, and the mean JCT of jobs
4000 to 4999 (the run ends when they have all finished, as Gavel's `jobs_to_complete` does;
later jobs keep arriving until then).

Gavel's figures are the mean JCT (hours) of seed 0 that its notebook
`scheduler/notebooks/figures/evaluation/continuous_jobs.ipynb` prints (the figure itself
averages seeds 0-2, whose means are not printed); read from the notebook, not computed here
(research/hetero-adaptive.md, section 1.5). Ours are computed from the runs.

Gavel's own simulator, run on the same jobs (`GAVEL_CODE`), gives our figures job for job for
FIFO and AlloX, and Gandiva's for its first 1,464 jobs (its mean at 4.4 jobs/h 1.2 % above
ours); the same means for LAS (its ECOS answers break priority ties by solver noise) and, within
0.7 % to 4.7 %, Gavel-FTF and FTF (ECOS's interior point against HiGHS's vertex), but not its
notebook's: FIFO at 4.4 jobs/h is 51.80 h in its code and 44.28 h in the notebook, Gandiva at
4.4 30.08 h against 25.65, Gavel-FTF at 5.2 26.49 h against 23.38, LAS at 4.8 38.02 h against
35.79, AlloX at 4.0 18.02 h against 17.13. So the notebook was made by another version of Gavel
(docs/policies/gavel.md).

Checks (the issue's G2): below the knee each policy's mean JCT is within 5 % of Gavel's (its
code's on the same jobs where we ran it, which the table prints beside its notebook's; its
notebook's elsewhere); the
knee (the first rate whose JCT is over twice the JCT at 0.4 jobs/h) falls within one rate step of
Gavel's. A policy's rates run in increasing order and stop one rate past both knees: above them
the queue grows without bound and the check asks nothing more. Nor does a policy run at a rate
where Gavel's notebook has no figure (Gavel's run there never finished): `series_rates`.
"""
from __future__ import annotations

import time

from dlsched.experiments.base import Check, Experiment, ExperimentResult, register_experiment

RATES = (0.4, 2.0, 3.2, 4.0, 4.4, 4.8, 5.2, 5.6, 6.0)
WINDOW = (4000, 5000)
TOLERANCE = 0.05
# label -> (our policy, Gavel's mean JCT in hours per rate; None where its notebook has none)
_NA = None
PUBLISHED: dict[str, tuple[str, tuple]] = {
    "FIFO": ("gavel-fifo", (17.58, 18.32, 22.21, 25.38, 44.28, 99.19, 151.67, _NA, _NA)),
    "Gavel-FIFO": ("gavel-fifo-perf", (15.31, 15.45, 15.95, 17.08, 18.19, 22.24, 56.69, 104.12, 150.04)),
    "LAS": ("gavel-max-min-fairness", (23.26, 23.47, 23.59, 23.49, 23.81, 35.79, 63.78, 95.99, _NA)),
    "Gavel-LAS": ("gavel-max-min-fairness-perf", (17.58, 16.95, 16.08, 16.82, 17.48, 18.97, 22.02, 28.96, 41.23)),
    "FTF": ("gavel-finish-time-fairness", (23.26, 23.47, 23.58, 23.43, 23.75, 34.93, 64.46, 85.54, 109.14)),
    "Gavel-FTF": ("gavel-finish-time-fairness-perf", (17.58, 17.07, 16.57, 17.57, 18.62, 20.43, 23.38, 30.47, 43.05)),
    "Gandiva": ("gavel-gandiva", (17.58, 17.61, 17.83, 18.88, 25.65, 30.46, 34.32, 42.54, _NA)),
    "AlloX": ("gavel-allox", (17.58, 16.93, 16.43, 17.13, 18.54, 20.92, 21.96, 25.32, _NA)),
    # space sharing: Gavel's figure has them too; not in the G2 check (an LP over every pair)
    "FIFO-SS": ("gavel-fifo-packed", (15.31, 15.45, 15.95, 17.08, 18.18, 21.14, 38.11, 83.40, 127.10)),
    "Gavel-LAS-SS": ("gavel-max-min-fairness-packed", (18.42, 18.26, 16.18, 16.96, 17.78, 18.67, 19.14, 19.64, 20.42)),
}
# Gavel's own simulator (stanford-futuredata/gavel c4fa400, `Scheduler.simulate` with the driver's
# arguments and the same jobs), run by us on 2026-11-27 where it finished in reasonable time; the
# mean JCT (h) of jobs 4000-4999. Not shipped, not computed here: a reference beside the notebook's
# figures, which its current code does not give (FIFO at 4.4 jobs/h: 51.80 h, the notebook 44.28).
# Gavel-FTF at 5.2 and 5.6 (run 2026-12-02): at 5.2 ECOS 2.0.14 fails (cvxpy SolverError at
# t = 690,834 s, 78 jobs active, and the run stops); that one reset of 2,013 was solved by
# Clarabel, every other by ECOS (docs/policies/gavel.md). At 5.6 ECOS solved all 2,039.
GAVEL_CODE: dict[tuple[str, float], float] = {("FIFO", 4.4): 51.803765, ("LAS", 4.8): 38.0172,
                                               ("AlloX", 4.0): 18.0170, ("Gavel-FTF", 4.8): 22.0035,
                                               ("FTF", 4.8): 35.7385,     # (FTF: run 2026-12-02)
                                               ("Gavel-FTF", 5.2): 26.4910, ("Gavel-FTF", 5.6): 33.4577,
                                               ("Gandiva", 4.4): 30.0839}     # (Gandiva 4.4: 2026-12-02)
CHECKED = ("FIFO", "Gavel-FIFO", "LAS", "Gavel-LAS", "FTF", "Gavel-FTF", "Gandiva", "AlloX")


def knee(jcts: dict[float, float | None], rates=RATES) -> float | None:
    """The first rate whose JCT is over twice the JCT at the first rate (a missing figure past
    the first counts as over: Gavel's notebook leaves out the runs that never finished)."""
    base = jcts.get(rates[0])
    if base is None:
        return None
    for r in rates[1:]:
        if r in jcts and (jcts[r] is None or jcts[r] > 2 * base):
            return r
    return None


def cell(policy: str, rate: float, *, seed: int = 0, window: tuple[int, int] = WINDOW, extra: int = 2000):
    """One run: (mean JCT of the window's jobs in hours, its SimResult, wall seconds). Arrivals go
    on until the window has finished, as in Gavel: when the run has used every job generated,
    it asks the generator for the next ones (`gen_gavel` with twice as many gives the same
    jobs first). Ids are padded to 5 digits from the start (at least 10,001 jobs are generated;
    those not yet arrived cost nothing), so that every id has the same width."""
    from dlsched.cluster.topology import load_cluster
    from dlsched.sim.gavel import simulate_gavel
    from dlsched.workload.gavel_gen import gen_gavel
    from dlsched.workload.throughputs import load_throughputs
    t0 = time.perf_counter()
    n = max(window[1] + extra, 10_001)
    jobs = gen_gavel(seed, rate=rate, jobs=n)

    def more(have: int):
        return gen_gavel(seed, rate=rate, jobs=2 * have)[have:]

    res = simulate_gavel(load_cluster("gavel-36:36:36"), jobs, policy, load_throughputs("gavel"), seed=seed,
                         window=window, workload_name=f"gavel:rate={rate} (seed {seed})", more=more)
    ids = {j.job_id for j in jobs[window[0]:window[1]]}
    w = res.jobs[res.jobs.job_id.isin(ids)]
    return float(w.jct_s.mean()) / 3600.0, res, time.perf_counter() - t0


def series_rates(theirs: dict, rates=RATES) -> tuple:
    """The rates a policy runs at: up to the first (past the first rate) where Gavel's notebook
    has no figure. Its runs there never finished (AlloX at 6.0 jobs/h: a matching of every
    waiting job at each reset, O(n^3) in a queue that grows without bound: over an hour here)."""
    out = []
    for r in rates:
        if out and theirs.get(r) is None:
            break
        out.append(r)
    return tuple(out)


def _past_knees(ours: dict, their_knee: float | None, rates, rate: float) -> bool:
    """A policy's series stops one rate past both knees (ours and Gavel's)."""
    k = knee(ours, rates)
    return k is not None and (their_knee is None or rate > their_knee) and rate > k


def _all_series(jobs: list[tuple], rates, window, workers: int | None, log) -> list[list[tuple]]:
    """Each (policy, Gavel's knee, its rates) series, [(rate, mean JCT h, SimResult, wall s)] in increasing
    rate: in this process with one worker, else one Ray task a cell on a private local Ray
    (dlsched.sweep.engine), `workers` CPUs (default: every core), a policy's next rate submitted
    when its last one ends. Each cell is logged as it ends."""
    import os
    out: list[list[tuple]] = [[] for _ in jobs]
    ours: list[dict] = [{} for _ in jobs]

    def done(i: int, rate: float, got: tuple) -> bool:
        jct, res, wall = got
        out[i].append((rate, jct, res, wall))
        ours[i][rate] = jct
        log(f"{jobs[i][0]} at {rate} jobs/h: {jct:.2f} h ({wall:.0f} s)")
        return _past_knees(ours[i], jobs[i][1], rates, rate)

    workers = min(len(jobs), workers or os.cpu_count() or 1)
    if workers <= 1:
        for i, (policy, _, mine) in enumerate(jobs):
            for rate in mine:
                if done(i, rate, cell(policy, rate, window=window)):
                    break
        return out
    from dlsched.sweep.engine import ray_session
    with ray_session(workers=workers) as ray:
        task = ray.remote(num_cpus=1, max_retries=0)(cell)
        pending, nxt = {}, [0] * len(jobs)

        def submit(i: int) -> None:
            rate = jobs[i][2][nxt[i]]
            nxt[i] += 1
            pending[task.remote(jobs[i][0], rate, window=window)] = (i, rate)

        for i in range(len(jobs)):
            submit(i)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            i, rate = pending.pop(ready[0])
            if not done(i, rate, ray.get(ready[0])) and nxt[i] < len(jobs[i][2]):
                submit(i)
    return out


def run(seeds: int = 1, labels=CHECKED, rates=RATES, window: tuple[int, int] = WINDOW,
        published: dict | None = None, workers: int | None = None, log=None) -> ExperimentResult:
    """`labels`, `rates`, `window` and `published` narrow it (tests); the experiment runs all.
    Cells run side by side on Ray (`workers`: 1 runs them here, one after another); `log` (stderr
    by default) gets a line as each ends."""
    import sys
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    pub_table = published or PUBLISHED
    rows, pub_rows, checks, results = [], [], [], {}
    gavels = {label: dict(zip(RATES, pub_table[label][1])) for label in labels}
    runs = _all_series([(pub_table[label][0], knee(gavels[label], rates), series_rates(gavels[label], rates))
                        for label in labels], rates, window, workers, log)
    for label, cells in zip(labels, runs):
        theirs = gavels[label]
        ours: dict[float, float | None] = {}
        for rate, jct, res, wall in cells:
            ours[rate] = jct
            results.setdefault(f"{rate} jobs/h", {})[label] = [res]
            s = res.summary
            rows.append({"group": f"{rate} jobs/h", "policy": label, "seeds": 1, "mean_jct_s": jct * 3600,
                         "makespan_s": s["makespan_s"], "gpu_util": s["gpu_util"], "sched_time_s": s["sched_time_s"],
                         "wall_s": wall, **{f"{k}_std": float("nan") for k in ("mean_jct_s", "makespan_s", "gpu_util",
                                                                              "sched_time_s")}})
            t = theirs.get(rate)
            code = GAVEL_CODE.get((label, rate)) if tuple(window) == WINDOW else None
            pub_rows.append({"policy": label, "jobs/h": rate, "Gavel (h)": "-" if t is None else f"{t:.2f}",
                             "ours (h)": f"{jct:.2f}", "Gavel's code (h)": "-" if code is None else f"{code:.2f}",
                             "diff": "-" if t is None else f"{(jct - t) / t * 100:+.1f} %",
                             "wall s": f"{wall:.0f}"})
        checks += g2_checks(label, ours, theirs, rates, GAVEL_CODE if tuple(window) == WINDOW else {})
    return ExperimentResult("gavel-continuous", "Gavel's continuous single-GPU jobs (Fig. 8), 36:36:36", rows,
                            pub_rows, checks, results=results, extra={"window": list(window)})


def g2_checks(label: str, ours: dict, theirs: dict, rates, code: dict) -> list[Check]:
    """The issue's G2 for one policy: below Gavel's knee, our mean JCT within 5 % of Gavel's
    (`code[(label, rate)]`, its code on the same jobs, where we ran it; else its notebook's); the
    knee within one rate step of Gavel's."""
    their_knee, our_knee = knee(theirs, rates), knee(ours, rates)
    below = [r for r in ours if their_knee is None or r < their_knee]
    ref = {r: code.get((label, r), theirs.get(r)) for r in below}
    by_code = [r for r in below if ref[r] is not None and ref[r] != theirs.get(r)]
    off = [f"{r}: {ours[r]:.2f} h against {ref[r]:.2f}" + (" (Gavel's code)" if r in by_code else "")
           for r in below if ref[r] is not None and abs(ours[r] - ref[r]) > TOLERANCE * ref[r]]
    note = f" ({', '.join(map(str, by_code))} jobs/h against Gavel's code on the same jobs)" if by_code else ""
    return [Check(f"{label}: mean JCT within {TOLERANCE:.0%} of Gavel's below the knee", not off,
                  "; ".join(off) or f"{len(below)} rates{note}"),
            Check(f"{label}: the knee within one rate step of Gavel's", _steps_apart(our_knee, their_knee, rates) <= 1,
                  f"ours {our_knee or 'none'}, Gavel's {their_knee or 'none'} jobs/h")]


def _steps_apart(a: float | None, b: float | None, rates) -> int:
    """How many rates apart two knees are (a knee beyond the last rate counts as one past it)."""
    idx = {r: i for i, r in enumerate(rates)}
    return abs(idx.get(a, len(rates)) - idx.get(b, len(rates)))


register_experiment(Experiment("gavel-continuous", "Gavel's continuous single-GPU jobs (Fig. 8), 36:36:36",
                               "Narayanan et al. OSDI'20, continuous_jobs.ipynb (seed 0)", run, default_seeds=1))
