"""The compiled CPU decode-attention kernel: the softmax attention of each row over its own keys, read in place
from the pool (GQA, padding on either side, head sizes that are not a multiple of its 16 lanes), a row's result
the same bits alone or in any batch, and the torch path it replaces giving the same values."""

from __future__ import annotations

import pytest
import torch

from kernel_isas import torch_threads
from llm_byoc.worker import attention, cpu_attention, cpu_kernels
from llm_byoc.worker.batch import DecodeGroup

pytestmark = pytest.mark.skipif(cpu_kernels.unavailable() is not None, reason=str(cpu_kernels.unavailable()))

SLOTS = 512


def _case(batch: int, heads: int, kv_heads: int, dim: int, lengths: list[int], left: bool = False, seed: int = 0):
    """Random pools, queries, and each row's keys at random slots, padded (right, or ``left`` as sliding-window
    groups are) to the longest row with the null slot 0."""
    gen = torch.Generator().manual_seed(seed)
    k_pool = torch.randn(SLOTS, kv_heads, dim, generator=gen)
    v_pool = torch.randn(SLOTS, kv_heads, dim, generator=gen)
    q = torch.randn(batch, heads, dim, generator=gen)
    kv_len = max(lengths)
    gather = torch.zeros(batch, kv_len, dtype=torch.int64)
    mask = torch.zeros(batch, kv_len, dtype=torch.bool)
    for row, length in enumerate(lengths):
        cols = slice(kv_len - length, kv_len) if left else slice(0, length)
        gather[row, cols] = torch.randperm(SLOTS - 1, generator=gen)[:length] + 1
        mask[row, cols] = True
    mask = None if all(n == kv_len for n in lengths) else mask[:, None, None, :]
    return q, k_pool, v_pool, gather.reshape(-1), mask, kv_len


def _reference(q, k_pool, v_pool, gather, mask, kv_len, scale=None) -> torch.Tensor:
    """Softmax attention in float64, each row over its unmasked keys."""
    batch, heads, dim = q.shape
    group = heads // k_pool.shape[1]
    keys = k_pool.double()[gather].view(batch, kv_len, -1, dim).repeat_interleave(group, 2)  # [B, L, H, D]
    values = v_pool.double()[gather].view(batch, kv_len, -1, dim).repeat_interleave(group, 2)
    scores = torch.einsum("bhd,blhd->bhl", q.double(), keys) * (dim ** -0.5 if scale is None else scale)
    if mask is not None:
        scores = scores.masked_fill(~mask.view(batch, 1, kv_len), float("-inf"))
    return torch.einsum("bhl,blhd->bhd", torch.softmax(scores, -1), values)


@pytest.mark.parametrize("heads,kv_heads,dim", [(9, 3, 64), (4, 4, 32), (8, 2, 80), (6, 1, 128)])
@pytest.mark.parametrize("left", [False, True])
def test_each_row_attends_over_its_own_keys(heads, kv_heads, dim, left):
    case = _case(5, heads, kv_heads, dim, [1, 17, 40, 3, 33], left=left)
    out = cpu_attention.decode_attention(*case)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), _reference(*case), rtol=1e-5, atol=1e-5)


def test_no_mask_and_a_model_s_own_scale():
    case = _case(3, 8, 2, 64, [24, 24, 24])
    assert case[4] is None
    out = cpu_attention.decode_attention(*case, scale=0.3)
    torch.testing.assert_close(out.double(), _reference(*case, scale=0.3), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("left", [False, True])
def test_a_row_gives_the_same_bits_alone_and_in_any_batch(left):
    lengths = [70, 5, 129, 64, 17]
    q, k_pool, v_pool, gather, mask, kv_len = _case(5, 9, 3, 64, lengths, left=left)
    together = cpu_attention.decode_attention(q, k_pool, v_pool, gather, mask, kv_len)
    rows = gather.view(5, kv_len)
    for row, length in enumerate(lengths):
        own = rows[row, kv_len - length:] if left else rows[row, :length]
        alone = cpu_attention.decode_attention(q[row:row + 1], k_pool, v_pool, own.contiguous(), None, length)
        assert torch.equal(alone[0], together[row]), row


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_the_threads_share_the_work_and_change_no_bit(threads):
    """(row, KV head) pairs on torch's OpenMP threads, each computed as alone: the same bits as one thread."""
    case = _case(5, 8, 2, 64, [70, 5, 129, 64, 17])
    with torch_threads(1):
        one = cpu_attention.decode_attention(*case)
    with torch_threads(threads):
        assert torch.equal(cpu_attention.decode_attention(*case), one)
    torch.testing.assert_close(one.double(), _reference(*case), rtol=1e-5, atol=1e-5)


def test_the_torch_path_it_replaces_gives_the_same_values(monkeypatch):
    q, k_pool, v_pool, gather, mask, kv_len = _case(6, 9, 3, 64, [12, 50, 7, 50, 31, 1], seed=3)
    group = DecodeGroup(0, 6, kv_len, gather, mask)
    kernel = attention._decode(q, k_pool, v_pool, group)
    monkeypatch.setattr(cpu_attention, "_kernel", None)
    assert not cpu_attention.usable(q, k_pool, None)
    torch_path = attention._decode(q, k_pool, v_pool, group)
    torch.testing.assert_close(kernel, torch_path, rtol=1e-5, atol=1e-6)


def test_what_it_does_not_take_goes_to_torch():
    q, k_pool = torch.zeros(1, 2, 8), torch.zeros(4, 1, 8)
    assert cpu_attention.usable(q, k_pool, None)
    assert not cpu_attention.usable(q, k_pool, 50.0)  # soft-capped scores
    assert not cpu_attention.usable(q.bfloat16(), k_pool.bfloat16(), None)


def test_shapes_that_do_not_fit_are_refused():
    q, k_pool, v_pool, gather, mask, kv_len = _case(2, 4, 2, 16, [3, 3])
    with pytest.raises(ValueError, match="slots"):
        cpu_attention.decode_attention(q, k_pool, v_pool, gather[:-1], mask, kv_len)
    with pytest.raises(ValueError, match="contiguous"):
        cpu_attention.decode_attention(q, k_pool, v_pool, gather.int(), mask, kv_len)
