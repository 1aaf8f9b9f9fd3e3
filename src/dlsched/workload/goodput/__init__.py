"""Pollux's goodput model (Qiao et al., OSDI'21): throughput x statistical efficiency of a
data-parallel job, fitted from its observed steps, with the batch-size search and the speedup
function that Pollux's policy optimises.

Why here (`dlsched.workload.goodput`) and not under `dlsched.policies`: this is a job model,
like the speed model and the measured profiles next to it. The Pollux policy will read it, but
so will the simulator (a job's trained batch and progress rate) and the runtime server (fitting
goodput from what it measures), and `policies/` holds one registered policy per module.

Modules (each opens with its formulas and the adaptdl file and function they come from):

- `throughput`: the 7-parameter step-time model and throughput;
- `fit`: bounded L-BFGS-B fit of those parameters on log errors, Pollux's priors and
  regularisers;
- `stat_efficiency`: gradient noise scale and the efficiency of batch M relative to M0;
- `model`: goodput = throughput x efficiency for one job;
- `search`: the best atomic batch and accumulation steps at each (nodes, replicas);
- `speedup`: goodput over the base allocation's, memoised;
- `data`: the bundled Pollux profiles as fit samples and batch limits.

    from dlsched.workload.goodput import (
        app_limits, placement_samples, fit_perf_params, app_grad_params, GoodputModel,
        SpeedupFunction)
    fit = fit_perf_params(placement_samples("cifar10"))
    lim = app_limits("cifar10")
    model = GoodputModel(fit.params, app_grad_params("cifar10", lim.init_batch_size, 0),
                         lim.init_batch_size)
    SpeedupFunction(model, lim)(2, 8)   # 8 GPUs on 2 nodes vs 1 GPU

Importing the package imports scipy (`fit` needs scipy.optimize); the other modules need numpy only.
"""
from dlsched.workload.goodput.data import AppLimits, Samples, app_limits, placement_samples
from dlsched.workload.goodput.fit import FitResult, fit_observations, fit_perf_params
from dlsched.workload.goodput.model import GoodputModel
from dlsched.workload.goodput.search import BestBatch, best_batch, global_batch
from dlsched.workload.goodput.speedup import SpeedupFunction, fair_share_base, linear_speedup
from dlsched.workload.goodput.stat_efficiency import (
    GradParams, app_grad_params, efficiency, gain, noise_scale,
)
from dlsched.workload.goodput.throughput import (
    PerfParams, compute_time, network_time, step_time, sync_step_time, throughput,
)

__all__ = [
    "AppLimits", "Samples", "app_limits", "placement_samples",
    "FitResult", "fit_perf_params", "fit_observations",
    "GoodputModel", "BestBatch", "best_batch", "global_batch",
    "SpeedupFunction", "fair_share_base", "linear_speedup",
    "GradParams", "app_grad_params", "efficiency", "gain", "noise_scale",
    "PerfParams", "compute_time", "network_time", "step_time", "sync_step_time", "throughput",
]
