"""A Hugging Face `TrainerCallback` for a script dlsched runs (dlsched.hooks): it reports each
step (with the last logged loss) through dlsched.reporting, and on SIGTERM asks the Trainer to
save a checkpoint and stop at the end of the step.

    from dlsched.hooks.huggingface import DlschedTrainerCallback, last_checkpoint
    args = TrainingArguments(output_dir=checkpoint_dir(), save_strategy="no", ...)
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[DlschedTrainerCallback()])
    trainer.train(resume_from_checkpoint=last_checkpoint(args.output_dir))   # None: from scratch
    if trainer.state.global_step < args.max_steps: raise SystemExit(0)      # stopped: saved

The handler only sets a flag (a signal handler must not save). At the end of each step the ranks
agree on it (an all-reduce of one number when torch.distributed is initialised, so every rank
stops after the same step), then `control.should_save` and `control.should_training_stop` make
the Trainer write `checkpoint-<step>` into its output_dir and return from `train()`;
`on_save` reports `saved(step)`. The handler that was installed before it is kept and called.
"""
from __future__ import annotations

import signal

from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

from dlsched.reporting import report, saved


def last_checkpoint(output_dir: str) -> str | None:
    """The newest `checkpoint-<step>` folder in output_dir, or None (for resume_from_checkpoint)."""
    try:
        return get_last_checkpoint(output_dir)
    except (OSError, ValueError):
        return None


class DlschedTrainerCallback(TrainerCallback):
    """Progress and a checkpoint on SIGTERM for a transformers Trainer run by dlsched."""

    def __init__(self):
        self.term = False            # SIGTERM seen by this process
        self.stopping = False        # the ranks agreed: save and stop
        self._previous = None

    def on_train_begin(self, args, state, control, **kw):
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)

    def on_train_end(self, args, state, control, **kw):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _on_sigterm(self, signum, frame) -> None:
        self.term = True
        prev = self._previous
        if callable(prev) and prev not in (signal.SIG_IGN, signal.SIG_DFL):
            prev(signum, frame)

    def on_step_end(self, args, state, control, **kw):
        if state.is_world_process_zero:
            loss = next((h["loss"] for h in reversed(state.log_history) if "loss" in h), None)
            report(step=int(state.global_step), **({"loss": float(loss)} if loss is not None else {}))
        if self._agreed(args):
            self.stopping = True
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_save(self, args, state, control, **kw):
        if state.is_world_process_zero:
            saved(int(state.global_step))

    def _agreed(self, args) -> bool:
        import torch
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            return self.term
        flag = torch.tensor([1.0 if self.term else 0.0], device=args.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())
