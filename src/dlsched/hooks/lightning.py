"""A PyTorch Lightning callback for a script dlsched runs (dlsched.hooks): it reports each
training step (and the logged `loss`, or the step's own loss) through dlsched.reporting, and
saves a checkpoint when the run is stopped by SIGTERM.

    from dlsched.hooks.lightning import DlschedCallback
    hook = DlschedCallback()                     # <DLSCHED_CHECKPOINT_DIR>/dlsched-last.ckpt
    trainer = L.Trainer(max_steps=1000, callbacks=[hook])
    trainer.fit(model, data, ckpt_path=hook.resume_path())   # None on the first run

Lightning handles SIGTERM itself (its signal connector; the ranks agree on it at the next batch)
and ends `fit` with a SIGTERMException; the callback's `on_exception` saves the checkpoint
first, on every rank together (`trainer.save_checkpoint`, written to a temporary file and
renamed, so a SIGKILL never leaves half a file), then reports `saved(step)`. The exception then
ends the script with exit code 1: dlsched counts a stop it asked for as a stop whatever the exit
code, so catching it is optional. `every_n_steps` also saves periodically.
"""
from __future__ import annotations

import os

import lightning.pytorch as pl
from lightning.pytorch.utilities.exceptions import SIGTERMException

from dlsched.hooks import checkpoint_dir
from dlsched.reporting import report, saved


class DlschedCallback(pl.Callback):
    """Progress and a checkpoint on SIGTERM for a Lightning Trainer run by dlsched."""

    def __init__(self, path: str | None = None, every_n_steps: int | None = None):
        self.path = path or os.path.join(checkpoint_dir(), "dlsched-last.ckpt")
        self.every_n_steps = every_n_steps
        self.saved_step: int | None = None

    def resume_path(self) -> str | None:
        """The checkpoint to resume from (for `trainer.fit(..., ckpt_path=...)`), if there is one."""
        return self.path if os.path.isfile(self.path) else None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = int(trainer.global_step)
        loss = trainer.callback_metrics.get("loss")
        if loss is None and isinstance(outputs, dict):
            loss = outputs.get("loss")
        elif loss is None and outputs is not None and hasattr(outputs, "item"):
            loss = outputs
        if trainer.is_global_zero:
            report(step=step, **({"loss": float(loss)} if loss is not None else {}))
        if self.every_n_steps and step % self.every_n_steps == 0:
            self.save(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and self.saved_step != int(trainer.global_step):
            self.save(trainer)

    def save(self, trainer) -> None:
        """Save the trainer's state (every rank calls it; rank 0 writes, then renames)."""
        tmp = self.path + ".tmp"
        trainer.save_checkpoint(tmp)
        if trainer.is_global_zero:
            os.replace(tmp, self.path)
            saved(int(trainer.global_step))
        self.saved_step = int(trainer.global_step)
