"""Pollux on the runtime, without Ray: the SDK's gradient statistics (AdaptDL's estimator, and
`allreduce_gradients` on a real 2-process gloo gang), the server's goodput fit from stored step
records (a real SQLite store), and the pollux allocator's pieces for a measured job."""
from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from dlsched.runtime.goodput import MeasuredGoodput, fit_records, grad_of, samples_of
from dlsched.runtime.sdk import JobContext, gradient_stats
from dlsched.runtime.store import Store
from dlsched.workload.goodput import PerfParams, sync_step_time


def test_gradient_stats_unbiased():
    """Per-sample gradients G + noise of known trace S: the estimates average to |G|^2 and S/M0."""
    rng = np.random.default_rng(0)
    d, n, b, m0 = 20, 4, 8, 16
    g = rng.normal(size=d) * 0.3
    sigma = 1.5                                   # per-coordinate noise: S = d sigma^2
    sqr, var = [], []
    for _ in range(4000):
        local = g + rng.normal(scale=sigma, size=(n, b, d)).mean(axis=1)   # (n, d)
        local_sqr = float(np.mean(np.sum(local ** 2, axis=1)))
        total_sqr = float(np.sum(local.mean(axis=0) ** 2))
        s, v = gradient_stats(local_sqr, total_sqr, n, b, m0)
        sqr.append(s)
        var.append(v)
    assert np.mean(sqr) == pytest.approx(float(g @ g), rel=0.1)
    assert np.mean(var) == pytest.approx(d * sigma ** 2 / m0, rel=0.05)
    with pytest.raises(ValueError, match="at least 2 replicas"):
        gradient_stats(1.0, 1.0, 1, 8, 16)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, ckpt: str, out) -> None:
    torch.set_num_threads(1)
    ctx = JobContext("j", "j.1", rank, 2, [0, 1], [], "127.0.0.1", port, ckpt, batch_size=8,
                     init_batch_size=4, num_nodes=1)
    ctx.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x = torch.arange(24, dtype=torch.float32).reshape(8, 3) / 10
    y = torch.ones(8, 1)
    model.zero_grad()
    torch.nn.functional.mse_loss(model(x[ctx.local_batch]), y[ctx.local_batch]).backward()
    local = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()
    ctx.allreduce_gradients(model)
    avg = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()
    ctx.report(loss=0.0)
    out.put((rank, local.tolist(), avg.tolist(), ctx.stats[-1] if ctx.stats else None))
    import torch.distributed as dist
    dist.barrier()
    dist.destroy_process_group()


