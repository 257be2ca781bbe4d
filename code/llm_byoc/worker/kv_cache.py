"""The KV cache's storage: a fixed pool of blocks per layer, allocated once at load.

Layout per layer: keys and values ``[num_blocks * block_size, kv_heads, head_dim]``,
token-major: block ``b`` holds rows ``b*block_size .. (b+1)*block_size - 1`` and
a token's *slot* is ``block * block_size + offset``. (The same memory as
``[num_blocks, block_size, kv_heads, head_dim]``, the layout paged-attention
kernels take.) Which blocks a sequence owns is the engine's business; the worker
only maps block tables onto slots. Block 0 is the null block: zeros, never
written, and the slot every padded gather reads.

On CPU the pool is reserved, not touched (``torch.empty``): pages are committed
as blocks are first written, so the process's memory grows with use up to the
pool's size (the engine reuses freed blocks first, engine/block_pool.py; every
first write to a page is a page fault, which on a VM costs W1 10-15% while a
prefix cache walks through the pool). Nothing is ever resized, so a step cannot fail half-way through
reallocating the cache.
"""

from __future__ import annotations

import torch

from ..errors import ModelLoadError

NULL_SLOT = 0


class PagedKVCache:
    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ):
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (num_blocks * block_size, kv_heads, head_dim)
        try:
            self.k = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
            self.v = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            self.k = self.v = []
            raise ModelLoadError(f"cannot allocate the KV cache ({num_blocks} blocks of {block_size}): {exc}") from None
        for layer in self.k + self.v:
            layer[:block_size].zero_()  # the null block

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size
