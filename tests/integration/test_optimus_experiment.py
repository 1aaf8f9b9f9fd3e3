"""seed001-optimus runs end to end (one seed, a smaller workload, few ILP cases: quick)."""
from dlsched.experiments import EXPERIMENTS
from dlsched.experiments.base import write_outputs
from dlsched.experiments.seed001_optimus import run


def test_seed001_optimus_runs_and_computes_its_figures(tmp_path):
    assert "seed001-optimus" in EXPERIMENTS
    res = run(seeds=1, gap_cases=2, workload="seed001:jobs=8")
    runs = res.results[""]
    assert set(runs) == {"optimus", "drf", "tetris", "optimus-oracle"}
    assert all(r[0].summary["finished"] == 8 for r in runs.values())
    ours = {row["figure"]: row["ours"] for row in res.published}
    jr = runs["drf"][0].summary["mean_jct_s"] / runs["optimus"][0].summary["mean_jct_s"]
    assert ours["mean JCT DRF / Optimus"] == f"{jr:.2f}x"
    assert ours["all jobs done, drf (h)"] == f"{runs['drf'][0].summary['makespan_s'] / 3600:.2f}"
    assert jr > 1.0                                              # the expected direction
    gap = next(c for c in res.checks if "never better" in c.text)
    assert gap.ok and res.extra["gap_study"]["cases"] == 2
    write_outputs(res, tmp_path / "o")
    assert (tmp_path / "o" / "summary.json").exists()
