"""The KV cache's storage: a fixed pool of blocks per layer, allocated once at load.

Layout per layer: keys and values ``[num_blocks * block_size, kv_heads, head_dim]``,
token-major: block ``b`` holds rows ``b*block_size .. (b+1)*block_size - 1`` and
a token's *slot* is ``block * block_size + offset``. (The same memory as
``[num_blocks, block_size, kv_heads, head_dim]``, the layout paged-attention
kernels take.) Which blocks a sequence owns is the engine's business; the worker
only maps block tables onto slots. Block 0 is the null block: zeros, never
written, and the slot every padded gather reads.

On CPU the pool is committed at load (``commit``, the default of the
single-model server): every page is written once, so the memory is the
process's from the start and a step never takes a page fault on it. A pool
left to ``torch.empty`` is only reserved; its pages are committed as blocks
are first written, and a prefix cache walks through the whole pool before it
reuses a block: on this project's VM, W1 (no sharing) with caching on ran at
0.84x of caching off with a lazy pool, 0.96-0.99x with a committed one (README,
the KV cache benchmarks). And a host that overcommits could kill the
process in the middle of a step for memory it had been promised at load.
vLLM, too, zeroes its KV tensors at load. The cost is paid once:
writing the pages takes time at load (logged; on a VM whose host backs guest
memory lazily, seconds per GiB). The multi-model mode leaves pools lazy: its
model manager measures each model as it grows and evicts under the budget.

A committed pool first asks Linux for transparent huge pages (``madvise``
``MADV_HUGEPAGE``, taken where ``/sys/kernel/mm/transparent_hugepage/enabled``
is ``always`` or ``madvise``): a decode step gathers its rows' blocks from all
over the pool, and in 4 KiB pages nearly every block is a TLB miss. Decode
steps of 16 rows on SmolLM2-135M ran 1-2% faster (``benchmarks/kv_huge_pages_ab.py``);
the zeroing at load is slower (3 GiB on this project's VM: 7 s against 1 s;
``huge_pages=False``, ``LLM_BYOC_KV_CACHE_HUGE_PAGES=false``, keeps 4 KiB pages).
A lazy pool is not advised: its first touches, inside steps, would each zero
(and may compact) 2 MiB.

On CUDA the allocation itself commits. Nothing is ever resized, so a step
cannot fail half-way through reallocating the cache.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import mmap
import os
import time
from pathlib import Path

import torch

from ..config import ENV_KV_CACHE_COMMIT, ENV_KV_CACHE_HUGE_PAGES
from ..errors import ModelLoadError
from ..process.procfs import huge_page_bytes

log = logging.getLogger(__name__)
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
        commit: bool = False,
        huge_pages: bool = True,  # a committed pool on CPU: ask for transparent huge pages first
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
        if commit and device.type == "cpu":
            self._commit(huge_pages)
        else:
            for layer in self.k + self.v:
                layer[:block_size].zero_()  # the null block

    def _commit(self, huge_pages: bool) -> None:
        """Write every page of the pool once (zeros: the null block's contents, and harmless elsewhere),
        in huge pages where asked and the kernel offers them."""
        total = sum(layer.numel() * layer.element_size() for layer in self.k + self.v)
        log.info("KV cache: committing %.2f GiB (%s=false leaves it lazy)", total / 1024**3, ENV_KV_CACHE_COMMIT)
        started, huge_before = time.perf_counter(), huge_page_bytes(os.getpid())
        for layer in self.k + self.v:
            if huge_pages:
                advise_huge_pages(layer)
            layer.zero_()
        log.info("KV cache: committed in %.1f s, %.2f GiB of it in transparent huge pages (%s=false: none)",
                 time.perf_counter() - started, (huge_page_bytes(os.getpid()) - huge_before) / 1024**3,
                 ENV_KV_CACHE_HUGE_PAGES)

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size


@functools.cache
def _huge_page_size() -> int:
    try:  # 2 MiB on x86-64; 512 MiB on arm64 with 64 KiB base pages
        return int(Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return 2 << 20


@functools.cache
def _madvise():
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return madvise


def advise_huge_pages(tensor: torch.Tensor) -> bool:
    """Ask the kernel to back the huge-page-aligned interior of a CPU tensor's memory, not yet
    touched, with transparent huge pages. False where it cannot be asked (not Linux, too small)."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)  # Linux only
    if advice is None or tensor.device.type != "cpu":
        return False
    size = _huge_page_size()
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    lo, hi = -(-start // size) * size, end // size * size
    return hi > lo and _madvise()(lo, hi - lo, advice) == 0
