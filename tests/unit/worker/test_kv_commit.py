"""KVCommitter: a CPU pool written ahead of use in the background; steps wait only past the frontier."""

from __future__ import annotations

import threading
import time

import torch

from llm_byoc.worker.kv_cache import PagedKVCache, huge_page_size
from llm_byoc.worker.kv_commit import HEAD_CHUNK_BYTES, KVCommitter

CPU = torch.device("cpu")


def _pool(num_blocks: int = 2048) -> PagedKVCache:  # 2 layers, 4 KiB a block per tensor: 8 MiB per tensor
    return PagedKVCache(num_layers=2, num_blocks=num_blocks, block_size=16, kv_heads=4, head_dim=16,
                        dtype=torch.float32, device=CPU, commit="ahead")


def _wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_an_ahead_pool_starts_on_a_huge_page_boundary():
    pool = _pool()
    assert all(t.data_ptr() % huge_page_size() == 0 for t in pool.k + pool.v)


def test_the_first_chunk_is_written_at_start_and_the_rest_only_as_blocks_are_used():
    pool = _pool()
    for t in pool.k + pool.v:
        t.fill_(7.0)  # stands for memory never written: the committer must zero what it commits
        t[:16].zero_()
    committer = KVCommitter(pool)
    committer.start()
    head_blocks = HEAD_CHUNK_BYTES // pool.block_bytes  # the first chunk: within the first huge page
    assert committer.frontier == head_blocks
    time.sleep(0.2)
    assert committer.frontier == head_blocks  # nothing used: the thread waits
    assert bool((pool.k[0][: head_blocks * 16] == 0).all()) and bool((pool.k[0][head_blocks * 16:] == 7).all())
    committer.ensure(5)  # within the frontier and half a chunk from it: no wait, nothing more written
    time.sleep(0.2)
    assert committer.frontier == head_blocks
    committer.ensure(head_blocks // 2 + 1)  # past half of the chunk: the thread writes the next one
    _wait_until(lambda: committer.frontier >= 2 * head_blocks)
    assert committer.waits == 0


def test_a_step_past_the_frontier_waits_for_its_blocks_and_the_pool_is_written_whole_in_the_end():
    pool = _pool()
    committer = KVCommitter(pool)
    committer.start()
    committer.ensure(pool.num_blocks - 1)
    assert committer.waits == 1 and committer.frontier == pool.num_blocks
    assert committer.resident_bytes == pool.total_bytes
    assert all(bool((t == 0).all()) for t in pool.k + pool.v)


def test_steps_on_committed_blocks_run_while_the_thread_writes_beyond_them():
    pool = _pool()
    committer = KVCommitter(pool)
    committer.start()
    stop = threading.Event()

    def step_on_block_one():  # what a step does: write its own blocks, below the frontier
        while not stop.is_set():
            pool.k[0][16:32].fill_(1.0)

    worker = threading.Thread(target=step_on_block_one)
    worker.start()
    try:
        committer.ensure(pool.num_blocks - 1)
    finally:
        stop.set()
        worker.join()
    assert bool((pool.k[0][16:32] == 1).all())  # never zeroed under the step: block 1 was committed first


def test_a_pool_smaller_than_a_chunk_is_written_whole_at_start():
    pool = _pool(num_blocks=4)
    committer = KVCommitter(pool)
    committer.start()
    assert committer.frontier == 4 and committer.resident_bytes == pool.total_bytes
