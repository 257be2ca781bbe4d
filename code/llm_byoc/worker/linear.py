"""The decoders' dense projections, ``y = x @ W.T + b``, with a kernel chosen at load.

Decoding is a chain of skinny matmuls (a handful of rows against every
weight), which is where a CPU step spends its time (~80% on SmolLM2-135M).
``aten`` is ``F.linear``: on CPU it calls MKL sgemm, which re-packs the
weight on every call. ``onednn`` reorders each weight once, at load, into
oneDNN's blocked layout and calls oneDNN directly, as vLLM's and IPEX's CPU
paths do. Measured on the 2-core dev VM (AVX-512, 2 threads, fp32):

    [16 x 576] @ [576 x 3072]    aten 0.73 ms   onednn 0.29 ms
    [256 x 576] @ [576 x 3072]   aten 5.4 ms    onednn 4.3 ms
    [16 x 576] @ [576 x 49152]   aten 19.5 ms   onednn 5.9 ms   (the LM head)

Results agree with ``F.linear`` to float rounding (a different summation
order), not bit for bit. ``auto`` picks onednn on CPU for float32/bfloat16
when torch has it, aten everywhere else (CUDA has cuBLAS).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..config import LINEAR_BACKENDS as BACKENDS

_ONEDNN_DTYPES = (torch.float32, torch.bfloat16)


class AtenLinear:
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.weight, self.bias = weight, bias
        self.out_features, self.in_features = weight.shape

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class OneDNNLinear:
    """The weight in oneDNN's blocked layout (an opaque tensor only oneDNN reads)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, batch_hint: int | None):
        self.out_features, self.in_features = weight.shape
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), batch_hint)
        self.bias = None if bias is None else bias.detach().contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 0:  # oneDNN rejects empty inputs; a step may sample no rows
            return x.new_empty((0, self.out_features))
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.weight, self.bias, "none", [], "")


Linear = AtenLinear | OneDNNLinear
MakeLinear = Callable[[torch.Tensor, "torch.Tensor | None"], Linear]


def onednn_usable(device: torch.device, dtype: torch.dtype) -> bool:
    return device.type == "cpu" and dtype in _ONEDNN_DTYPES and torch.backends.mkldnn.is_available()


def resolve_backend(requested: str, device: torch.device, dtype: torch.dtype) -> str:
    """``auto`` -> the fastest kernel for this device and dtype; an explicit choice is checked."""
    if requested not in BACKENDS:
        raise ValueError(f"linear backend must be one of {BACKENDS}, not {requested!r}")
    usable = onednn_usable(device, dtype)
    if requested == "onednn" and not usable:
        raise ValueError(
            f"the onednn linear backend needs a CPU with torch's oneDNN and float32/bfloat16 "
            f"weights, not {device.type}/{str(dtype).removeprefix('torch.')}"
        )
    if requested == "auto":
        return "onednn" if usable else "aten"
    return requested


def linear_factory(backend: str, batch_hint: int | None = None) -> MakeLinear:
    """``make(weight, bias) -> Linear`` for a resolved backend; ``batch_hint``: usual row count."""
    if backend == "onednn":
        return lambda weight, bias=None: OneDNNLinear(weight, bias, batch_hint)
    if backend == "aten":
        return lambda weight, bias=None: AtenLinear(weight, bias)
    raise ValueError(f"unresolved linear backend {backend!r}")
