"""How much memory this container has and has left: its cgroup limit, else the machine's.

``docker run --memory`` and SageMaker's instance sizes both show up as a cgroup
limit; /proc/meminfo inside a container still describes the whole host, so a
share "of the memory" must be taken of the limit when there is one.
"""

from __future__ import annotations

import os
from pathlib import Path

from .cpu import CGROUP_ROOT

_UNLIMITED = 1 << 60  # cgroup v1 reports "no limit" as a huge page-aligned number


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def cgroup_memory_limit(root: Path = CGROUP_ROOT) -> int | None:
    """The container's memory limit in bytes (cgroup v2 ``memory.max`` or v1), or None."""
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        value = _read_int(path)
        if value is not None:
            return None if value >= _UNLIMITED else value
    return None


def cgroup_memory_usage(root: Path = CGROUP_ROOT) -> int | None:
    """Bytes the container uses, less the page cache the kernel can drop (inactive files)."""
    for folder, usage_file in ((root, "memory.current"), (root / "memory", "memory.usage_in_bytes")):
        value = _read_int(folder / usage_file)
        if value is not None:
            return max(0, value - _inactive_file(folder / "memory.stat"))
    return None


def _inactive_file(stat: Path) -> int:
    try:
        for line in stat.read_text().splitlines():
            key, _, number = line.partition(" ")
            if key in ("inactive_file", "total_inactive_file"):
                return int(number)
    except (OSError, ValueError):
        pass
    return 0


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


def mem_available(meminfo: Path = Path("/proc/meminfo")) -> int:
    """The kernel's estimate of memory available without swapping (MemAvailable)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return physical_memory()


def container_memory(root: Path = CGROUP_ROOT) -> int:
    """The memory this container may use in all: its limit, else the machine's RAM."""
    limit = cgroup_memory_limit(root)
    return min(limit, physical_memory()) if limit is not None else physical_memory()


def available_memory(root: Path = CGROUP_ROOT, meminfo: Path = Path("/proc/meminfo")) -> int:
    """What this container can still take: below its limit and what the machine has free."""
    available = mem_available(meminfo)
    limit, usage = cgroup_memory_limit(root), cgroup_memory_usage(root)
    if limit is not None and usage is not None:
        available = min(available, max(0, limit - usage))
    return available


def release_free_heap() -> bool:
    """Hand the C allocator's free memory back to the system (glibc's ``malloc_trim``): what a load freed (a
    rotated int8 load's float32 copies: SmolLM2-135M rests at 555 MiB instead of 617-709) stops counting as
    the process's memory. False where the C library has no ``malloc_trim`` (musl, macOS)."""
    import ctypes
    import ctypes.util

    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True
