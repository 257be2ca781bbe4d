"""Attention over the slot KV cache for one step's flattened rows.

Grouped-query attention uses SDPA's ``enable_gqa``: keys and values keep
their KV heads and are never repeated in memory. (Folding the query groups
into the length axis instead is 10-30x slower on CPU: it leaves SDPA's fast
kernels.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .batch import DecodeGroup, PrefillSpan, StepInputs


def cached_attention(
    q: torch.Tensor,  # [T, H, D]
    k: torch.Tensor,  # [T, KVH, D]
    v: torch.Tensor,  # [T, KVH, D]
    k_cache: torch.Tensor,  # [slots, KVH, capacity, D]
    v_cache: torch.Tensor,
    inputs: StepInputs,
) -> torch.Tensor:
    """Write this step's keys/values into the cache, then attend. Returns [T, H, D]."""
    k_cache[inputs.slots, :, inputs.positions] = k
    v_cache[inputs.slots, :, inputs.positions] = v
    decode = inputs.decode
    if decode is not None and not inputs.prefills:
        return _decode(q, k_cache, v_cache, decode)
    out = torch.empty_like(q)
    if decode is not None:
        out[: decode.num_rows] = _decode(q[: decode.num_rows], k_cache, v_cache, decode)
    for span in inputs.prefills:
        rows = slice(span.row, span.row + span.length)
        out[rows] = _prefill(q[rows], k_cache, v_cache, span)
    return out


def _decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, group: DecodeGroup) -> torch.Tensor:
    """q: [B, H, D], one query per sequence. Returns [B, H, D]."""
    batch, heads, dim = q.shape
    if group.gather is not None:
        keys = k_cache[group.gather, :, : group.kv_len]  # [B, KVH, L, D] (a copy)
        values = v_cache[group.gather, :, : group.kv_len]
        queries = q
    else:
        keys = k_cache[group.slot_lo : group.slot_hi, :, : group.kv_len]  # [R, KVH, L, D] view
        values = v_cache[group.slot_lo : group.slot_hi, :, : group.kv_len]
        if group.scatter is None:
            queries = q
        else:
            queries = q.new_zeros(group.slot_hi - group.slot_lo, heads, dim)
            queries[group.scatter] = q
    runs = queries.shape[0]
    out = F.scaled_dot_product_attention(
        queries.view(runs, heads, 1, dim), keys, values, attn_mask=group.mask, enable_gqa=True
    )  # [R, H, 1, D]
    out = out.reshape(runs, heads, dim)
    return out if group.scatter is None else out[group.scatter]


def _prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, span: PrefillSpan) -> torch.Tensor:
    """q: [n, H, D] for positions start..start+n-1 of one sequence. Returns [n, H, D]."""
    keys = k_cache[span.slot, :, : span.kv_len][None]  # [1, KVH, L, D]
    values = v_cache[span.slot, :, : span.kv_len][None]
    queries = q.transpose(0, 1)[None]  # [1, H, n, D]
    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=span.mask, enable_gqa=True)
    return out[0].transpose(0, 1)  # [n, H, D]
