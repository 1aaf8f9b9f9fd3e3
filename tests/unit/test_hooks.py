"""The trainer hooks (dlsched.hooks) with the real packages, where they are installed (they are
not in the `test` extra: `pip install -e .[lightning,huggingface]`): a tiny training script per
trainer runs as a command job's rank runs it (dlsched.runtime.byo.ProcRun: the report FIFO, the
checkpoint dir), is stopped by SIGTERM mid-training, saves its checkpoint within the grace
period (its progress says so: no work lost), and a second run resumes from it and finishes."""
from __future__ import annotations

import textwrap
import threading
import time

import pytest

from dlsched.runtime.byo import ProcRun

LIGHTNING = """
    import sys, time, torch
    import lightning as L
    from lightning.pytorch.utilities.exceptions import SIGTERMException
    from torch.utils.data import DataLoader, TensorDataset
    from dlsched.hooks.lightning import DlschedCallback

    class M(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)
        def training_step(self, batch, i):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.lin(x), y)
            self.log("loss", loss)
            time.sleep(0.05)
            return loss
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    torch.manual_seed(0)
    X = torch.randn(64, 4)
    data = DataLoader(TensorDataset(X, X.sum(1, keepdim=True)), batch_size=8)
    hook = DlschedCallback()
    t = L.Trainer(max_steps=int(sys.argv[1]), callbacks=[hook], logger=False, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)
    try:
        t.fit(M(), data, ckpt_path=hook.resume_path())
    except SIGTERMException:
        print("stopped at", t.global_step, flush=True)
        sys.exit(0)
    print("done at", t.global_step, flush=True)
"""

HUGGINGFACE = """
    import sys, time, torch
    from transformers import Trainer, TrainingArguments
    from dlsched.hooks import checkpoint_dir
    from dlsched.hooks.huggingface import DlschedTrainerCallback, last_checkpoint

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)
        def forward(self, x, labels=None):
            time.sleep(0.05)
            out = self.lin(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    class DS(torch.utils.data.Dataset):
        def __init__(self):
            self.X = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
        def __len__(self):
            return 64
        def __getitem__(self, i):
            return {"x": self.X[i], "labels": self.X[i].sum(0, keepdim=True)}

    args = TrainingArguments(output_dir=checkpoint_dir(), max_steps=int(sys.argv[1]), per_device_train_batch_size=8,
                             logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
    hook = DlschedTrainerCallback()
    tr = Trainer(model=M(), args=args, train_dataset=DS(), callbacks=[hook])
    tr.train(resume_from_checkpoint=last_checkpoint(args.output_dir))
    print("stopped at" if hook.stopping else "done at", tr.state.global_step, flush=True)
"""


class _Ctx:
    """What ProcRun feeds: the run's progress records (as JobContext.report gets them)."""

    def __init__(self):
        self.step, self._step_t0, self.records = 0, 0.0, []

    def report(self, **rec):
        self.step = rec["step"]
        self.records.append(rec)


def _run(tmp_path, attempt: int, steps: int, stop_at: int | None):
    payload = {"command": ["python", "train.py", str(steps)], "rank": 0, "world_size": 1, "local_rank": 0,
               "local_world_size": 1, "master_addr": "127.0.0.1", "master_port": 29500,
               "ckpt_dir": str(tmp_path / "ckpt"), "job_id": "j", "run_id": f"j.{attempt}"}
    ctx = _Ctx()
    run = ProcRun(payload, ctx, str(tmp_path / "rank-0.log"), str(tmp_path))
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(run.run()), daemon=True)
    t.start()
    if stop_at is not None:
        t0 = time.monotonic()
        while ctx.step < stop_at and t.is_alive():
            assert time.monotonic() - t0 < 240, (tmp_path / "rank-0.log").read_text()[-3000:]
            time.sleep(0.05)
        run.stop(60.0)
    t.join(300)
    return out, ctx, (tmp_path / "rank-0.log").read_text()


@pytest.mark.parametrize("package, script", [("lightning", LIGHTNING), ("transformers", HUGGINGFACE)])
def test_hook_checkpoints_on_sigterm_and_resumes(tmp_path, package, script):
    pytest.importorskip(package)
    (tmp_path / "train.py").write_text(textwrap.dedent(script))
    first, ctx, log = _run(tmp_path, 1, steps=40, stop_at=5)
    assert first["state"] == "stopped" and first["within_grace"], (first, log[-3000:])
    assert first["lost_basis"] == "saved" and first["lost_steps"] == 0, (first, log[-3000:])
    k = first["saved_step"]
    assert 5 <= k < 40 and f"stopped at {k}" in log
    assert ctx.records[0]["step"] == 1 and "loss" in ctx.records[-1]
    second, ctx2, log = _run(tmp_path, 2, steps=40, stop_at=None)
    assert second["state"] == "done", (second, log[-3000:])
    assert ctx2.records[0]["step"] == k + 1 and ctx2.records[-1]["step"] == 40, ctx2.records[:3]
    assert "done at 40" in log