def test_allreduce_gradients_two_ranks(tmp_path):
    """A real gloo gang of 2: the gradients become the mean, and rank 0's report carries the
    all-reduce time, the shape and AdaptDL's statistics of the two local gradients."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, str(tmp_path), q)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict((r, (loc, avg, rec)) for r, loc, avg, rec in (q.get(timeout=120) for _ in procs))
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    l0, l1 = np.array(got[0][0]), np.array(got[1][0])
    mean = (l0 + l1) / 2
    assert np.allclose(got[0][1], mean, atol=1e-6) and np.allclose(got[1][1], mean, atol=1e-6)
    rec = got[0][2]
    assert got[1][2] is None                        # only rank 0 reports
    assert rec["replicas"] == 2 and rec["local_bsz"] == 4 and rec["nodes"] == 1 and rec["sync_s"] > 0
    sqr, var = gradient_stats(float((l0 @ l0 + l1 @ l1) / 2), float(mean @ mean), 2, 4, 4)
    assert rec["grad_sqr"] == pytest.approx(sqr, rel=1e-4) and rec["grad_var"] == pytest.approx(var, rel=1e-4)


def test_allreduce_gradients_one_rank_and_no_grad(tmp_path):
    ctx = JobContext("j", "j.1", 0, 1, [0], [], "127.0.0.1", 0, str(tmp_path), batch_size=8)
    model = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match="after backward"):
        ctx.allreduce_gradients(model)
    model(torch.ones(8, 2)).sum().backward()
    before = model.weight.grad.clone()
    ctx.allreduce_gradients(model)
    assert torch.equal(model.weight.grad, before)
    ctx.report(loss=1.0)
    rec = ctx.stats[-1]
    assert rec["sync_s"] == 0.0 and rec["replicas"] == 1 and "grad_sqr" not in rec   # 1 replica: none
    ctx.close()


TRUE = PerfParams(0.02, 0.004, 0.05, 0.01, 0.03, 0.005, 1.5)


def _records(shapes, steps=5):
    """Step records of a job whose steps follow TRUE (a fifth of T_sync is its all-reduce)."""
    recs, step = [], 0
    for k, n, b in shapes:
        t = float(sync_step_time(TRUE, k, n, b))
        for _ in range(steps):
            recs.append({"step": step, "step_s": t, "sync_s": 0.2 * t if n > 1 else 0.0, "local_bsz": b,
                         "replicas": n, "nodes": k, "time": float(step),
                         **({"grad_sqr": 1.0, "grad_var": 4.0} if n > 1 else {})})
            step += 1
    return recs


def test_fit_from_a_store(tmp_path):
    """Records stored as the server stores them are fitted by the goodput package's fit: the
    shapes seen are predicted within a few per cent; the gradient statistics are their mean."""
    st = Store(tmp_path / "db")
    st.add_stats("a", _records([(1, 1, 32), (1, 2, 16), (1, 2, 32), (2, 4, 16), (1, 4, 8)]))
    recs = st.stats("a")
    s = samples_of(recs)
    assert len(s) == 5
    model, lim = fit_records(recs, 32, 256)
    assert lim.init_batch_size == 32 and lim.max_batch_size == 256 and lim.max_local_bsz == 256
    pred = np.asarray(sync_step_time(model.perf, s.nodes, s.replicas, s.atomic_bsz))
    assert np.max(np.abs(pred / s.step_s - 1)) < 0.05
    assert tuple(model.grad) == (1.0, 4.0)
    fits = MeasuredGoodput(st, refit_s=0.0)
    assert fits("a", 32, 256) is not None and fits("nobody", 32, 256) is None
    st.close()


def test_grad_of_floors_and_defaults():
    assert tuple(grad_of([])) == (1.0, 0.0)                 # none measured yet: keep M0 (E = M0 / M)
    g = grad_of([{"grad_sqr": -5.0, "grad_var": 2.0}])
    assert g.var == 2.0 and g.sqr == pytest.approx(2e-3)
    assert samples_of([{"step": 0, "step_s": 0.1}]) is None  # a record without allreduce_gradients


def test_measured_job_in_the_allocator():
    """A runtime job with max_batch_size is adaptive with a measured model: its batch is a
    multiple of its replicas within its limit, its row linear before a fit."""
    from dlsched.policies.allocate.pollux import (
        PolluxAllocate, adaptive, measured, measured_batch, measured_limit)
    from dlsched.runtime.spec import RuntimeJobSpec
    spec = RuntimeJobSpec(name="p", entry="x.py", workers=1, batch_size=32, max_batch_size=256,
                          iterations=100).to_jobspec("p", 0.0)
    assert json.loads(spec.extra) == {"max_batch_size": 256}
    assert measured_limit(spec) == 256 and adaptive(spec) and measured(spec)
    rigid = RuntimeJobSpec(name="r", entry="x.py", batch_size=32, iterations=100).to_jobspec("r", 0.0)
    assert measured_limit(rigid) is None and not adaptive(rigid)
    assert measured_batch(None, spec, 1, 3) == 33            # before a fit: M0 over 3 replicas
    fit = fit_records(_records([(1, 1, 32), (1, 2, 16)]), 32, 256)
    for n in (1, 2, 4, 8):
        b = measured_batch(fit, spec, 1, n)
        assert b % n == 0 and n <= b <= 256
    rec = type("Rec", (), {"job_id": "p", "spec": spec})
    row = PolluxAllocate().measured_row(rec, type("C", (), {"goodput": None})(), (1, 2), 4)
    assert row[1, 1:5].tolist() == [0.5, 1.0, 1.5, 2.0] and row[2, 1] == 0.0


@pytest.mark.parametrize("over, words", [
    ({"max_batch_size": 16}, "must be >= batch_size (32)"),
    ({"max_batch_size": 0}, "must be >= 1"),
    ({"max_batch_size": "big"}, "must be an integer"),
    ({"max_batch_size": 64, "ps": 1}, "all-reduce job"),
    ({"max_batch_size": 64, "entry": None, "command": ["python", "t.py"]}, "command job cannot"),
])
def test_bad_max_batch_size_one_line(over, words):
    from pathlib import Path

    from dlsched.core.errors import InputError
    from dlsched.runtime.spec import job_spec_from_dict
    ex = Path(__file__).resolve().parents[2] / "examples"
    spec = {"name": "p", "entry": "pollux_digits.py", "batch_size": 32, "iterations": 10, **over}
    spec = {k: v for k, v in spec.items() if v is not None}
    with pytest.raises(InputError) as e:
        job_spec_from_dict(spec, file="p.yaml", base_dir=ex)
    msg = str(e.value)
    assert "max_batch_size" in msg and words in msg and "\n" not in msg
    ok = job_spec_from_dict({"name": "p", "entry": "pollux_digits.py", "batch_size": 32, "iterations": 10,
                             "max_batch_size": 256}, base_dir=ex)
    assert ok.max_batch_size == 256


@pytest.mark.parametrize("batch, seen", [(32, list(range(10))), (64, [0, 2, 4, 6, 8]),
                                         (48, [0, 1, 3, 4, 6, 7, 9])])
def test_steps_count_work_at_the_initial_batch(tmp_path, batch, seen):
    """A run with batch M advances M / M0 steps per mini-batch: the same samples whatever M;
    checkpoints where a multiple of checkpoint_every is crossed, and at the end."""
    ctx = JobContext("j", "j.1", 0, 1, [0], [], "127.0.0.1", 0, str(tmp_path), batch_size=batch,
                     init_batch_size=32, iterations=10, checkpoint_every=4)
    got = list(ctx.steps(0, lambda: {}))
    assert got == seen
    steps = [c["step"] for c in ctx.checkpoints]
    assert len(steps) == 3 and steps[-1] == 10 and steps[0] == 4       # 4, (8 or 9), 10


def test_a_runtime_job_simulated_under_pollux_runs_on_the_speed_model():
    """What-if and runtime-fidelity simulate the runtime's jobs: a job with max_batch_size gets
    pollux's rows and a BatchChoice, which the simulator (no measurements) leaves aside."""
    from dlsched.api import simulate
    from dlsched.runtime.spec import RuntimeJobSpec
    jobs = [RuntimeJobSpec(name=f"p{i}", entry="x.py", workers=1, batch_size=32, max_batch_size=256,
                           iterations=2000, model="resnet50").to_jobspec(f"p{i}", 10.0 * i) for i in range(3)]
    res = simulate("pollux", jobs, "pollux", seed=0)
    assert res.summary["finished"] == 3
    again = simulate("pollux", jobs, "pollux", seed=0)
    assert again.summary["mean_jct_s"] == res.summary["mean_jct_s"]


