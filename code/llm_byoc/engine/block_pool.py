"""The KV cache's blocks as the engine sees them: reference counts, free lists, a prefix map.

Pure Python: the model worker holds the tensors and only ever sees block ids.

* Block 0 is the null block. It is never given to a sequence; the worker keeps
  it zero and points padding at it.
* A block with no reference is *free*, on one of two lists. A free block that
  holds no cached prefix is reused first, the most recently freed first: its
  memory is hot, so a cache that shares nothing (prefix caching off, or no
  prompt ever repeated) keeps cycling through the same few blocks instead of
  walking the whole pool and touching cold memory every step (and, where the
  worker leaves its pool lazily committed, as in multi-model mode, growing its
  memory to the pool's size). A fresh pool hands out blocks 1, 2, 3, ... in order.
* A free block that still holds a cached prefix (its hash is in the prefix
  map) waits on the other list, least recently used first. It can be revived
  by a prefix hit (``touch``) until ``allocate`` runs out of plain blocks and
  hands it out, which evicts it from the map. So cached prefixes cost nothing
  until memory is needed, and are evicted least recently used first.
* Only a block whose every token's keys and values are computed gets a hash
  (``cache``), and a hashed block is never written again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

NULL_BLOCK = 0


@dataclass(eq=False)
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: bytes | None = None


class BlockPool:
    def __init__(self, num_blocks: int):
        if num_blocks < 2:
            raise ValueError(f"a KV cache needs at least 2 blocks (one is the null block), not {num_blocks}")
        self.num_blocks = num_blocks
        self._blocks = [Block(i) for i in range(num_blocks)]
        self._blocks[NULL_BLOCK].ref_count = 1  # held forever
        # no cached prefix: a stack, popped from its end (block 1 on top in a fresh pool)
        self._free_plain: OrderedDict[int, Block] = OrderedDict((b.block_id, b) for b in reversed(self._blocks[1:]))
        self._free_cached: OrderedDict[int, Block] = OrderedDict()  # holding a prefix: least recently used first
        self._cached: dict[bytes, Block] = {}

    @property
    def num_usable(self) -> int:
        return self.num_blocks - 1

    @property
    def num_free(self) -> int:
        """Blocks ``allocate`` can hand out (free ones holding a cached prefix included)."""
        return len(self._free_plain) + len(self._free_cached)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def block(self, block_id: int) -> Block:
        return self._blocks[block_id]

    def lookup(self, block_hash: bytes) -> Block | None:
        return self._cached.get(block_hash)

    def allocate(self, count: int) -> list[Block]:
        """``count`` blocks: plain ones (most recently freed first), then cached ones (least recently
        used first, evicting their prefixes); the caller checked ``num_free``."""
        if count > self.num_free:
            raise ValueError(f"{count} blocks asked for, {self.num_free} free")
        taken = []
        for _ in range(count):
            if self._free_plain:
                _, block = self._free_plain.popitem(last=True)
            else:
                _, block = self._free_cached.popitem(last=False)
            if block.block_hash is not None:  # evict the prefix it held
                if self._cached.get(block.block_hash) is block:
                    del self._cached[block.block_hash]
                block.block_hash = None
            block.ref_count = 1
            taken.append(block)
        return taken

    def touch(self, blocks: list[Block]) -> None:
        """Take one more reference on each (prefix hits): a free one leaves its free list."""
        for block in blocks:
            if block.ref_count == 0:
                del self._free_list(block)[block.block_id]
            block.ref_count += 1

    def free(self, blocks: list[Block]) -> None:
        """Drop one reference on each, in the order given; an unreferenced block joins the most
        recently used end of its free list. Give a sequence's blocks last first, so that its
        tail (the least likely to be shared) is evicted before its prefix."""
        for block in blocks:
            if block.block_id == NULL_BLOCK:
                continue
            if block.ref_count <= 0:
                raise ValueError(f"block {block.block_id} freed more often than taken")
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free_list(block)[block.block_id] = block

    def _free_list(self, block: Block) -> OrderedDict[int, Block]:
        """The free list ``block`` is (or goes) on: a hash is only ever set on a held block."""
        return self._free_plain if block.block_hash is None else self._free_cached

    def cache(self, block: Block, block_hash: bytes) -> None:
        """Record that ``block`` (held: a free one would sit on the wrong free list) holds the prefix
        ``block_hash`` (first holder wins)."""
        if block.ref_count == 0:
            raise ValueError(f"block {block.block_id} is free: only a held block is cached")
        if block.block_hash is not None or block_hash in self._cached:
            return
        block.block_hash = block_hash
        self._cached[block_hash] = block
