"""Resource requirement estimation (Liquid, seed 003): what a job really needs, learned offline.

Liquid observes that the resources users request are often wrong (over-provisioning, or a job
slowed by too little), and that past some amount a job's execution time stops improving (the law
of diminishing marginal utility). It trains a random forest offline that maps a job's type and key
parameters to its requirement vector <N x GPU, GMem, Bandwidth>, and schedules by the estimate.

    label.py   the labelling rule (smallest allocation within a tolerance of the best execution
               time) and the execution-time oracle (dlsched's speed model, Pollux's measured
               profiles); the GPU memory model
    data.py    training data: generated jobs and allocations, a workload file of measured runs,
               the runtime's store; grouped by job for a held-out split
    model.py   the features, the forest, the baselines (linear regression, the user's request),
               RMSE and R^2
    saved.py   training with provenance, saving and loading by name (a JSON sidecar, private
               atomic files, a cache folder, the default model trained on first use)

The `liquid_estimate` allocator (dlsched.policies.allocate.liquid_estimate) puts estimates to
use in the `liquid` and `liquid-immediate` profiles; `dlsched estimator train|evaluate` and the
`liquid-estimator` experiment expose them. scikit-learn and joblib are imported only when a
model is fitted, saved or loaded.
"""
