"""Reproduced experiments: `dlsched experiment NAME --out DIR`.

Each experiment runs policies over several seeds on the workload and cluster of a published
result, computes every figure from the simulations (mean and spread over seeds), prints the
published figure beside ours, checks the expected direction, and writes results.csv,
summary.json, plots and report.html. Nothing in an experiment is typed in except the published
figures it compares with (kept in its module, with their source).
"""
from dlsched.experiments.base import EXPERIMENTS, ExperimentResult, run_experiment

# Each experiment module registers itself.
from dlsched.experiments import seed000_tetris, seed002_k8s, liquid_scaling  # noqa: F401,E402
from dlsched.experiments import pollux_fidelity  # noqa: F401,E402
from dlsched.experiments import seed001_gandiva  # noqa: F401,E402
from dlsched.experiments import seed001_optimus  # noqa: F401,E402
from dlsched.experiments import runtime_fidelity, seed001_figure9  # noqa: F401,E402
from dlsched.experiments import liquid_estimator, seed000_deadlines  # noqa: F401,E402
from dlsched.experiments import liquid_gpu_sharing, liquid_prescheduling, liquid_event_driven  # noqa: F401,E402
from dlsched.experiments import seed000_batch_size  # noqa: F401,E402
from dlsched.experiments import philly_vc  # noqa: F401,E402
from dlsched.experiments import gavel_continuous  # noqa: F401,E402
from dlsched.experiments import tiresias_fidelity  # noqa: F401,E402
from dlsched.experiments import pollux_runtime, pollux_sensitivity  # noqa: F401,E402

__all__ = ["EXPERIMENTS", "ExperimentResult", "run_experiment"]
