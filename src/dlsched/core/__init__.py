"""Frozen value types shared by every part of dlsched."""
from dlsched.core.types import (
    RESOURCES, NRES, GPU, CPU, MEM, DISK, NET,
    NodeSpec, TaskSpec, JobSpec, Status, Code,
    TaskPlacement, Launch, Suspend, Resume, Migrate, Resize, Plan,
)
from dlsched.core.errors import DlschedError, InputError, ConfigError

__all__ = [
    "RESOURCES", "NRES", "GPU", "CPU", "MEM", "DISK", "NET",
    "NodeSpec", "TaskSpec", "JobSpec", "Status", "Code",
    "TaskPlacement", "Launch", "Suspend", "Resume", "Migrate", "Resize", "Plan",
    "DlschedError", "InputError", "ConfigError",
]
