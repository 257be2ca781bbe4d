"""The container's memory: cgroup v1/v2 limits and usage, MemAvailable."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

import pytest
from fixtures import machine

from llm_byoc import memory


def test_cgroup_v2_limit_and_usage_less_reclaimable_cache(tmp_path):
    (tmp_path / "memory.max").write_text("8589934592\n")
    (tmp_path / "memory.current").write_text("3221225472\n")
    (tmp_path / "memory.stat").write_text("anon 2147483648\ninactive_file 1073741824\n")
    assert memory.cgroup_memory_limit(tmp_path) == 8 * 1024**3
    assert memory.cgroup_memory_usage(tmp_path) == 2 * 1024**3


def test_cgroup_v2_without_a_limit(tmp_path):
    (tmp_path / "memory.max").write_text("max\n")
    assert memory.cgroup_memory_limit(tmp_path) is None
    assert memory.container_memory(tmp_path) == memory.physical_memory()


def test_cgroup_v1_unlimited_is_no_limit(tmp_path):
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(str(9223372036854771712))
    assert memory.cgroup_memory_limit(tmp_path) is None
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(str(2 * 1024**3))
    assert memory.cgroup_memory_limit(tmp_path) == 2 * 1024**3
    assert memory.container_memory(tmp_path) == min(2 * 1024**3, memory.physical_memory())


def test_available_memory_is_below_both_the_limit_and_memavailable(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable:    4194304 kB\n")
    (tmp_path / "memory.max").write_text(str(3 * 1024**3))
    (tmp_path / "memory.current").write_text(str(2 * 1024**3))
    assert memory.mem_available(meminfo) == 4 * 1024**3
    assert memory.available_memory(tmp_path, meminfo) == 1024**3
    (tmp_path / "memory.max").write_text("max")
    assert memory.available_memory(tmp_path, meminfo) == 4 * 1024**3


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason=machine.lacks("glibc's malloc_trim (Linux)"))
def test_release_free_heap_gives_freed_heap_memory_back():
    """64 MiB of heap chunks freed between live ones: freeing keeps them resident, trimming does not."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]

    def resident_mib() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20

    chunks, pins = [], []
    for _ in range(1024):
        chunks.append(libc.malloc(65536))
        ctypes.memset(chunks[-1], 1, 65536)
        pins.append(libc.malloc(65536))  # keeps the freed chunks from being the heap's top
    for chunk in chunks:
        libc.free(chunk)
    freed = resident_mib()
    assert memory.release_free_heap()
    assert resident_mib() < freed - 32
    for pin in pins:
        libc.free(pin)
