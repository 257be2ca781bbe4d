"""Which device the model runs on (LLM_BYOC_DEVICE), and why CUDA is missing when it is.

``cuda`` without a usable GPU is a ModelLoadError whose message says why (a
CPU build of torch, no driver, a driver too old for this CUDA) and what to do:
the serving container logs it as one line and exits, rather than a traceback.
``auto`` falls back to the CPU; where torch is a CUDA build (the GPU image)
that is almost certainly a mistake, so it says so loudly in the log.
"""

from __future__ import annotations

import logging

import torch

from ..errors import ModelLoadError

log = logging.getLogger(__name__)

GPU_REMEDY = (
    "start the container with the GPU exposed (docker run --gpus all; Kubernetes: a nvidia.com/gpu "
    "resource limit) on a host whose NVIDIA driver supports this CUDA version"
)


def resolve_device(name: str) -> torch.device:
    """'auto' is cuda when available, else cpu; 'cuda' must be available."""
    if name == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if name == "auto" and torch.version.cuda is None:
        return torch.device("cpu")  # a CPU build of torch: the CPU is what was meant
    reason = cuda_unavailable_reason()
    if name == "auto":
        log.warning(
            "LLM_BYOC_DEVICE=auto, but %s. Running on the CPU instead, far slower than on a GPU "
            "(LLM_BYOC_DEVICE=cuda fails instead; LLM_BYOC_DEVICE=cpu says the CPU is meant)", reason,
        )
        return torch.device("cpu")
    raise ModelLoadError(f"LLM_BYOC_DEVICE={name}, but {reason}, or set LLM_BYOC_DEVICE=cpu to run on the CPU")


def cuda_unavailable_reason() -> str:
    """Why torch sees no CUDA device and what would give it one, in one line."""
    if torch.version.cuda is None:
        return (f"this torch ({torch.__version__}) is built without CUDA: use the GPU image "
                "(docker build --build-arg DEVICE=cuda)")
    try:
        torch.cuda.init()  # raises with the driver's own explanation
    except Exception as exc:  # noqa: BLE001 - any failure is the explanation we want
        detail = " ".join(str(exc).split())
    else:
        detail = f"torch.cuda.device_count() is {torch.cuda.device_count()}"
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device ({detail}): {GPU_REMEDY}"
