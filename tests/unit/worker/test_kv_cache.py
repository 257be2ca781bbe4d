"""KVCache grows in steps up to max_len, keeps its contents, and shrinks when idle."""

from __future__ import annotations

import pytest
import torch

from llm_byoc.worker.kv_cache import KVCache


def _cache(max_len: int = 100) -> KVCache:
    return KVCache(2, 3, 2, 4, max_len, torch.float32, torch.device("cpu"), grow_by=32)


def test_grows_in_steps_and_keeps_contents():
    cache = _cache()
    assert cache.capacity == 32 and cache.k[0].shape == (3, 2, 32, 4)
    cache.k[1][2, :, 31] = 7.0
    cache.ensure_capacity(33)
    assert cache.capacity == 64 and bool((cache.k[1][2, :, 31] == 7.0).all())
    cache.ensure_capacity(99)
    assert cache.capacity == 100  # capped at max_len, not rounded past it
    with pytest.raises(ValueError, match="exceed"):
        cache.ensure_capacity(101)


def test_release_memory_and_sizes():
    cache = _cache()
    cache.ensure_capacity(90)
    cache.release_memory()
    assert cache.capacity == 32
    assert cache.bytes_per_token == 2 * 2 * 2 * 4 * 4
    assert cache.max_bytes == cache.bytes_per_token * 3 * 100
