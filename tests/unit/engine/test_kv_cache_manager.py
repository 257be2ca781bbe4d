"""KVCacheManager: blocks per sequence, prefix hashes chained over blocks, namespaces."""

from __future__ import annotations

import pytest

from llm_byoc.engine.kv_cache_manager import KVCacheManager, block_hash, root_hash
from llm_byoc.engine.sequence import Sequence
from llm_byoc.protocol import SamplingParams


def seq(tokens, seq_id="s", namespace="") -> Sequence:
    return Sequence(seq_id, list(tokens), SamplingParams(), cache_namespace=namespace)


def filled(kv: KVCacheManager, s: Sequence) -> Sequence:
    """Admit ``s`` with whatever it finds cached, compute all of it, register its blocks."""
    kv.admit(s, kv.cached_prefix(s), s.num_tokens)
    s.num_computed = s.num_tokens
    kv.cache_computed(s)
    return s


def test_hashes_chain_over_parents_and_namespaces():
    root = root_hash("")
    assert block_hash(root, [1, 2]) == block_hash(root, [1, 2])
    assert block_hash(root, [1, 2]) != block_hash(root, [2, 1])
    assert block_hash(block_hash(root, [1, 2]), [3, 4]) != block_hash(block_hash(root, [9, 9]), [3, 4])
    assert root_hash("adapter-a") != root_hash("")


def test_a_sequence_gets_the_blocks_it_needs_and_grows_by_blocks():
    kv = KVCacheManager(num_blocks=6, block_size=4)
    s = seq(range(10))
    assert kv.admit(s, [], 6) == [1, 2] and s.num_computed == 0
    assert kv.grow(s, 8) == [] and kv.grow(s, 9) == [3]
    assert kv.grow(s, 100) is None and len(s.blocks) == 3  # nothing changed
    kv.free(s)
    assert kv.num_free_blocks == 5 and s.blocks == []


def test_the_reserve_keeps_blocks_free_at_admission():
    kv = KVCacheManager(num_blocks=4, block_size=4)
    assert kv.admit(seq(range(8)), [], 8, reserve=2) is None
    assert kv.admit(seq(range(8)), [], 8, reserve=1) == [1, 2]


def test_prefix_hits_stop_at_the_first_different_block_and_leave_the_last_token():
    kv = KVCacheManager(num_blocks=20, block_size=4)
    filled(kv, seq(range(12), "doc"))  # blocks: [0-3] [4-7] [8-11]
    assert len(kv.cached_prefix(seq(list(range(12)) + [50], "longer"))) == 3
    assert len(kv.cached_prefix(seq(list(range(6)) + [99] * 6, "diverges"))) == 1
    assert len(kv.cached_prefix(seq(range(12), "same"))) == 2  # token 11 must be computed
    assert kv.cached_prefix(seq(range(12), "other tenant", namespace="t2")) == []


def test_admitting_behind_a_prefix_counts_and_shares_blocks():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    doc = filled(kv, seq(range(9), "doc"))
    other = seq(list(range(8)) + [70, 71], "other")
    prefix = kv.cached_prefix(other)
    assert kv.admit(other, prefix, other.num_tokens) == [*[b.block_id for b in doc.blocks[:2]], 4]
    assert other.num_computed == 8 and doc.blocks[0].ref_count == 2
    assert (kv.queried_tokens, kv.hit_tokens) == (9 + 10, 8)


def test_cached_blocks_of_finished_sequences_are_evicted_only_when_memory_is_needed():
    kv = KVCacheManager(num_blocks=4, block_size=4)  # 3 usable
    doc = filled(kv, seq(range(8), "doc"))
    kv.free(doc)
    assert kv.pool.num_cached == 2 and kv.num_free_blocks == 3
    assert len(kv.cached_prefix(seq(list(range(8)) + [1], "again"))) == 2
    kv.admit(seq([5] * 12, "big"), [], 12)  # needs all three: the cached ones go
    assert kv.pool.num_cached == 0


def test_reviving_cached_free_blocks_is_counted_against_free_memory():
    kv = KVCacheManager(num_blocks=4, block_size=4)
    doc = filled(kv, seq(range(8), "doc"))
    kv.free(doc)  # 3 free, 2 of them cached
    wants = seq(list(range(8)) + [1, 2, 3, 4, 5], "wants")
    prefix = kv.cached_prefix(wants)
    assert kv.admit(wants, prefix, 13, reserve=1) is None  # 2 revived + 2 fresh > 3 free
    assert kv.admit(wants, prefix, 12) == [1, 2, 3]


def test_admit_refuses_a_sequence_that_already_holds_blocks():
    kv = KVCacheManager(num_blocks=4, block_size=4)
    s = seq(range(4))
    kv.admit(s, [], 4)
    with pytest.raises(ValueError, match="already holds"):
        kv.admit(s, [], 4)
