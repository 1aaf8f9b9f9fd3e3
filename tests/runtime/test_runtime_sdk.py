"""The SDK without Ray: a program stopped at a mini-batch boundary checkpoints atomically and a
restart continues the loss curve exactly; superseded and half-written checkpoints are removed."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dlsched.runtime.sdk import JobContext, clean_checkpoints, latest_checkpoint, load_entry

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(entry: str, ckpt: Path, iterations: int, stop_after: int | None = None, ps: bool = False) -> JobContext:
    import torch.distributed as dist
    ctx = JobContext(job_id="j", run_id="j.1", rank=0, world_size=1, worker_ranks=[0], ps_ranks=[],
                     master_addr="127.0.0.1", master_port=_port(), ckpt_dir=str(ckpt),
                     args={"seed": 3}, batch_size=32, iterations=iterations, checkpoint_every=7)
    if stop_after is not None:
        report = ctx.report

        def hook(**m):
            report(**m)
            if ctx.step + 1 >= stop_after:
                ctx.request_stop()
        ctx.report = hook
    try:
        load_entry(entry)(ctx)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return ctx


def test_stop_checkpoint_restore_continues_the_loss_curve(tmp_path):
    entry = str(EXAMPLES / "allreduce_digits.py")
    ref = run(entry, tmp_path / "ref", 40)
    assert not ref.stopped and [s["step"] for s in ref.stats] == list(range(40))
    a = run(entry, tmp_path / "b", 40, stop_after=17)
    assert a.stopped and a.step == 17 and len(a.stats) == 17
    assert latest_checkpoint(tmp_path / "b").name == "step-00000017.pt"
    b = run(entry, tmp_path / "b", 40)
    assert [s["step"] for s in b.stats] == list(range(17, 40))
    losses = [s["loss"] for s in a.stats + b.stats]
    assert losses == pytest.approx([s["loss"] for s in ref.stats], abs=1e-6)
    assert losses[-1] < losses[0]


def test_checkpoints_are_cleaned(tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    for s in (5, 10, 15):
        (d / f"step-{s:08d}.pt").write_bytes(b"x")
    (d / "step-00000020.pt.tmp").write_bytes(b"half")
    removed = clean_checkpoints(d, keep=2)
    assert sorted(removed) == ["step-00000005.pt", "step-00000020.pt.tmp"]
    assert sorted(p.name for p in d.iterdir()) == ["step-00000010.pt", "step-00000015.pt"]
