"""Workloads: the common job schema, readers for public traces, generators, load / save.

    from dlsched.workload import load_workload
    jobs = load_workload("sample")                       # a generator
    jobs = load_workload("poisson:jobs=200,rate=0.02", seed=3)
    jobs = load_workload("pollux-6")                     # a bundled Pollux workload
    jobs = load_workload("philly.csv.gz")                # a file: schema, Philly or Pollux columns

See `dlsched.workload.io` for formats and references, `schema` for the columns,
`readers` for the trace conversions and `generators` for the synthetic workloads.
"""
from dlsched.workload.generators import GENERATORS, generate, parse_ref
from dlsched.workload.io import describe_workload, load_workload, save_workload
from dlsched.workload.schema import COLUMNS, COMMS, KINDS, REQUIRED, job_from_row, job_to_row

__all__ = [
    "load_workload", "save_workload", "describe_workload", "GENERATORS", "generate", "parse_ref",
    "COLUMNS", "REQUIRED", "KINDS", "COMMS", "job_from_row", "job_to_row",
]
