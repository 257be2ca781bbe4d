"""BlockPool: reference counts, the two free lists, prefix map and its eviction."""

from __future__ import annotations

import pytest

from llm_byoc.engine.block_pool import NULL_BLOCK, BlockPool


def test_the_null_block_is_never_handed_out():
    pool = BlockPool(4)
    assert pool.num_usable == 3 and pool.num_free == 3
    assert NULL_BLOCK not in [b.block_id for b in pool.allocate(3)]
    with pytest.raises(ValueError, match="1 blocks asked for, 0 free"):
        pool.allocate(1)
    with pytest.raises(ValueError, match="at least 2 blocks"):
        BlockPool(1)


def test_a_fresh_pool_hands_out_blocks_in_order_and_reuses_plain_blocks_most_recent_first():
    pool = BlockPool(7)
    a, b, c, d = pool.allocate(4)
    assert [blk.block_id for blk in (a, b, c, d)] == [1, 2, 3, 4]
    pool.free([c, a])
    pool.free([d])
    # hot blocks first (d, then a, then c), before the never-used 5 and 6
    assert [blk.block_id for blk in pool.allocate(5)] == [d.block_id, a.block_id, c.block_id, 5, 6]


def test_cached_blocks_wait_until_no_plain_block_is_free_then_go_least_recently_used_first():
    pool = BlockPool(6)
    a, b, c, d = pool.allocate(4)
    pool.cache(a, b"ha")
    pool.cache(b, b"hb")
    pool.free([b, a])  # b first: its prefix is evicted first
    pool.free([c])
    assert [blk.block_id for blk in pool.allocate(2)] == [c.block_id, 5]  # plain and never-used go first
    assert pool.num_cached == 2 and pool.lookup(b"ha") is a
    assert [blk.block_id for blk in pool.allocate(1)] == [b.block_id]  # then the least recently used prefix
    assert pool.lookup(b"hb") is None and pool.lookup(b"ha") is a and pool.num_free == 1


def test_shared_blocks_free_only_with_their_last_reference():
    pool = BlockPool(3)
    (block,) = pool.allocate(1)
    pool.touch([block])
    pool.free([block])
    assert pool.num_free == 1 and block.ref_count == 1
    pool.free([block])
    assert pool.num_free == 2
    with pytest.raises(ValueError, match="freed more often"):
        pool.free([block])


def test_a_cached_free_block_can_be_revived_until_it_is_reallocated():
    pool = BlockPool(3)
    block, other = pool.allocate(2)
    pool.cache(block, b"h1")
    pool.free([block])
    assert pool.lookup(b"h1") is block and pool.num_cached == 1
    pool.touch([block])  # a prefix hit: off its free list again
    assert pool.num_free == 0 and block.ref_count == 1
    pool.free([block, other])
    assert [b.block_id for b in pool.allocate(1)] == [other.block_id]  # a plain block goes before the cached one
    assert pool.lookup(b"h1") is block
    assert [b.block_id for b in pool.allocate(1)] == [block.block_id]  # then it is evicted
    assert pool.lookup(b"h1") is None and pool.num_cached == 0 and block.block_hash is None


def test_first_holder_of_a_hash_wins():
    pool = BlockPool(3)
    a, b = pool.allocate(2)
    pool.cache(a, b"same")
    pool.cache(b, b"same")
    assert pool.lookup(b"same") is a and b.block_hash is None


def test_only_a_held_block_is_cached():
    pool = BlockPool(3)
    (block,) = pool.allocate(1)
    pool.free([block])
    with pytest.raises(ValueError, match="only a held block"):
        pool.cache(block, b"h")
    assert pool.num_cached == 0 and [b.block_id for b in pool.allocate(2)] == [block.block_id, 2]
