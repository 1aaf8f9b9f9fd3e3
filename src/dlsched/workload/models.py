"""The model zoo: what the speed model needs to know about a DL model.

Numbers are public figures (parameter counts) and rough per-sample training times; the six
Pollux applications (cifar10, ncf, deepspeech2, yolov3, imagenet, bert) have their T4 times
fitted from Pollux's single-GPU measurements (../shared/traces/pollux/app-profiles/*/placements.csv,
placement "1": step_time = overhead + local_bsz x per-sample time).

Fields
- param_mb: model (= gradient) size in MB; what all-reduce and parameter servers move.
- ms_per_sample: forward+backward time per sample on a V100 (ms); other GPU types scale by
  GPU_SPEED unless `ms_per_sample_by_gpu` gives a measured value.
- overhead_ms: fixed time per iteration (kernel launches, optimiser step).
- gpu_mem_gb: GPU memory the job needs at its default batch size (packing checks it).
- overlap: fraction of communication hidden behind compute (0 = none, 1 = fully overlapped).
- gpu_util: fraction of the GPU the job keeps busy alone (Gandiva packing uses it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Relative training speed by GPU type (V100 = 1).
GPU_SPEED: dict[str, float] = {
    "K80": 0.22, "P40": 0.5, "P100": 0.6, "T4": 0.4, "V100": 1.0, "A100": 2.1, "H100": 3.6, "none": 1.0,
}


@dataclass(frozen=True)
class ModelProfile:
    name: str
    param_mb: float
    ms_per_sample: float
    overhead_ms: float = 5.0
    gpu_mem_gb: float = 4.0
    overlap: float = 0.3
    gpu_util: float = 0.9
    default_batch: int = 64
    ms_per_sample_by_gpu: dict[str, float] = field(default_factory=dict)

    @property
    def param_bytes(self) -> float:
        return self.param_mb * 1e6

    def sample_time_s(self, gpu_type: str) -> float:
        if gpu_type in self.ms_per_sample_by_gpu:
            return self.ms_per_sample_by_gpu[gpu_type] / 1000.0
        return self.ms_per_sample / GPU_SPEED.get(gpu_type, 1.0) / 1000.0


def _m(name, param_mb, ms, **kw) -> ModelProfile:
    return ModelProfile(name, param_mb, ms, **kw)


ZOO: dict[str, ModelProfile] = {m.name: m for m in [
    # Pollux applications (T4 per-sample times fitted from placements.csv, placement "1").
    _m("cifar10", 44.7, 0.29, overhead_ms=15, gpu_mem_gb=3, overlap=0.9, gpu_util=0.6, default_batch=128,
       ms_per_sample_by_gpu={"T4": 0.66}),                   # ResNet-18, 11.2 M params
    _m("imagenet", 102.2, 1.9, overhead_ms=20, gpu_mem_gb=12, overlap=0.9, gpu_util=0.95, default_batch=200,
       ms_per_sample_by_gpu={"T4": 4.5}),                    # ResNet-50, 25.6 M params
    _m("bert", 440.0, 28.0, overhead_ms=150, gpu_mem_gb=12, overlap=0.1, gpu_util=0.95, default_batch=12,
       ms_per_sample_by_gpu={"T4": 58.0}),                   # BERT-base fine-tuning, 110 M params
    _m("ncf", 8.0, 0.0012, overhead_ms=7.2, gpu_mem_gb=1, overlap=0.0, gpu_util=0.3, default_batch=1024,
       ms_per_sample_by_gpu={"T4": 0.0003}),                 # NeuMF
    _m("deepspeech2", 152.0, 10.5, overhead_ms=150, gpu_mem_gb=10, overlap=0.5, gpu_util=0.9, default_batch=20,
       ms_per_sample_by_gpu={"T4": 26.0}),                   # DeepSpeech2, 38 M params
    _m("yolov3", 248.0, 12.0, overhead_ms=100, gpu_mem_gb=10, overlap=0.2, gpu_util=0.9, default_batch=8,
       ms_per_sample_by_gpu={"T4": 30.0}),                   # YOLOv3, 62 M params
    # Other common models (Gandiva Table 1, Tiresias, seed 000/002).
    _m("alexnet", 244.0, 0.5, overhead_ms=5, gpu_mem_gb=3, overlap=0.0, gpu_util=0.7, default_batch=128),
    _m("vgg16", 553.0, 4.5, overhead_ms=10, gpu_mem_gb=10, overlap=0.3, gpu_util=0.95, default_batch=64),
    _m("resnet18", 44.7, 0.29, overhead_ms=10, gpu_mem_gb=3, overlap=0.5, gpu_util=0.6, default_batch=128),
    _m("resnet50", 102.2, 1.9, overhead_ms=15, gpu_mem_gb=12, overlap=0.5, gpu_util=0.95, default_batch=64),
    _m("resnet101", 178.0, 3.3, overhead_ms=20, gpu_mem_gb=14, overlap=0.5, gpu_util=0.95, default_batch=64),
    _m("resnext50", 100.0, 2.6, overhead_ms=15, gpu_mem_gb=14, overlap=0.5, gpu_util=0.95, default_batch=64),
    _m("inception3", 95.3, 2.7, overhead_ms=15, gpu_mem_gb=10, overlap=0.5, gpu_util=0.9, default_batch=64),
    _m("googlenet", 26.6, 1.0, overhead_ms=10, gpu_mem_gb=5, overlap=0.5, gpu_util=0.8, default_batch=128),
    _m("densenet121", 32.0, 2.0, overhead_ms=15, gpu_mem_gb=8, overlap=0.5, gpu_util=0.85, default_batch=64),
    _m("mobilenet", 16.8, 0.6, overhead_ms=10, gpu_mem_gb=4, overlap=0.5, gpu_util=0.5, default_batch=128),
    _m("lstm", 264.0, 1.2, overhead_ms=10, gpu_mem_gb=6, overlap=0.2, gpu_util=0.85, default_batch=64),
    _m("transformer", 260.0, 3.0, overhead_ms=20, gpu_mem_gb=12, overlap=0.3, gpu_util=0.9, default_batch=64),
    _m("gpt2", 498.0, 12.0, overhead_ms=30, gpu_mem_gb=16, overlap=0.3, gpu_util=0.95, default_batch=16),
    _m("vae", 3.2, 0.05, overhead_ms=3, gpu_mem_gb=1, overlap=0.0, gpu_util=0.2, default_batch=128),
    _m("superresolution", 0.24, 0.4, overhead_ms=3, gpu_mem_gb=1, overlap=0.0, gpu_util=0.25, default_batch=64),
    _m("dcgan", 14.0, 0.3, overhead_ms=5, gpu_mem_gb=2, overlap=0.0, gpu_util=0.4, default_batch=128),
    _m("deepspeech", 152.0, 10.5, overhead_ms=50, gpu_mem_gb=10, overlap=0.5, gpu_util=0.9, default_batch=32),
]}


def get_model(name: str | None) -> ModelProfile | None:
    """The zoo entry for a model name, case-insensitive; None for None or an unknown model."""
    if name is None:
        return None
    return ZOO.get(str(name).lower())