@pytest.mark.parametrize("max_batch, rate", [(256, 20.0), (None, 10.0)])
def test_rate_counts_the_steps_a_record_advances(tmp_path, max_batch, rate):
    """A job pollux gave batch 2 x M0 advances 2 steps per 0.1 s mini-batch: 20 steps/s. A job
    without max_batch_size keeps the old reading (one step per record)."""
    from dlsched.runtime.progress import job_stats
    from dlsched.runtime.spec import RuntimeJobSpec
    st = Store(tmp_path / "db")
    spec = RuntimeJobSpec(name="p", entry="x.py", batch_size=32, max_batch_size=max_batch, iterations=100)
    jid = st.add_job(spec.to_dict(), 0.0)
    st.update_job(jid, state="running", workers=1)
    st.event(jid, "started", "", t=100.0)
    st.add_stats(jid, [{"step": 2 * i, "step_s": 0.1, "time": 101.0 + i} for i in range(8)])
    assert job_stats(st, jid, 0.0, 110.0)["rate"] == pytest.approx(rate)
    st.close()


def test_a_running_job_keeping_its_gpu_restarts_for_a_batch_far_from_its_own():
    """Round 1 without a fit: the job starts at M0 on the only GPU. Round 2 with a fit whose
    noise dominates (a large batch loses little): same GPU, a batch >= 1.5 x M0, so pollux
    restarts it (a Resize carrying the BatchChoice); round 3 with the same fit: nothing."""
    import dlsched.policies  # noqa: F401
    from dlsched.cluster import cluster_from_dict
    from dlsched.core.types import Resize
    from dlsched.policies.allocate.pollux import BatchChoice
    from dlsched.runtime.spec import RuntimeJobSpec
    from dlsched.scheduler.core import Scheduler, build_profile
    from dlsched.sim.backend import SimBackend
    one = {"node_groups": [{"count": 1, "gpus": 1, "gpu_mem_gb": 32, "cpus": 8, "mem_gb": 64}]}
    spec = RuntimeJobSpec(name="p", entry="x.py", batch_size=32, max_batch_size=256, iterations=10 ** 6,
                          model="resnet50").to_jobspec("p", -100.0)   # (age 0: Pollux's penalty 0)
    sched = Scheduler(build_profile("pollux"))
    backend = SimBackend(cluster_from_dict(one), [spec])
    for e in backend.poll():
        sched.handle(e, backend)
    sched._stats = backend.job_stats

    def round_():
        plan = sched.round(backend.snapshot())
        sched.commit_round()
        backend.apply(plan)
        sched._after_apply(plan, backend.now())
        return [d for d in plan.ordered() if isinstance(d, Resize)]
    first = round_()
    assert [d.adapt.batch_size for d in first] == [32]
    recs = [{"step": i, "step_s": 0.01 + 0.001 * b, "sync_s": 0.0, "local_bsz": b, "replicas": 1, "nodes": 1}
            for i, b in enumerate((16, 32, 64, 128) * 3)]
    fit = fit_records(recs + [{"step": 99, "grad_sqr": 1e-4, "grad_var": 1.0}], 32, 256)
    sched._goodput = lambda job_id, m0, mmax: fit
    second = round_()
    assert len(second) == 1 and isinstance(second[0].adapt, BatchChoice) and second[0].adapt.batch_size >= 48
    assert round_() == []
