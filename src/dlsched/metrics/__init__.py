"""Event log and records -> per-job table, run summary, utilisation timeline."""
from dlsched.metrics.result import SimResult, build_result, SUMMARY_KEYS

__all__ = ["SimResult", "build_result", "SUMMARY_KEYS"]
