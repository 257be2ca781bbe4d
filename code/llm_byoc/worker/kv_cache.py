"""Per-layer key/value cache with one slot per running sequence.

Layout per layer: ``[num_slots, kv_heads, capacity, head_dim]``, so the keys of
one (sequence, head) pair are contiguous and a run of slots is a plain view.
Capacity grows in steps of ``grow_by`` tokens up to ``max_len`` (the memory of
a full-length cache is only spent when a sequence gets that long) and falls
back to one step when every slot is free.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(
        self,
        num_layers: int,
        num_slots: int,
        kv_heads: int,
        head_dim: int,
        max_len: int,
        dtype: torch.dtype,
        device: torch.device,
        grow_by: int = 256,
    ):
        self.num_layers = num_layers
        self.num_slots = num_slots
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.max_len = max_len
        self.dtype = dtype
        self.device = device
        self.grow_by = grow_by
        self.capacity = 0
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self._resize(min(grow_by, max_len))

    @property
    def bytes_per_token(self) -> int:
        element = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.kv_heads * self.head_dim * element

    @property
    def max_bytes(self) -> int:
        """Memory of the cache grown to ``max_len`` for every slot."""
        return self.bytes_per_token * self.num_slots * self.max_len

    def ensure_capacity(self, num_tokens: int) -> None:
        """Make room for positions ``0..num_tokens-1`` in every slot."""
        if num_tokens <= self.capacity:
            return
        if num_tokens > self.max_len:
            raise ValueError(f"{num_tokens} tokens exceed the cache length {self.max_len}")
        steps = -(-num_tokens // self.grow_by)
        self._resize(min(steps * self.grow_by, self.max_len))

    def release_memory(self) -> None:
        """Shrink back to one growth step (call only when no slot is in use)."""
        if self.capacity > self.grow_by:
            self._resize(min(self.grow_by, self.max_len))

    def _resize(self, capacity: int) -> None:
        shape = (self.num_slots, self.kv_heads, capacity, self.head_dim)
        keep = min(capacity, self.capacity)
        new_k, new_v = [], []
        for layer in range(self.num_layers):
            k = torch.zeros(shape, dtype=self.dtype, device=self.device)
            v = torch.zeros(shape, dtype=self.dtype, device=self.device)
            if keep:
                k[:, :, :keep].copy_(self.k[layer][:, :, :keep])
                v[:, :, :keep].copy_(self.v[layer][:, :, :keep])
                self.k[layer] = self.v[layer] = None  # free the old layer before the next one
            new_k.append(k)
            new_v.append(v)
        self.k, self.v, self.capacity = new_k, new_v, capacity
