"""Which KV cache blocks each sequence holds, and the prefix cache over them.

A sequence holds ``ceil(tokens / block_size)`` blocks for the tokens whose keys
and values are (or are being) computed, so one long sequence no longer makes
every other one reserve its length.

Prefix caching: a full block is named by a hash of its tokens and of its
parent block's hash, so equal hashes mean equal prefixes up to and including
that block. The root of every chain is derived from the sequence's cache
namespace (room for an adapter id and a per-tenant salt: sequences in other
namespaces never share blocks). A new sequence whose prompt starts with cached
blocks takes them and skips their prefill. At most ``num_tokens - 1`` tokens
come from the cache, so the last prompt token is always computed and there are
logits to sample.

A prompt block another running sequence is computing but has not registered
yet (the same prompt sent n times, one system prompt in a burst) is worth
waiting for: ``being_computed`` names those blocks, and the scheduler holds a
sequence whose next uncached block is among them until it is cached.

Sliding windows: when every layer of the model attends within a window
(Mistral), a query at position p reads keys p - window + 1 .. p only, so once
``num_computed`` tokens are computed (the next query is at ``num_computed`` or
later) the blocks wholly below ``num_computed - window + 1`` are never read
again. ``free_behind_window`` drops them: each becomes the null block in the
sequence's table (the worker's windowed gathers never reach it), and a
registered one stays in the prefix cache, evictable like any free block.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence as TokenList

from .block_pool import NULL_BLOCK, Block, BlockPool
from .sequence import Sequence

_ROOT_TAG = b"llm-byoc/kv/v1\x00"


def root_hash(namespace: str) -> bytes:
    return hashlib.sha256(_ROOT_TAG + namespace.encode("utf-8")).digest()


def block_hash(parent: bytes, tokens: TokenList[int]) -> bytes:
    digest = hashlib.sha256(parent)
    digest.update(array("q", tokens).tobytes())
    return digest.digest()


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, not {block_size}")
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.queried_tokens = 0
        self.hit_tokens = 0

    # --- sizes -------------------------------------------------------------------------

    @property
    def capacity_tokens(self) -> int:
        return self.pool.num_usable * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def can_ever_hold(self, num_tokens: int) -> bool:
        return self.blocks_for(num_tokens) <= self.pool.num_usable

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    # --- admission -----------------------------------------------------------------------

    def cached_prefix(self, seq: Sequence) -> list[Block]:
        """The longest run of cached full blocks ``seq``'s tokens start with (changes nothing)."""
        if not self.enable_prefix_caching:
            return []
        limit = (seq.num_tokens - 1) // self.block_size  # the last token is always computed
        hits: list[Block] = []
        for digest in self._hashes(seq, limit):
            block = self.pool.lookup(digest)
            if block is None:
                break
            hits.append(block)
        return hits

    def next_block_hash(self, seq: Sequence, num_cached_blocks: int) -> bytes | None:
        """The hash of the block after ``seq``'s cached prefix, if the cache could ever serve it."""
        if not self.enable_prefix_caching or num_cached_blocks >= (seq.num_tokens - 1) // self.block_size:
            return None
        return self._hashes(seq, num_cached_blocks + 1)[num_cached_blocks]

    def being_computed(self, seq: Sequence) -> list[bytes]:
        """Hashes of the full prompt blocks of running ``seq`` not registered yet (computed now or soon)."""
        if not self.enable_prefix_caching:
            return []
        full = seq.num_prompt_tokens // self.block_size
        if seq.num_registered >= full:
            return []
        return self._hashes(seq, full)[seq.num_registered:]

    def admit(self, seq: Sequence, prefix: list[Block], num_tokens: int, reserve: int = 0) -> list[int] | None:
        """Give a sequence with no blocks ``prefix`` plus fresh blocks for ``num_tokens`` tokens.

        Returns its block ids, or None (nothing changed) when fewer than
        ``reserve`` blocks would stay free. On success ``seq.num_computed`` is
        the number of tokens the prefix already holds.
        """
        if seq.blocks:
            raise ValueError(f"sequence {seq.seq_id} already holds blocks")
        revived = sum(1 for block in prefix if block.ref_count == 0)  # they leave their free list
        fresh = self.blocks_for(num_tokens) - len(prefix)
        if fresh < 0:
            raise ValueError("the prefix covers more than the tokens asked for")
        if self.pool.num_free - revived < fresh + reserve:
            return None
        self.pool.touch(prefix)
        seq.blocks = prefix + self.pool.allocate(fresh)
        seq.num_computed = len(prefix) * self.block_size
        seq.num_registered = len(prefix)
        if self.enable_prefix_caching:
            self.queried_tokens += seq.num_tokens
            self.hit_tokens += seq.num_computed
        return [block.block_id for block in seq.blocks]

    # --- growth, release ---------------------------------------------------------------

    def grow(self, seq: Sequence, num_tokens: int) -> list[int] | None:
        """Blocks for ``num_tokens`` tokens in all: the ids added, or None (nothing changed)."""
        needed = self.blocks_for(num_tokens) - len(seq.blocks)
        if needed <= 0:
            return []
        if needed > self.pool.num_free:
            return None
        added = self.pool.allocate(needed)
        seq.blocks.extend(added)
        return [block.block_id for block in added]

    def cache_computed(self, seq: Sequence) -> None:
        """Register the blocks whose every token is now computed (after a step)."""
        if not self.enable_prefix_caching:
            return
        full = min(seq.num_computed // self.block_size, len(seq.blocks))
        if full <= seq.num_registered:
            return
        hashes = self._hashes(seq, full)
        for index in range(seq.num_registered, full):
            self.pool.cache(seq.blocks[index], hashes[index])
        seq.num_registered = full

    def trim(self, seq: Sequence) -> None:
        """Release the blocks past ``seq``'s computed tokens (speculative proposals that were rejected)."""
        keep = self.blocks_for(seq.num_computed)
        if len(seq.blocks) > keep:
            self.pool.free(list(reversed(seq.blocks[keep:])))
            del seq.blocks[keep:]

    def free(self, seq: Sequence) -> None:
        """Release every block of ``seq`` (tail first: its prefix is evicted last)."""
        self.pool.free(list(reversed(seq.blocks)))  # the null block (freed out of the window) is skipped
        seq.blocks = []
        seq.num_registered = 0
        seq.num_behind_window = 0

    def free_behind_window(self, seq: Sequence, window: int, keep: int = 0) -> int:
        """Free ``seq``'s blocks that lie wholly before its window (positions below ``num_computed - window + 1``),
        except its first ``keep`` (a session's prompt, pinned when it finishes) and, with prefix caching, any not
        registered yet; the number freed."""
        behind = max(0, seq.num_computed - window + 1) // self.block_size
        if self.enable_prefix_caching:
            behind = min(behind, seq.num_registered)  # a block is hashed before it leaves the table
        behind = min(behind, len(seq.blocks))
        start = max(seq.num_behind_window, keep)
        if behind <= start:
            return 0
        dropped = seq.blocks[start:behind]
        seq.blocks[start:behind] = [self.pool.block(NULL_BLOCK)] * len(dropped)
        seq.num_behind_window = behind
        self.pool.free(list(reversed(dropped)))  # the newest first, as in ``free``: the oldest is evicted last
        return len(dropped)

    def unfilled_slots(self, seq: Sequence) -> int:
        return max(0, len(seq.blocks) * self.block_size - seq.num_computed)

    # --- hashes ----------------------------------------------------------------------------

    def _hashes(self, seq: Sequence, num_blocks: int) -> list[bytes]:
        """The hashes of ``seq``'s first ``num_blocks`` full blocks (kept on the sequence)."""
        hashes = seq.block_hashes
        size = self.block_size
        while len(hashes) < num_blocks:
            index = len(hashes)
            parent = hashes[-1] if hashes else root_hash(seq.cache_namespace)
            hashes.append(block_hash(parent, seq.token_ids[index * size : (index + 1) * size]))
        return hashes
