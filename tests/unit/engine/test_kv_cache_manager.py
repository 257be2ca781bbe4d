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


def test_blocks_wholly_before_the_window_are_freed_exactly_when_no_query_reads_them():
    """Window 6, blocks of 4: after c computed tokens the next query (position >= c) reads keys >= c - 5,
    so block i (positions 4i..4i+3) goes once 4i + 3 < c - 5."""
    kv = KVCacheManager(num_blocks=20, block_size=4)
    s = seq(range(30))
    kv.admit(s, [], 30)
    first = s.blocks[0]
    for computed, freed in [(8, 0), (9, 1), (12, 1), (13, 2), (29, 6)]:
        s.num_computed = computed
        kv.cache_computed(s)
        kv.free_behind_window(s, window=6)
        assert [b.block_id for b in s.blocks[:freed + 1]] == [0] * freed + [freed + 1], computed
        assert kv.num_free_blocks == 19 - 8 + freed
    assert first.ref_count == 0 and kv.pool.lookup(first.block_hash) is first  # cached, evictable
    kv.free(s)  # the null placeholders are skipped
    assert kv.num_free_blocks == 19 and s.num_behind_window == 0


def test_freed_window_blocks_still_serve_prefix_hits_and_are_never_registered_again():
    kv = KVCacheManager(num_blocks=20, block_size=4)
    s = filled(kv, seq(range(20), "long"))
    assert kv.free_behind_window(s, window=5) == 4 and kv.free_behind_window(s, window=5) == 0
    s.token_ids.extend([1, 2, 3, 4])
    kv.grow(s, 24)
    s.num_computed = 24
    kv.cache_computed(s)  # only block 5 is new: the placeholders are not hashed
    assert kv.pool.block(0).block_hash is None and s.num_registered == 6
    again = seq(list(range(20)) + [1, 2, 3, 4, 5], "again")
    assert [b.block_id for b in kv.cached_prefix(again)] == [1, 2, 3, 4, 5, 6]


def test_unregistered_and_kept_blocks_are_not_freed():
    kv = KVCacheManager(num_blocks=20, block_size=4)
    s = seq(range(20))
    kv.admit(s, [], 20)
    s.num_computed = 20
    assert kv.free_behind_window(s, window=5) == 0  # computed, but not in the prefix cache yet
    kv.cache_computed(s)
    assert kv.free_behind_window(s, window=5, keep=3) == 1  # a session's three prompt blocks stay
    assert [b.block_id for b in s.blocks] == [1, 2, 3, 0, 5]
    off = KVCacheManager(num_blocks=20, block_size=4, enable_prefix_caching=False)
    t = seq(range(20))
    off.admit(t, [], 20)
    t.num_computed = 20
    assert off.free_behind_window(t, window=5) == 4
