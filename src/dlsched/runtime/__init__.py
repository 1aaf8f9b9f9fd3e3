"""The real runtime: a RayBackend for the scheduler core, the server (REST API + SQLite store),
the job spec and the SDK training programs use. Ray and torch are imported lazily."""
from dlsched.runtime.spec import RuntimeJobSpec, job_spec_from_dict, load_job_spec

__all__ = ["RuntimeJobSpec", "job_spec_from_dict", "load_job_spec"]
