"""The decoders' dense projections, ``y = x @ W.T + b``, with a kernel chosen at load.

``packed`` (CPU float32, where the compiled kernels are built): our own kernel
(``_cpu_kernels.c``'s ``linear``), each weight packed once at load into blocks
of 16 outputs, every block streamed once per tile of up to 6 rows, on torch's
own OpenMP threads. A row's outputs are the same bits alone or in any batch
(each is one chain of multiply-adds over the inputs in order). A decode
step's projections of SmolLM2-135M (121 weights, 538 MB), 2 threads, the
AVX-512 dev VM, the two alternating in one process (benchmarks/linear_ab.py,
issue28_linear_ab.json):

    rows      1        4        16       64       256
    packed    14.5 ms  15.1 ms  28.6 ms  92.7 ms  349 ms
    onednn    24.9 ms  19.7 ms  33.0 ms  104 ms   346 ms

Whole decode steps 1.55-1.68x faster at one row, 1.13x at 16, 1.05x at 64.
One row is memory-bound: packed streams each block of weights once, at about
the rate a two-thread ``sum`` reads memory here (~30 GB/s); oneDNN's 1-row
path reaches about two thirds of it.

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
order), not bit for bit.

The AVX2 tiles against oneDNN capped to AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2``),
on the same machine (``linear_ab --avx2``, issue28_linear_avx2_ab.json): a
step's projections 17.6 against 25.6 ms at one row, 35.8 against 42.4 at 16,
344 against 359 at 256.

What each CPU gets (``auto``): ``packed`` for float32 where the compiled
kernels are built and the CPU has AVX-512 or AVX2+FMA (tiles for each, picked
at import, the same bits on both; a baseline x86-64 or non-x86 build runs
only when asked for), else oneDNN for float32 on any x86 CPU oneDNN supports;
oneDNN for bfloat16 only where the CPU has the
instructions oneDNN's bf16 path needs (AVX-512 BW/VL/DQ, or AVX-NE-CONVERT;
AVX-512-BF16 and AMX make it fast), ``F.linear`` for bfloat16 elsewhere;
``F.linear`` for float16 and on CUDA (cuBLAS). The check asks torch's oneDNN
(which honours ``ONEDNN_MAX_CPU_ISA``) and then runs one tiny projection, so a
CPU that cannot run a kernel is found at load, never inside a step.

``LLM_BYOC_QUANTIZATION=int8`` replaces both on the CPU by ``int8``: int8
weights and per-row int8 activations (worker/quant.py), whatever
``LLM_BYOC_LINEAR_BACKEND`` says.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..config import ENV_LINEAR_BACKEND, ENV_QUANTIZATION
from ..config import LINEAR_BACKENDS as BACKENDS
from ..cpu import describe_line
from . import cpu_kernels
from .quant import QUANTIZATIONS, Int8Linear, PackedInt8Linear, int8_kernel, int8_unsupported

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


def blocks_of_16(weight: torch.Tensor) -> torch.Tensor:
    """[N, K] -> [ceil(N / 16), K, 16]: 16 outputs' weights side by side for each input, the last block's missing
    outputs zero (0.2 s for SmolLM2-135M's 538 MB on 2 threads, against 0.3 s for a C loop)."""
    out_features, in_features = weight.shape
    blocks = -(-out_features // 16)
    if blocks * 16 != out_features:
        weight = torch.cat((weight, weight.new_zeros(blocks * 16 - out_features, in_features)))
    return weight.reshape(blocks, 16, in_features).transpose(1, 2).contiguous()


class PackedLinear:
    """float32 weights in blocks of 16 outputs ([ceil(N / 16), K, 16]), multiplied by ``_cpu_kernels.linear``.

    ``isa``: one instruction set's tiles ("avx512", "avx2", "base"; tests run each where the CPU can), else the
    best this CPU runs."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, isa: str | None = None):
        self.out_features, self.in_features = weight.shape
        self.isa = isa
        self.weight = blocks_of_16(weight.detach().to(torch.float32))
        self.bias = None if bias is None else bias.detach().to(torch.float32).contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.device.type != "cpu" or x.shape[-1] != self.in_features:
            raise ValueError(f"packed projection [{self.out_features} x {self.in_features}] takes CPU float32 "
                             f"[..., {self.in_features}], not {x.dtype} {tuple(x.shape)} on {x.device}")
        rows = x.reshape(-1, self.in_features).contiguous()
        y = torch.empty(rows.shape[0], self.out_features)
        cpu_kernels.native.linear(rows.data_ptr(), self.weight.data_ptr(),
                                  0 if self.bias is None else self.bias.data_ptr(), y.data_ptr(), rows.shape[0],
                                  self.in_features, self.out_features, torch.get_num_threads(), self.isa)
        return y.view(*x.shape[:-1], self.out_features)


Linear = AtenLinear | OneDNNLinear | PackedLinear | PackedInt8Linear | Int8Linear
MakeLinear = Callable[[torch.Tensor, "torch.Tensor | None"], Linear]


def onednn_unsupported(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why the oneDNN kernels cannot run ``dtype`` on ``device`` here, or None when they can."""
    dtype_name = str(dtype).removeprefix("torch.")
    if device.type != "cpu":
        return f"oneDNN's prepacked kernels run on the CPU, not {device.type}"
    if dtype not in _ONEDNN_DTYPES:
        return f"oneDNN's prepacked kernels take float32 or bfloat16 weights, not {dtype_name}"
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN"
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return (
            "oneDNN's bfloat16 path needs a CPU with AVX-512 (avx512bw, avx512vl, avx512dq) "
            f"or AVX-NE-CONVERT, which this CPU ({describe_line()}) does not offer"
        )
    return _probe(dtype)


@functools.lru_cache(maxsize=None)
def _probe(dtype: torch.dtype) -> str | None:
    """Run one tiny prepacked projection: a kernel oneDNN cannot build fails here, not mid-step."""
    try:
        weight = torch.ones(8, 8, dtype=dtype)
        OneDNNLinear(weight, None, batch_hint=1)(torch.ones(1, 8, dtype=dtype))
    except RuntimeError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"oneDNN cannot run {str(dtype).removeprefix('torch.')} on this CPU ({describe_line()}): {first_line}"
    return None


def packed_unsupported(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why the packed kernel cannot run ``dtype`` on ``device``, or None when it can."""
    if device.type != "cpu" or dtype != torch.float32:
        return f"the packed kernel runs float32 on the CPU, not {str(dtype).removeprefix('torch.')} on {device.type}"
    return cpu_kernels.unavailable()


def onednn_usable(device: torch.device, dtype: torch.dtype) -> bool:
    return onednn_unsupported(device, dtype) is None


class BackendChoice(NamedTuple):
    name: str  # "packed", "onednn", "aten" or "int8"
    reason: str  # for the load log


def resolve_backend(requested: str, device: torch.device, dtype: torch.dtype, quantization: str = "") -> BackendChoice:
    """``auto`` -> the fastest kernel this device, dtype and CPU can run; ``quantization="int8"`` -> int8.

    An explicit ``onednn``, or ``int8``, that cannot run raises ValueError naming what is missing.
    """
    if requested not in BACKENDS:
        raise ValueError(f"linear backend must be one of {BACKENDS}, not {requested!r}")
    if quantization:
        if quantization not in QUANTIZATIONS:
            raise ValueError(f"{ENV_QUANTIZATION} for the native engine must be one of {QUANTIZATIONS} or empty, "
                             f"not {quantization!r}")
        unsupported = int8_unsupported(device)
        if unsupported:
            raise ValueError(unsupported)
        ignored = "" if requested == "auto" else f"; {ENV_LINEAR_BACKEND}={requested} does not apply"
        kernel = int8_kernel()
        return BackendChoice("int8", f"{ENV_QUANTIZATION}=int8: int8 weights per channel, "
                                     f"int8 activations per row ({kernel.description}){ignored}")
    if requested == "aten":
        return BackendChoice("aten", "asked for")
    unsupported = packed_unsupported(device, dtype)
    if requested == "packed":
        if unsupported:
            raise ValueError(f"{ENV_LINEAR_BACKEND}=packed cannot run: {unsupported}")
        return BackendChoice("packed", "asked for")
    if requested == "auto" and unsupported is None and cpu_kernels.native.linear_here() != "base":
        return BackendChoice("packed", f"auto: float32 weights packed in 16-output blocks, compiled kernel "
                                       f"({cpu_kernels.native.linear_here()})")
    unsupported = onednn_unsupported(device, dtype)
    if requested == "onednn":
        if unsupported:
            raise ValueError(f"LLM_BYOC_LINEAR_BACKEND=onednn cannot run: {unsupported}")
        return BackendChoice("onednn", "asked for")
    if unsupported is None:
        return BackendChoice("onednn", "auto: oneDNN prepacked weights")
    return BackendChoice("aten", f"auto: F.linear, because {unsupported}")


def linear_factory(backend: str, batch_hint: int | None = None) -> MakeLinear:
    """``make(weight, bias) -> Linear`` for a resolved backend; ``batch_hint``: usual row count."""
    if backend == "onednn":
        return lambda weight, bias=None: OneDNNLinear(weight, bias, batch_hint)
    if backend == "aten":
        return lambda weight, bias=None: AtenLinear(weight, bias)
    if backend == "packed":
        return lambda weight, bias=None: PackedLinear(weight, bias)
    if backend == "int8":
        return Int8Projections()
    raise ValueError(f"unresolved linear backend {backend!r}")


class Int8Projections:
    """``make(weight, bias) -> PackedInt8Linear or Int8Linear`` (``int8_kernel``) that counts what it built, for
    the load log."""

    def __init__(self):
        self.kernel = int8_kernel().kernel
        self.count = 0
        self.nbytes = 0  # int8 weights, their scales and biases
        self.float32_bytes = 0  # the same projections in float32

    def __call__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> PackedInt8Linear | Int8Linear:
        linear = self.kernel(weight, bias)
        self.count += 1
        self.nbytes += linear.nbytes
        self.float32_bytes += 4 * (weight.numel() + (0 if bias is None else bias.numel()))
        return linear
