"""The paged KV cache's storage: layout, the null block, committed or lazy memory, huge pages, a failed allocation."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from fixtures import machine
from llm_byoc.errors import ModelLoadError
from llm_byoc.worker.kv_cache import NULL_SLOT, PagedKVCache, advise_huge_pages


def test_layout_is_token_major_blocks_with_a_zero_null_block():
    cache = PagedKVCache(num_layers=2, num_blocks=5, block_size=4, kv_heads=3, head_dim=8,
                         dtype=torch.float32, device=torch.device("cpu"))
    assert len(cache.k) == len(cache.v) == 2 and cache.num_slots == 20
    assert cache.k[0].shape == (20, 3, 8)
    assert NULL_SLOT == 0
    for layer in cache.k + cache.v:
        assert bool((layer[:4] == 0).all())  # block 0: the null block


_MEASURE = """
import os, sys, torch
from llm_byoc.process.procfs import rss
from llm_byoc.worker.kv_cache import PagedKVCache

before = rss(os.getpid())
cache = PagedKVCache(num_layers=2, num_blocks=1024, block_size=16, kv_heads=4, head_dim=64,
                     dtype=torch.float32, device=torch.device("cpu"), commit=sys.argv[1])
grown = rss(os.getpid()) - before
assert all(bool((layer[:16] == 0).all()) for layer in cache.k + cache.v)  # the null block, either way
print(grown)
"""


def _in_a_fresh_process(script: str, argument: str) -> str:
    """``script``'s output, run with ``argument`` in a new interpreter: a long-lived one may hand a pool memory
    that earlier tests made resident, or advised."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run([sys.executable, "-c", script, argument], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("commit", ["load", "ahead", "lazy"])
def test_a_pool_committed_at_load_is_resident_from_the_start_the_others_are_not(commit):
    pool_bytes = 2 * 2 * 1024 * 16 * 4 * 64 * 4  # 2 layers x k/v x 1024 blocks x 16 tokens x 4 heads x 64 x fp32
    grown = int(_in_a_fresh_process(_MEASURE, commit).split()[-1])
    if commit == "load":
        assert grown >= 0.9 * pool_bytes
    else:  # only the null block's pages were written (ahead: the committer writes the rest, kv_commit.py)
        assert grown < 0.25 * pool_bytes


_ADVISED = """
import sys, torch
from llm_byoc.worker.kv_cache import PagedKVCache


def vm_flags(address):
    inside = False
    with open("/proc/self/smaps") as handle:
        for line in handle:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(part, 16) for part in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]


cache = PagedKVCache(num_layers=2, num_blocks=512, block_size=16, kv_heads=4, head_dim=64,  # 8 MiB per layer
                     dtype=torch.float32, device=torch.device("cpu"), commit=sys.argv[1].removesuffix("-4k"),
                     huge_pages=not sys.argv[1].endswith("-4k"))
print(" ".join(str("hg" in vm_flags(t.data_ptr() + t.numel() * t.element_size() // 2)) for t in cache.k + cache.v))
"""


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage"), reason=machine.lacks("transparent huge pages (a kernel setting)"))
@pytest.mark.parametrize("pool, advised", [("load", True), ("ahead", True), ("lazy", False), ("load-4k", False),
                                           ("ahead-4k", False)])
def test_a_committed_pool_asks_for_huge_pages_unless_told_not_to_a_lazy_one_never(pool, advised):
    # the advice (VmFlags "hg"), not the pages: whether the kernel finds free 2 MiB pages depends on the host
    assert _in_a_fresh_process(_ADVISED, pool).split() == [str(advised)] * 4


def test_a_tensor_smaller_than_a_huge_page_is_not_advised():
    assert advise_huge_pages(torch.empty(1024)) is False


def test_an_allocation_that_cannot_be_made_is_a_load_error():
    with pytest.raises(ModelLoadError, match="cannot allocate the KV cache"):
        PagedKVCache(num_layers=1, num_blocks=2**40, block_size=16, kv_heads=8, head_dim=128,
                     dtype=torch.float32, device=torch.device("cpu"))
