"""Attention over the paged KV cache for one step's flattened rows.

Each row's keys and values are written to its slot first; then each decode
group gathers its rows' contexts from the pool into one dense batch (one row
gather per layer: the pool is token-major, so the gathered keys are a
``[B, L, KVH, D]`` tensor that SDPA reads through a transposed view without
another copy), and each prefill chunk gathers its cached prefix (a chunk at
position 0 attends over its own keys, causally, gathering nothing).

Grouped-query attention uses SDPA's ``enable_gqa``: keys and values keep
their KV heads and are never repeated in memory. (Folding the query groups
into the length axis instead is 10-30x slower on CPU: it leaves SDPA's fast
kernels.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .batch import DecodeGroup, PrefillSpan, StepInputs


def paged_attention(
    q: torch.Tensor,  # [T, H, D]
    k: torch.Tensor,  # [T, KVH, D]
    v: torch.Tensor,  # [T, KVH, D]
    k_cache: torch.Tensor,  # [slots, KVH, D]
    v_cache: torch.Tensor,
    inputs: StepInputs,
) -> torch.Tensor:
    """Write this step's keys/values into the cache, then attend. Returns [T, H, D]."""
    k_cache.index_copy_(0, inputs.slot_mapping, k)
    v_cache.index_copy_(0, inputs.slot_mapping, v)
    groups = inputs.decode_groups
    if len(groups) == 1 and not inputs.prefills:
        return _decode(q, k_cache, v_cache, groups[0])
    out = torch.empty_like(q)
    for group in groups:
        out[group.row_lo : group.row_hi] = _decode(q[group.row_lo : group.row_hi], k_cache, v_cache, group)
    for span in inputs.prefills:
        rows = slice(span.row, span.row + span.length)
        out[rows] = _prefill(q[rows], k[rows], v[rows], k_cache, v_cache, span)
    return out


def _gather(cache: torch.Tensor, slots: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    """[B, KVH, L, D]: a transposed view of one row gather."""
    return cache.index_select(0, slots).view(batch, length, *cache.shape[1:]).transpose(1, 2)


def _decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, group: DecodeGroup) -> torch.Tensor:
    """q: [B, H, D], one query per sequence. Returns [B, H, D]."""
    batch, heads, dim = q.shape
    keys = _gather(k_cache, group.gather, batch, group.kv_len)
    values = _gather(v_cache, group.gather, batch, group.kv_len)
    out = F.scaled_dot_product_attention(
        q.view(batch, heads, 1, dim), keys, values, attn_mask=group.mask, enable_gqa=True
    )  # [B, H, 1, D]
    return out.view(batch, heads, dim)


def _prefill(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    k_cache: torch.Tensor, v_cache: torch.Tensor, span: PrefillSpan,
) -> torch.Tensor:
    """q: [n, H, D], k/v: [n, KVH, D] for positions start..start+n-1 of one sequence. Returns [n, H, D]."""
    queries = q.transpose(0, 1)[None]  # [1, H, n, D]
    if span.gather is None:  # nothing cached before the chunk: its own keys, causal
        keys, values = k.transpose(0, 1)[None], v.transpose(0, 1)[None]  # [1, KVH, n, D]
        out = F.scaled_dot_product_attention(queries, keys, values, is_causal=True, enable_gqa=True)
    else:
        kv_len = span.start + span.length
        keys = _gather(k_cache, span.gather, 1, kv_len)
        values = _gather(v_cache, span.gather, 1, kv_len)
        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=span.mask, enable_gqa=True)
    return out[0].transpose(0, 1)  # [n, H, D]
