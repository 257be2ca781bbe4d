"""Paged attention: cascade attention over a shared prefix (prefill chunks or decode rows) gives what each
row's own gather gives."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from llm_byoc.protocol import ScheduledChunk
from llm_byoc.worker.attention import CASCADE_DEVICES, paged_attention
from llm_byoc.worker import batch
from llm_byoc.worker.batch import build_step_inputs, order_chunks

CPU = torch.device("cpu")
BS = 4
HEADS, KV_HEADS, DIM = 6, 2, 8


def _cache(num_blocks: int, dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    k = torch.randn(num_blocks * BS, KV_HEADS, DIM, generator=gen, dtype=torch.float32).to(dtype)
    v = torch.randn(num_blocks * BS, KV_HEADS, DIM, generator=gen, dtype=torch.float32).to(dtype)
    k[:BS] = 0
    v[:BS] = 0
    return k, v


def _reference(q, k_cache, v_cache, slots):
    """One query row over the keys at ``slots`` (its whole context), heads repeated: plain softmax."""
    keys = k_cache[slots].repeat_interleave(HEADS // KV_HEADS, 1).transpose(0, 1)  # [H, L, D]
    values = v_cache[slots].repeat_interleave(HEADS // KV_HEADS, 1).transpose(0, 1)
    return F.scaled_dot_product_attention(q[:, None], keys, values)[:, 0]  # [H, D]


@pytest.mark.skipif("cpu" not in CASCADE_DEVICES, reason="torch has no CPU flash-attention kernel here")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cascade_equals_each_chunk_over_its_own_gather(dtype):
    # three chunks behind the same two cached blocks (8 tokens), one behind other blocks, two decodes
    tables = {"a": [1, 2, 5, 6], "b": [1, 2, 7], "c": [1, 2, 8, 9], "x": [3, 4, 10], "d1": [11, 12], "d2": [1, 2, 13]}
    chunks = order_chunks([
        ScheduledChunk("a", [1] * 7, 8, True), ScheduledChunk("b", [1] * 2, 8, True),
        ScheduledChunk("c", [1] * 5, 8, True), ScheduledChunk("x", [1] * 3, 8, True),
        ScheduledChunk("d1", [1], 6, True), ScheduledChunk("d2", [1], 9, True),
    ])
    k_cache, v_cache = _cache(16, dtype)
    rows = sum(len(c.token_ids) for c in chunks)
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(rows, h, DIM, generator=gen).to(dtype) for h in (HEADS, KV_HEADS, KV_HEADS))
    results = {}
    for cascade in (False, True):
        kc, vc = k_cache.clone(), v_cache.clone()
        inputs = build_step_inputs(chunks, tables, BS, CPU, cascade=cascade)
        assert len(inputs.shared_prefixes) == int(cascade)
        results[cascade] = paged_attention(q, k, v, kc, vc, inputs)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(results[True], results[False], atol=tolerance, rtol=tolerance)
    # and both are plain softmax attention over each row's context
    kc, vc = k_cache.clone(), v_cache.clone()
    inputs = build_step_inputs(chunks, tables, BS, CPU, cascade=True)
    paged_attention(q, k, v, kc, vc, inputs)  # writes this step's keys
    row = 0
    for chunk in chunks:
        table = tables[chunk.seq_id]
        for i in range(len(chunk.token_ids)):
            end = chunk.start_pos + i + 1
            slots = torch.tensor([table[p // BS] * BS + p % BS for p in range(end)])
            expected = _reference(q[row].float(), kc.float(), vc.float(), slots)
            torch.testing.assert_close(results[True][row].float(), expected, atol=tolerance, rtol=tolerance)
            row += 1


@pytest.mark.skipif("cpu" not in CASCADE_DEVICES, reason="torch has no CPU flash-attention kernel here")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_decode_rows_by_cascade_equal_each_row_over_its_own_gather(dtype, scale, monkeypatch):
    # five decode rows behind the same three cached blocks (12 tokens), at different positions, two of them
    # sharing one block more; a decode row elsewhere; chunks behind the same blocks (a prefill cascade) and alone
    monkeypatch.setattr(batch, "CASCADE_DECODE_MIN", 2 * BS)
    tables = {"d0": [1, 2, 3, 4], "d1": [1, 2, 3, 5, 6], "d2": [1, 2, 3, 7, 8, 9], "d3": [1, 2, 3, 7, 8, 10],
              "d4": [1, 2, 3, 11], "x": [12, 13, 14, 15], "p0": [1, 2, 3, 16, 17], "p1": [1, 2, 3, 18],
              "p2": [19, 20, 21]}
    starts = {"d0": 12, "d1": 18, "d2": 22, "d3": 21, "d4": 15, "x": 14}
    chunks = order_chunks([ScheduledChunk(s, [1], p, True) for s, p in starts.items()] + [
        ScheduledChunk("p0", [1] * 6, 12, True), ScheduledChunk("p1", [1] * 3, 12, True),
        ScheduledChunk("p2", [1] * 4, 6, True)])
    k_cache, v_cache = _cache(24, dtype)
    rows = sum(len(c.token_ids) for c in chunks)
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(rows, h, DIM, generator=gen).to(dtype) for h in (HEADS, KV_HEADS, KV_HEADS))
    results = {}
    for cascade in (False, True):
        kc, vc = k_cache.clone(), v_cache.clone()
        inputs = build_step_inputs(chunks, tables, BS, CPU, cascade=cascade)
        assert [len(s.rows) for s in inputs.shared_decodes] == ([5] if cascade else [])
        results[cascade] = paged_attention(q, k, v, kc, vc, inputs, scale=scale)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(results[True], results[False], atol=tolerance, rtol=tolerance)
    for row, chunk in enumerate(chunks[:len(starts)]):  # and the decode rows are softmax over their contexts
        table = tables[chunk.seq_id]
        slots = torch.tensor([table[p // BS] * BS + p % BS for p in range(chunk.start_pos + 1)])
        keys = kc[slots].float().repeat_interleave(HEADS // KV_HEADS, 1).transpose(0, 1)  # [H, L, D]
        values = vc[slots].float().repeat_interleave(HEADS // KV_HEADS, 1).transpose(0, 1)
        expected = F.scaled_dot_product_attention(q[row].float()[:, None], keys, values, scale=scale)[:, 0]
        torch.testing.assert_close(results[True][row].float(), expected, atol=tolerance, rtol=tolerance)


def _eager(q, k_cache, v_cache, slots, scale, softcap):
    """transformers' eager attention of one query row [H, D] over ``slots``: scaled, capped, softmax in float32."""
    keys = k_cache[slots].repeat_interleave(HEADS // KV_HEADS, 1).transpose(0, 1)  # [H, L, D]
    values = v_cache[slots].repeat_interleave(HEADS // KV_HEADS, 1).transpose(0, 1)
    scores = (keys @ q[:, :, None])[..., 0] * scale  # [H, L]
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    return (torch.softmax(scores, -1)[:, None, :] @ values)[:, 0]  # [H, D]


@pytest.mark.parametrize("softcap", [None, 0.7])
def test_windowed_scaled_capped_attention_is_eager_attention_over_each_rows_window(softcap):
    """Decodes, a chunk after a cached prefix and a chunk from position 0, each row over its last 5 positions."""
    window, scale = 5, 0.3
    tables = {"a": [1, 2, 5], "b": [3, 4], "d1": [6, 7, 8], "d2": [9]}
    chunks = order_chunks([ScheduledChunk("a", [1] * 4, 6, True), ScheduledChunk("b", [1] * 7, 0, True),
                           ScheduledChunk("d1", [1], 10, True), ScheduledChunk("d2", [1], 2, True)])
    k_cache, v_cache = _cache(12)
    rows = sum(len(c.token_ids) for c in chunks)
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(rows, h, DIM, generator=gen) * 2 for h in (HEADS, KV_HEADS, KV_HEADS))
    inputs = build_step_inputs(chunks, tables, BS, CPU, window=window)
    out = paged_attention(q, k, v, k_cache, v_cache, inputs.windowed, scale, softcap)
    row = 0
    for chunk in chunks:
        table = tables[chunk.seq_id]
        for i in range(len(chunk.token_ids)):
            p = chunk.start_pos + i
            slots = torch.tensor([table[j // BS] * BS + j % BS for j in range(max(0, p - window + 1), p + 1)])
            expected = _eager(q[row], k_cache, v_cache, slots, scale, softcap)
            torch.testing.assert_close(out[row], expected, atol=1e-5, rtol=1e-5)
            row += 1
