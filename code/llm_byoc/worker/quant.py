"""8-bit projections for the CPU (``LLM_BYOC_QUANTIZATION=int8``): int8 weights, int8 activations (W8A8).

Two kernels, one chosen at load for the machine (``int8_kernel``):

- ``PackedInt8Linear`` where the compiled kernels are built and the CPU has
  AVX2 (AVX-512 VNNI: ``vpdpbusd``; AVX2: ``vpmaddwd`` on operands widened to
  16 bits, the same integer sums, so the same bits): our own
  (``_cpu_kernels.c``'s ``int8_linear``). The weight int8 per output channel
  (symmetric, ``scale_c = max|W_c| / 127``) in 64-byte groups of 4 inputs x 16
  outputs, as ``vpdpbusd`` reads them; each row of x
  quantized on its own (``q = rint(127 x / max|x_r|)``) inside the call; int32
  sums, exact, then ``(sum) * a_r / 127 * scale_c (+ b_c)`` per element. So a
  row's result is the same bits alone or in any batch, and a row holding NaN
  spoils that row only. One row is memory-bound: a quarter of float32's bytes.
  SmolLM2-135M's 121 projections, 2 threads (benchmarks/linear_ab.py --int8),
  AVX-512 VNNI: 6.0 against fbgemm's 9.6 ms at one row, 10.5 against 14.7 at
  16, 110 against 151 at 256. The AVX2 tiles on the same machine: 5.4 ms at
  one row, 26 at 16, 369 at 256 (our float32 AVX2 tiles: 16.8, 35.6, 346);
  fbgemm's AVX2 path could not be measured beside them (no AVX2-only CPU here,
  and fbgemm picks its kernels by CPUID).
- ``Int8Linear`` elsewhere (no compiler at install, a CPU without AVX2):
  fbgemm's int8 GEMM through torch's quantized operators, as described below.

The weight: int8 per output channel (symmetric, ``scale_c = max|W_c| / 127``),
packed once at load for fbgemm's int8 GEMM (``quantized.linear_prepack``).
The activations: quantized to 8 bits at every call, inside
``quantized.linear_dynamic``, with int32 accumulation and a float epilogue.

Why the sentinel row. ``linear_dynamic`` quantizes its input with ONE scale
for the whole tensor (its min and max): a row's result would depend on the
other rows of the batch, so a request's greedy output would depend on what it
was batched with, and seeded runs would not repeat. We give every row its own
scale instead: each row is divided by its largest magnitude (``|x_r| <= 1``,
the row's scale ``a_r`` kept aside), and one extra row ``[1, -1, 0, ...]`` is
appended, so the tensor's min and max are always exactly -1 and 1 and the
8-bit grid is the same in every batch. Integer accumulation is exact and the
epilogue is per element, so a row's output is bit-identical alone or in any
batch (tests/unit/worker/test_quant.py). The output row is scaled back by
``a_r``, then the bias added. Cost: one extra GEMM row and three elementwise
passes over the (small) input. A row holding NaN or inf poisons the shared
min/max and so the whole batch, where float32 would spoil that row only.

Measured on the 2-core dev VM (AMD EPYC, AVX-512 VNNI, 2 threads, fastest of
15, SmolLM2-135M shapes): the LM head ``[1 x 576] @ [576 x 49152]`` 0.96 ms
against oneDNN float32 ~16 ms (memory bound: a quarter of the bytes); 16 rows
6.6 ms against 24.5 ms. Relative error of one projection ~1.1% (random data).

``reduce_range``: without VNNI, fbgemm's u8 x s8 pair products add up in
int16 with saturation, so activations keep 7 bits there (torch's own default
for fbgemm); with AVX-512 VNNI or AVX-VNNI they keep 8. The quantized-tensor
functions torch marks deprecated are used in this module only.
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import torch

from ..config import ENV_QUANTIZATION
from ..config import NATIVE_QUANTIZATIONS as QUANTIZATIONS
from . import cpu_kernels

_TINY = torch.finfo(torch.float32).tiny
_rows_kernel = cpu_kernels.native  # None: torch's ops (benchmarks/decode_attention_ab.py sets it to compare)


@functools.lru_cache(maxsize=1)
def has_int8_dot() -> bool:
    """VNNI: u8 x s8 products summed in int32 without saturation (AVX-512 VNNI or AVX-VNNI)."""
    capabilities = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    return bool(capabilities.get("avx512_vnni") or capabilities.get("avx_vnni"))


def int8_unsupported(device: torch.device) -> str | None:
    """Why the int8 kernels cannot run on ``device`` here, or None when they can."""
    if device.type != "cpu":
        return f"int8 ({ENV_QUANTIZATION}=int8) is the CPU engine's kernel; on {device.type} use the vllm engine"
    packed = packed_int8_unsupported()
    if packed is not None and "fbgemm" not in torch.backends.quantized.supported_engines:
        return f"this torch build has no fbgemm (the int8 GEMM), and the packed int8 kernel cannot run: {packed}"
    return None


class Int8Kernel(NamedTuple):
    kernel: type  # PackedInt8Linear or Int8Linear
    description: str  # for the load log


def int8_kernel() -> Int8Kernel:
    """The int8 projection this machine runs: the packed kernel (AVX-512 VNNI or AVX2) where it can, else
    fbgemm's."""
    unsupported = packed_int8_unsupported()
    if unsupported is None:
        isa = cpu_kernels.native.int8_linear_here()
        return Int8Kernel(PackedInt8Linear, f"packed, {'AVX-512 VNNI' if isa == 'avx512vnni' else 'AVX2'}")
    return Int8Kernel(Int8Linear, f"fbgemm, because {unsupported}")


