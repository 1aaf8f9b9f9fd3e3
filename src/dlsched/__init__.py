"""dlsched: schedules deep-learning training jobs on shared GPU clusters.

One policy core drives a trace-driven simulator (this package's `simulate`) and, later, a real
runtime. See README.md for the tour."""
from dlsched.api import simulate, load_policy_config

__version__ = "0.1.0"
__all__ = ["simulate", "load_policy_config", "__version__"]
