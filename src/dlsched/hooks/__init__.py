"""Hooks for the common trainers, for a script dlsched runs by its `command` (issue 37):
progress through dlsched.reporting and a checkpoint when dlsched sends SIGTERM.

    from dlsched.hooks.lightning import DlschedCallback          # pip install dlsched[lightning]
    from dlsched.hooks.huggingface import DlschedTrainerCallback # pip install dlsched[huggingface]

Each module imports its trainer package only when it is imported itself; outside dlsched the
hooks still checkpoint on SIGTERM and their reports are no-ops (docs/runtime-byo-scripts.md).
"""
from __future__ import annotations

import os


def checkpoint_dir(default: str = "checkpoints") -> str:
    """The job's checkpoint directory (DLSCHED_CHECKPOINT_DIR, the same on every run of the
    job), or `default` outside dlsched; created if missing."""
    d = os.environ.get("DLSCHED_CHECKPOINT_DIR") or default
    os.makedirs(d, exist_ok=True)
    return d
