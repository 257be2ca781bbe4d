"""Paged attention: cascade attention over a shared prefix gives what each chunk's own gather gives; gathers
into the cache's scratch buffers give what fresh tensors give."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from llm_byoc.protocol import ScheduledChunk
from llm_byoc.worker.attention import CASCADE_DEVICES, paged_attention
from llm_byoc.worker.batch import build_step_inputs, order_chunks
from llm_byoc.worker.kv_cache import GatherScratch

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


def test_gathers_into_the_scratch_buffers_give_what_fresh_tensors_give_and_reuse_them():
    # two decode groups (a short and a long context), a chunk after cached blocks, a chunk from 0
    tables = {"s": [1, 2], "l": [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
                                 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44,
                                 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64,
                                 65, 66, 67, 68, 69, 70],
              "p": [71, 72, 73], "f": [74, 75]}
    chunks = order_chunks([
        ScheduledChunk("s", [1], 5, True), ScheduledChunk("l", [1], 270, True),
        ScheduledChunk("p", [1] * 3, 8, True), ScheduledChunk("f", [1] * 6, 0, True),
    ])
    k_cache, v_cache = _cache(80)
    rows = sum(len(c.token_ids) for c in chunks)
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(rows, h, DIM, generator=gen) for h in (HEADS, KV_HEADS, KV_HEADS))
    inputs = build_step_inputs(chunks, tables, BS, CPU)
    assert len(inputs.decode_groups) == 2 and len(inputs.prefills) == 2
    fresh = paged_attention(q, k, v, k_cache.clone(), v_cache.clone(), inputs)
    scratch = GatherScratch(KV_HEADS, DIM, torch.float32, CPU)
    kc, vc = k_cache.clone(), v_cache.clone()
    first = paged_attention(q, k, v, kc, vc, inputs, scratch)
    buffers = [t.data_ptr() for t in scratch.take(1)]
    again = paged_attention(q, k, v, kc, vc, inputs, scratch)  # a second layer / step: the same buffers
    assert [t.data_ptr() for t in scratch.take(1)] == buffers
    torch.testing.assert_close(first, fresh, atol=0, rtol=0)
    torch.testing.assert_close(again, fresh, atol=0, rtol=0)


def test_the_scratch_grows_to_the_largest_gather_and_keeps_it():
    scratch = GatherScratch(KV_HEADS, DIM, torch.float32, CPU)
    keys, values = scratch.take(10)
    assert keys.shape == values.shape == (10, KV_HEADS, DIM) and keys.data_ptr() != values.data_ptr()
    assert keys.is_contiguous() and values.is_contiguous()
    bigger, _ = scratch.take(15)  # grows: at least double
    assert bigger.shape[0] == 15
    smaller, _ = scratch.take(4)
    assert smaller.data_ptr() == bigger.data_ptr()  # kept, not shrunk
    assert scratch.take(20)[0].data_ptr() == bigger.data_ptr()  # 20 fits in the doubled 20