def channel_scale(w: torch.Tensor) -> torch.Tensor:
    """[N] float32: each output channel's symmetric int8 step, ``max|W_c| / 127`` (float32 ``w``, both kernels)."""
    return w.abs().amax(dim=1).clamp_min(_TINY) / 127


def channel_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per output channel: (q [N, K] int8, scale [N] float32), ``weight ~ q * scale[:, None]``."""
    w = weight.detach().float()
    scale = channel_scale(w)
    return torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8), scale


def packed_int8_unsupported() -> str | None:
    """Why ``PackedInt8Linear`` cannot run here, or None."""
    if cpu_kernels.native is None:
        return cpu_kernels.unavailable()
    if cpu_kernels.native.int8_linear_here() is None:
        return "the packed int8 kernel needs AVX2 (or AVX-512 VNNI), which this CPU does not offer"
    return None


class PackedInt8Linear:
    """``y = x @ W.T + b``, W int8 per output channel, x int8 per row, on the compiled kernel. ``isa``: one
    instruction set's tiles ("avx512vnni", "avx2"; tests run both where the CPU can), else the best here."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, isa: str | None = None):
        self.out_features, self.in_features = weight.shape
        self.isa = isa
        q, self.scale = channel_int8(weight)
        self.colsum = q.sum(dim=1, dtype=torch.int32)  # the kernel's u8 inputs are q + 128: it takes 128 * this off
        blocks, quads = -(-self.out_features // 16), -(-self.in_features // 4)
        padded = torch.zeros(blocks * 16, quads * 4, dtype=torch.int8)
        padded[:self.out_features, :self.in_features] = q
        # [N, K] -> [blocks, quads, 16 outputs, 4 inputs]
        self.packed = padded.view(blocks, 16, quads, 4).permute(0, 2, 1, 3).contiguous()
        self.bias = None if bias is None else bias.detach().float().contiguous()
        self.nbytes = self.packed.numel() + 8 * self.out_features  # int8, one scale and one sum per channel
        if self.bias is not None:
            self.nbytes += self.bias.numel() * 4

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        dtype = rows.dtype
        rows = rows.float().contiguous()
        y = torch.empty(rows.shape[0], self.out_features)
        cpu_kernels.native.int8_linear(rows.data_ptr(), self.packed.data_ptr(), self.colsum.data_ptr(),
                                       self.scale.data_ptr(), 0 if self.bias is None else self.bias.data_ptr(),
                                       y.data_ptr(), rows.shape[0], self.in_features, self.out_features,
                                       torch.get_num_threads(), self.isa)
        y = y.view(*x.shape[:-1], self.out_features)
        return y if dtype == torch.float32 else y.to(dtype)


class Int8Linear:
    """``y = x @ W.T + b`` with W as int8 per output channel and x quantized per row, on fbgemm (see the module
    text)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.out_features, self.in_features = weight.shape
        w = weight.detach().float()
        scale = channel_scale(w)  # [N]
        zero = torch.zeros(self.out_features, dtype=torch.long)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # quantized tensors are deprecated; this module is their only user
            q = torch.quantize_per_channel(w, scale.double(), zero, 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(q, None)
        self.bias = None if bias is None else bias.detach().float().contiguous()
        self.sentinel = torch.zeros(1, self.in_features)  # the extra row that pins the tensor's min and max
        self.sentinel[0, 0], self.sentinel[0, -1] = 1.0, -1.0
        self.reduce_range = not has_int8_dot()
        self.nbytes = self.out_features * self.in_features + 4 * self.out_features  # int8 + one scale per channel
        if self.bias is not None:
            self.nbytes += self.bias.numel() * 4

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # x: [T, in_features] -> [T, out_features], in x's dtype
        rows = x.shape[0]
        if rows == 0:
            return x.new_empty((0, self.out_features))
        dtype = x.dtype
        scaled, row_scale = _scaled_rows(x.float(), self.sentinel)  # [T + 1, K] within [-1, 1], [T, 1]
        y = torch.ops.quantized.linear_dynamic(scaled, self.packed, self.reduce_range)[:rows]  # [T, N]
        y = y.mul_(row_scale) if self.bias is None else torch.addcmul(self.bias, y, row_scale)
        return y if dtype == torch.float32 else y.to(dtype)


def _scaled_rows(x: torch.Tensor, sentinel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row of float32 ``x`` divided by its largest magnitude (at least the smallest normal float), the
    sentinel row appended; and those magnitudes, [T, 1]. A 1-row step makes 121 of these calls: the compiled
    ``int8_rows`` (cpu_kernels.py) does it in one call where torch takes five, the same bits (so either may
    serve any batch): 3 against 7 us for one row of 576, 10 against 15 for 16 rows of 1,536; from ~64k
    elements torch's two threads win (64 x 1,536: 35 against 31 us), and torch does those."""
    if _rows_kernel is not None and x.device.type == "cpu" and x.numel() <= 65_536:
        rows, cols = x.shape
        x = x.contiguous()
        scaled, row_scale = torch.empty(rows + 1, cols, dtype=x.dtype), torch.empty(rows, 1, dtype=x.dtype)
        _rows_kernel.int8_rows(x.data_ptr(), scaled.data_ptr(), row_scale.data_ptr(), rows, cols)
        return scaled, row_scale
    row_scale = x.abs().amax(dim=1, keepdim=True).clamp_min_(_TINY)
    return torch.cat((x / row_scale, sentinel)), row_scale
