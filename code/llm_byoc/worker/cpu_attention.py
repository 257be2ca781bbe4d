"""Decode attention on the CPU read in place from the paged KV pool: a compiled kernel (``_cpu_kernels.c``).

A decode group's rows each attend over their own keys, read from the pool by
slot, once: no gathered copy of every row's context, no padding to the
group's longest row, and so a row's result is the same bits whatever else is
in the step. It replaces ``index_select`` + SDPA for float32 decode groups
(attention.py's ``_decode``). On the 2-core dev VM (SmolLM2's 9 query / 3 KV
heads of 64, one layer, 2 threads for torch, the kernel on one): 1 row over
128 keys 12 against ~60 us, 16 rows over 128 keys 154 against ~280-460 us,
64 rows 1.2 against 2.0-2.8 ms; whole decode steps of SmolLM2-135M 1.05-1.75x
faster (benchmarks/decode_attention_ab.py). The (row, KV head) pairs are
shared among torch's own OpenMP threads (``torch.get_num_threads()``), each
computed exactly as alone.

The kernel is part of an optional extension (cpu_kernels.py): a package
installed where no C compiler was found runs the torch path (logged at load).
Soft-capped scores (Gemma 2), other dtypes, and other devices always take the
torch path.
"""

from __future__ import annotations

import torch

from . import cpu_kernels

_kernel = cpu_kernels.native  # None: torch's path (benchmarks/decode_attention_ab.py sets it to compare)


def usable(q: torch.Tensor, k_cache: torch.Tensor, softcap: float | None) -> bool:
    """Whether ``decode_attention`` takes these tensors."""
    return (_kernel is not None and softcap is None and q.device.type == "cpu" and q.dtype == torch.float32
            and k_cache.dtype == torch.float32)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, gather: torch.Tensor,
                     mask: torch.Tensor | None, kv_len: int, scale: float | None = None) -> torch.Tensor:
    """q [B, H, D]; pools [slots, KVH, D]; gather [B * kv_len] int64 slots; mask [B, 1, 1, kv_len] bool (True: a
    key the row looks at) or None. Returns [B, H, D] float32."""
    batch, heads, dim = q.shape
    kv_heads = k_cache.shape[1]
    if k_cache.shape[2] != dim or v_cache.shape != k_cache.shape or gather.numel() != batch * kv_len:
        raise ValueError(f"decode_attention: q {tuple(q.shape)}, pools {tuple(k_cache.shape)} / "
                         f"{tuple(v_cache.shape)}, {gather.numel()} slots for {batch} x {kv_len}")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous() and gather.dtype == torch.int64):
        raise ValueError("decode_attention: pools must be contiguous and slots int64")
    q = q.contiguous()
    gather = gather.contiguous()
    mask_ptr = 0
    if mask is not None:
        mask = mask.reshape(batch, kv_len).contiguous().view(torch.uint8)
        mask_ptr = mask.data_ptr()
    out = torch.empty_like(q)
    _kernel.decode_attention(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), gather.data_ptr(), mask_ptr,
                             out.data_ptr(), batch, heads, kv_heads, dim, kv_len,
                             dim ** -0.5 if scale is None else scale, torch.get_num_threads())
    return out
