"""Which GPU instance a model needs: its weights and KV cache per GPU at the tensor parallel degree the
instance gives it, against each GPU's memory, before anything is created.

Read from the model folder itself, never guessed from its name (``models/footprint.py``: the
safetensors headers and config.json). What the container will hold per GPU:

    weights / tp  +  KV of one full-context sequence / tp  +  RUNTIME_GIB (activations, CUDA graphs,
    the CUDA context: vLLM measures its own at start; this is a planning allowance)

against ``gpu_memory_utilization`` (the container's default, 0.9) of the GPU. Whatever the GPUs hold
beyond that is KV cache for more sequences at once, which this reports as the number of
full-context sequences that fit. The tensor parallel degree is the instance's GPU count, lowered to a
divisor of the model's attention and KV heads (vLLM splits heads evenly across GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelLoadError
from ..models.footprint import Footprint, read_footprint
from .errors import DeployError

GIB = 1024**3
RUNTIME_GIB = 2.0  # per GPU: activations of a full step, CUDA graphs and the CUDA context (an allowance)
GPU_MEMORY_UTILIZATION = 0.90  # the container's default LLM_BYOC_GPU_MEMORY_UTILIZATION

_SERVE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "auto": 2}  # auto on a GPU: bfloat16 (float16 on T4)


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gib: float  # what the driver reports as total, in GiB


A10G, L4, L40S, T4 = Gpu("A10G", 22.0), Gpu("L4", 22.0), Gpu("L40S", 44.5), Gpu("T4", 14.6)
A100_40, A100_80, H100, H200 = Gpu("A100 40GB", 39.4), Gpu("A100 80GB", 79.2), Gpu("H100", 79.2), Gpu("H200", 139.8)

# SageMaker hosting instances with NVIDIA GPUs: (GPU, how many). Memory as nvidia-smi reports it.
GPU_INSTANCES: dict[str, tuple[Gpu, int]] = {
    **{f"ml.g4dn.{size}": (T4, 1) for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "ml.g4dn.12xlarge": (T4, 4),
    **{f"ml.g5.{size}": (A10G, 1) for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "ml.g5.12xlarge": (A10G, 4), "ml.g5.24xlarge": (A10G, 4), "ml.g5.48xlarge": (A10G, 8),
    **{f"ml.g6.{size}": (L4, 1) for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "ml.g6.12xlarge": (L4, 4), "ml.g6.24xlarge": (L4, 4), "ml.g6.48xlarge": (L4, 8),
    **{f"ml.g6e.{size}": (L40S, 1) for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "ml.g6e.12xlarge": (L40S, 4), "ml.g6e.24xlarge": (L40S, 4), "ml.g6e.48xlarge": (L40S, 8),
    "ml.p4d.24xlarge": (A100_40, 8), "ml.p4de.24xlarge": (A100_80, 8),
    "ml.p5.48xlarge": (H100, 8), "ml.p5e.48xlarge": (H200, 8), "ml.p5en.48xlarge": (H200, 8),
}
# The order to recommend in: smallest first (one GPU before several, less memory before more).
_SMALLEST_FIRST = ("ml.g5.xlarge", "ml.g6.xlarge", "ml.g6e.xlarge", "ml.g5.12xlarge", "ml.g6.12xlarge",
                   "ml.g6e.12xlarge", "ml.g5.48xlarge", "ml.g6.48xlarge", "ml.g6e.48xlarge", "ml.p4d.24xlarge",
                   "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.p5e.48xlarge")


ModelFacts = Footprint  # what sizing reads of a model


@dataclass(frozen=True)
class Fit:
    instance_type: str
    gpu: Gpu
    gpus: int
    tensor_parallel: int
    need_gib: float  # per GPU: weights + one full-context sequence's KV + the runtime allowance
    usable_gib: float  # per GPU: gpu_memory_utilization of its memory
    sequences: int  # full-context sequences the KV cache holds at once (0: it does not fit)

    @property
    def fits(self) -> bool:
        return self.sequences >= 1

    def line(self) -> str:
        verdict = f"fits: KV for {self.sequences} full-context sequences" if self.fits else "does not fit"
        return (f"{self.instance_type}: {self.gpus} x {self.gpu.name}, tensor parallel {self.tensor_parallel}: "
                f"{self.need_gib:.1f} GiB per GPU of {self.usable_gib:.1f} usable -> {verdict}")


def read_model(folder: Path, dtype: str = "auto", max_model_len: int | None = None) -> ModelFacts:
    """The memory facts of a Hugging Face folder (models/footprint.py) in the serving dtype."""
    serve_bytes = _SERVE_BYTES.get(dtype)
    if serve_bytes is None:
        raise DeployError(f"--dtype {dtype!r}: one of {', '.join(_SERVE_BYTES)}")
    try:
        return read_footprint(folder, serve_bytes, max_model_len)
    except ModelLoadError as exc:
        raise DeployError(exc.message) from None


def tensor_parallel_for(gpus: int, model: ModelFacts) -> int:
    """The instance's GPU count, lowered to what divides the model's attention and KV heads."""
    tp = gpus
    while tp > 1 and (model.attention_heads % tp or (model.kv_heads % tp and tp % model.kv_heads)):
        tp -= 1
    return max(1, tp)


def fit(instance_type: str, model: ModelFacts, tensor_parallel: int | None = None,
        gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION) -> Fit | None:
    """How ``model`` sits on ``instance_type`` (None: not a GPU instance this table knows)."""
    if instance_type not in GPU_INSTANCES:
        return None
    gpu, gpus = GPU_INSTANCES[instance_type]
    tp = tensor_parallel or tensor_parallel_for(gpus, model)
    if tp > gpus:
        raise DeployError(f"--tensor-parallel-size {tp}: {instance_type} has {gpus} GPU(s)")
    sequence_gib = model.sequence_kv_bytes / GIB / tp
    weights_gib = model.weight_bytes / GIB / tp
    usable = gpu.memory_gib * gpu_memory_utilization
    need = weights_gib + sequence_gib + RUNTIME_GIB
    room = usable - weights_gib - RUNTIME_GIB
    sequences = max(0, int(room // sequence_gib)) if sequence_gib > 0 else 0
    return Fit(instance_type, gpu, gpus, tp, need, usable, sequences)


def smallest_fit(model: ModelFacts, gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION) -> Fit | None:
    for instance_type in _SMALLEST_FIRST:
        result = fit(instance_type, model, None, gpu_memory_utilization)
        if result is not None and result.fits:
            return result
    return None


def describe(model: ModelFacts, dtype: str) -> str:
    kind = "as stored (quantized)" if model.quantized else dtype
    return (f"{model.parameters / 1e9:.2f}B parameters, {model.weight_bytes / GIB:.1f} GiB of weights ({kind}); "
            f"KV {model.kv_bytes_per_token / 1024:.0f} KiB per token, "
            f"{model.kv_bytes_per_token * model.max_model_len / GIB:.2f} GiB per {model.max_model_len}-token sequence")
