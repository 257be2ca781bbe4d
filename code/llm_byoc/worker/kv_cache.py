"""The KV cache's storage: a fixed pool of blocks per layer, allocated once at load.

Layout per layer: keys and values ``[num_blocks * block_size, kv_heads, head_dim]``,
token-major: block ``b`` holds rows ``b*block_size .. (b+1)*block_size - 1`` and
a token's *slot* is ``block * block_size + offset``. (The same memory as
``[num_blocks, block_size, kv_heads, head_dim]``, the layout paged-attention
kernels take.) Which blocks a sequence owns is the engine's business; the worker
only maps block tables onto slots. Block 0 is the null block: zeros, never
written, and the slot every padded gather reads.

On CPU, when the pool's pages are first written (committed, made resident) is
``commit`` (``LLM_BYOC_KV_CACHE_COMMIT``):

* ``ahead`` (the single-model default): the pool is only reserved at load; a
  background thread (``worker/kv_commit.py``) writes its pages a chunk at a
  time, always ahead of the highest block a step has used, so memory at rest
  is the weights plus one chunk, grows with what traffic uses, and no step
  takes a page fault on the pool. The engine hands out never-used blocks in
  ascending order (``engine/block_pool.py``), so "ahead" is one frontier. A
  step that reaches past it (a burst faster than the thread) waits for it.
* ``load``: every page written once at load (a 4.4 GiB pool: 3.7-21 s on this
  project's VMs, before ``/ping`` turns 200); the memory is the process's from
  the start, so a host that overcommits cannot fail a step later.
* ``lazy``: pages are committed by the steps that first write them (page
  faults inside steps). The multi-model mode's default: its model manager
  measures each model as it grows and evicts under the budget.

A pool committed ``ahead`` or at ``load`` first asks Linux for transparent
huge pages (``madvise`` ``MADV_HUGEPAGE``, taken where
``/sys/kernel/mm/transparent_hugepage/enabled`` is ``always`` or ``madvise``): a
decode step gathers its rows' blocks from all over the pool, and in 4 KiB pages
nearly every block is a TLB miss. Decode steps of 16 rows on SmolLM2-135M ran
1-2% faster (``benchmarks/kv_huge_pages_ab.py``); writing pages takes longer
(``huge_pages=False``, ``LLM_BYOC_KV_CACHE_HUGE_PAGES=false``, keeps 4 KiB pages).
A lazy pool is not advised: its first touches, inside steps, would each zero
(and may compact) 2 MiB.

On CUDA the allocation itself commits. Nothing is ever resized, so a step
cannot fail half-way through reallocating the cache.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
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
        commit: str = "lazy",  # CPU: "ahead", "load" or "lazy" (see above)
        huge_pages: bool = True,  # CPU, a pool committed ahead or at load: ask for transparent huge pages first
    ):
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (num_blocks * block_size, kv_heads, head_dim)
        aligned = device.type == "cpu" and commit != "lazy"
        try:
            self.k = [_empty(shape, dtype, device, aligned) for _ in range(num_layers)]
            self.v = [_empty(shape, dtype, device, aligned) for _ in range(num_layers)]
        except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            self.k = self.v = []
            raise ModelLoadError(f"cannot allocate the KV cache ({num_blocks} blocks of {block_size}): {exc}") from None
        self.commit = commit if device.type == "cpu" else "load"  # elsewhere the allocation itself commits
        if self.commit != "lazy" and device.type == "cpu" and huge_pages:
            head = huge_page_size() if self.commit == "ahead" else 0  # kv_commit.py: the head is written in 4 KiB pages
            for layer in self.k + self.v:
                advise_huge_pages(layer, skip=head)
        if self.commit == "load" and device.type == "cpu":
            self._commit_all(huge_pages)
        else:
            for layer in self.k + self.v:
                layer[:block_size].zero_()  # the null block

    def _commit_all(self, huge_pages: bool) -> None:
        """Write every page of the pool once (zeros: the null block's contents, and harmless elsewhere)."""
        log.info("KV cache: committing %.2f GiB at load (%s=ahead commits it in the background as it is used)",
                 self.total_bytes / 1024**3, ENV_KV_CACHE_COMMIT)
        started, huge_before = time.perf_counter(), huge_page_bytes(os.getpid())
        for layer in self.k + self.v:
            layer.zero_()
        log.info("KV cache: committed in %.1f s, %.2f GiB of it in transparent huge pages (%s=%s)",
                 time.perf_counter() - started, (huge_page_bytes(os.getpid()) - huge_before) / 1024**3,
                 ENV_KV_CACHE_HUGE_PAGES, str(huge_pages).lower())

    @property
    def total_bytes(self) -> int:
        return sum(layer.numel() * layer.element_size() for layer in self.k + self.v)

    @property
    def block_bytes(self) -> int:
        """One block's bytes in one layer's keys (or values)."""
        return self.k[0][: self.block_size].numel() * self.k[0].element_size() if self.k else 0

    @property
    def tensor_bytes(self) -> int:
        """One layer's keys (or values)."""
        return self.k[0].numel() * self.k[0].element_size() if self.k else 0

    def write_zeros(self, start: int, end: int) -> None:
        """Zero bytes ``[start, end)`` of every layer's keys and values with memset: no torch threads, no GIL
        (the caller may be a background thread while a step runs on other blocks)."""
        for layer in self.k + self.v:
            _memset()(layer.data_ptr() + start, 0, end - start)

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size


def _empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, aligned: bool) -> torch.Tensor:
    """``torch.empty``; ``aligned``: starting on a huge page boundary (a view into a slightly larger
    allocation), so a pool committed a huge page at a time holds no partly used page."""
    if not aligned:
        return torch.empty(shape, dtype=dtype, device=device)
    element, numel = torch.empty((), dtype=dtype).element_size(), math.prod(shape)
    pad = huge_page_size() // element
    base = torch.empty(numel + pad, dtype=dtype, device=device)
    offset = (-base.data_ptr() % huge_page_size()) // element
    return base[offset: offset + numel].view(shape)


@functools.cache
def _libc():
    return ctypes.CDLL(None, use_errno=True)


@functools.cache
def _memset():
    memset = _libc().memset  # ctypes lets go of the GIL for the call
    memset.argtypes, memset.restype = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t], ctypes.c_void_p
    return memset


@functools.cache
def huge_page_size() -> int:
    try:  # 2 MiB on x86-64; 512 MiB on arm64 with 64 KiB base pages
        return int(Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return 2 << 20


@functools.cache
def _madvise():
    madvise = _libc().madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return madvise


def advise_huge_pages(tensor: torch.Tensor, skip: int = 0) -> bool:
    """Ask the kernel to back the huge-page-aligned interior of a CPU tensor's memory (past its first
    ``skip`` bytes), not yet touched, with transparent huge pages. False where it cannot be asked (not
    Linux, too small)."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)  # Linux only
    if advice is None or tensor.device.type != "cpu":
        return False
    size = huge_page_size()
    start = tensor.data_ptr() + skip
    end = start + tensor.numel() * tensor.element_size()
    lo, hi = -(-start // size) * size, end // size * size
    return hi > lo and _madvise()(lo, hi - lo, advice) == 0
