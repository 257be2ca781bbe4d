"""KVCommitter: writes a CPU KV pool's pages ahead of use, on a thread of its own.

A pool that is only reserved costs nothing at rest, but a step that writes a
block first would take its page faults (zeroing 4 KiB or 2 MiB pages in the
middle of attention). Committing the whole pool at load instead costs seconds
before ``/ping`` turns 200 (a 4.4 GiB pool: 3.7-21 s on this project's VMs) and
its memory for as long as the container runs, whether traffic ever needs it.

The committer keeps a *frontier*: blocks below it are resident. The engine
hands out never-used blocks in ascending order (``engine/block_pool.py``), so
the highest block any step has used (the high-water mark) only grows, and the
thread keeps the frontier more than half a chunk ahead of it: it writes zeros
(``PagedKVCache.write_zeros``: memset, no torch threads, no GIL) into blocks no
step has been given yet, at the lowest priority, while steps run on blocks
below the frontier. Before a step, ``ensure`` moves the high-water mark to the
highest block the step uses; a step that reaches past the frontier (a burst
faster than the thread) waits until the thread has got there. A chunk is one
huge page of each layer's keys and values (the pool's tensors start on a huge
page boundary; where they are advised huge pages, writing less would commit a
whole huge page anyway), and at least 16 MiB in all. The first huge page of
each tensor is left to 4 KiB pages and written ``HEAD_CHUNK_BYTES`` at a time,
so that a pool at rest holds a few MiB (SmolLM2-135M: 15 MiB, 336 tokens)
rather than a huge page per layer (120 MiB).

Each quarter of the pool that becomes resident is logged, with the time since
load, so the load log says what was reserved and when it became resident.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from .kv_cache import PagedKVCache, huge_page_size

log = logging.getLogger(__name__)

MIN_CHUNK_BYTES = 16 << 20
HEAD_CHUNK_BYTES = 256 << 10  # per tensor, within its first huge page (4 KiB pages there)
LOWEST_PRIORITY = 19


class KVCommitter:
    def __init__(self, cache: PagedKVCache):
        self._cache = cache
        tensors = 2 * len(cache.k)
        page = huge_page_size()
        self._page = page
        self.chunk_bytes = max(page, -(-MIN_CHUNK_BYTES // max(tensors, 1) // page) * page)  # per tensor
        self._cond = threading.Condition()
        self._committed = 0  # bytes of each tensor written (the null block was written by the pool)
        self._frontier = 1  # blocks below it are resident
        self._high_water = 0
        self._started = time.monotonic()
        self._next_quarter = 1
        self.waits = 0  # steps that had to wait for the thread (a burst faster than it)
        self._thread = threading.Thread(target=self._run, name="kv-commit", daemon=True)

    @property
    def frontier(self) -> int:
        with self._cond:
            return self._frontier

    @property
    def resident_bytes(self) -> int:
        with self._cond:
            return self._committed * 2 * len(self._cache.k)

    def start(self) -> None:
        """Commit the first chunk now (the first requests' blocks), then go on in the background."""
        self._commit_chunk()
        log.info("KV cache: reserved %.2f GiB, %.2f GiB of it resident now; the rest is written ahead of use "
                 "in the background, up to %.0f MiB at a time (LLM_BYOC_KV_CACHE_COMMIT=load commits it all at load)",
                 self._cache.total_bytes / 1024**3, self.resident_bytes / 1024**3,
                 self.chunk_bytes * 2 * len(self._cache.k) / 1024**2)
        if self._frontier < self._cache.num_blocks:
            self._thread.start()

    def ensure(self, highest_block: int) -> None:
        """A step is about to use blocks up to ``highest_block``: return once they are resident."""
        with self._cond:
            if highest_block > self._high_water:
                self._high_water = highest_block
                self._cond.notify_all()
            if highest_block >= self._frontier:
                self.waits += 1
                self._cond.wait_for(lambda: highest_block < self._frontier)

    def _chunk_end(self, start: int) -> int:
        """Where the chunk that starts at byte ``start`` of each tensor ends."""
        step = HEAD_CHUNK_BYTES if start < self._page else self.chunk_bytes
        end = start + step if start >= self._page else min(self._page, start + step)
        return min(self._cache.tensor_bytes, end)

    def _behind(self) -> bool:
        """Whether the frontier is at most half the next chunk past the high-water mark (and the pool not
        all written)."""
        margin = (self._chunk_end(self._committed) - self._committed) // max(self._cache.block_bytes, 1) // 2
        return self._frontier < self._cache.num_blocks and self._frontier - self._high_water <= margin

    def _run(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)
        except OSError:
            pass
        while True:
            with self._cond:
                self._cond.wait_for(self._behind)
            if not self._commit_chunk():
                return

    def _commit_chunk(self) -> bool:
        """Write the next chunk of every tensor (one thread at a time: the loader, then the committer's);
        False once the pool is all written."""
        start = self._committed
        end = self._chunk_end(start)
        if end <= start:
            return False
        self._cache.write_zeros(start, end)
        with self._cond:
            self._committed = end
            whole = end == self._cache.tensor_bytes
            self._frontier = self._cache.num_blocks if whole else end // self._cache.block_bytes
            self._cond.notify_all()
        while self._next_quarter <= 4 and end >= self._cache.tensor_bytes * self._next_quarter / 4:
            log.info("KV cache: %d%% resident (%.2f GiB) %.0f s after load", 25 * self._next_quarter,
                     self.resident_bytes / 1024**3, time.monotonic() - self._started)
            self._next_quarter += 1
        return not whole
