"""The paged KV cache's storage: layout, the null block, a failed allocation."""

from __future__ import annotations

import pytest
import torch

from llm_byoc.errors import ModelLoadError
from llm_byoc.worker.kv_cache import NULL_SLOT, PagedKVCache


def test_layout_is_token_major_blocks_with_a_zero_null_block():
    cache = PagedKVCache(num_layers=2, num_blocks=5, block_size=4, kv_heads=3, head_dim=8,
                         dtype=torch.float32, device=torch.device("cpu"))
    assert len(cache.k) == len(cache.v) == 2 and cache.num_slots == 20
    assert cache.k[0].shape == (20, 3, 8)
    assert NULL_SLOT == 0
    for layer in cache.k + cache.v:
        assert bool((layer[:4] == 0).all())  # block 0: the null block


def test_an_allocation_that_cannot_be_made_is_a_load_error():
    with pytest.raises(ModelLoadError, match="cannot allocate the KV cache"):
        PagedKVCache(num_layers=1, num_blocks=2**40, block_size=16, kv_heads=8, head_dim=128,
                     dtype=torch.float32, device=torch.device("cpu"))
