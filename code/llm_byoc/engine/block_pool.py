"""The KV cache's blocks as the engine sees them: reference counts, a free queue, a prefix map.

Pure Python: the model worker holds the tensors and only ever sees block ids.

* Block 0 is the null block. It is never given to a sequence; the worker keeps
  it zero and points padding at it.
* A block with no reference is *free*. The free queue is ordered least recently
  used first; ``allocate`` takes from its front. A free block may still hold a
  cached prefix (its hash is in the prefix map): it can be revived by a prefix
  hit (``touch``) until ``allocate`` hands it out, which evicts it from the map.
  So cached prefixes cost nothing until memory is needed, and are evicted least
  recently used first.
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
        self._free: OrderedDict[int, Block] = OrderedDict((b.block_id, b) for b in self._blocks[1:])
        self._cached: dict[bytes, Block] = {}

    @property
    def num_usable(self) -> int:
        return self.num_blocks - 1

    @property
    def num_free(self) -> int:
        """Blocks ``allocate`` can hand out (free ones holding a cached prefix included)."""
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def block(self, block_id: int) -> Block:
        return self._blocks[block_id]

    def lookup(self, block_hash: bytes) -> Block | None:
        return self._cached.get(block_hash)

    def allocate(self, count: int) -> list[Block]:
        """``count`` blocks, least recently used first; the caller checked ``num_free``."""
        if count > len(self._free):
            raise ValueError(f"{count} blocks asked for, {len(self._free)} free")
        taken = []
        for _ in range(count):
            _, block = self._free.popitem(last=False)
            if block.block_hash is not None:  # evict the prefix it held
                if self._cached.get(block.block_hash) is block:
                    del self._cached[block.block_hash]
                block.block_hash = None
            block.ref_count = 1
            taken.append(block)
        return taken

    def touch(self, blocks: list[Block]) -> None:
        """Take one more reference on each (prefix hits): a free one leaves the free queue."""
        for block in blocks:
            if block.ref_count == 0:
                del self._free[block.block_id]
            block.ref_count += 1

    def free(self, blocks: list[Block]) -> None:
        """Drop one reference on each, in the order given; unreferenced blocks join the
        free queue's most recently used end. Give a sequence's blocks last first, so that its
        tail (the least likely to be shared) is evicted before its prefix."""
        for block in blocks:
            if block.block_id == NULL_BLOCK:
                continue
            if block.ref_count <= 0:
                raise ValueError(f"block {block.block_id} freed more often than taken")
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free[block.block_id] = block

    def cache(self, block: Block, block_hash: bytes) -> None:
        """Record that ``block`` holds the prefix ``block_hash`` (first holder wins)."""
        if block.block_hash is not None or block_hash in self._cached:
            return
        block.block_hash = block_hash
        self._cached[block_hash] = block
