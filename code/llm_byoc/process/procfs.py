"""A process tree's memory, from /proc (Linux; zeros elsewhere).

RSS counts every page a process maps, shared ones included: processes forked
from one zygote each show the zygote's torch and transformers pages again.
USS (unique set size: private clean + private dirty pages) counts only what is
the process's own, what its exit gives back; PSS splits each shared page among
its sharers. The multi-model budget counts USS per model and the zygote once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Footprint:
    rss: int = 0
    pss: int = 0
    uss: int = 0

    def __add__(self, other: "Footprint") -> "Footprint":
        return Footprint(self.rss + other.rss, self.pss + other.pss, self.uss + other.uss)


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(p) for p in handle.read().split())
    except OSError:
        pass
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc)."""
    tree, queue = [], [pid]
    while queue:
        current = queue.pop()
        tree.append(current)
        queue.extend(_children(current))
    return tree


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks (tells a reused pid apart)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def is_running(pid: int, started: int | None) -> bool:
    """``pid`` is the process that started at ``started`` and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in ("Z", "X") and started is not None and int(fields[19]) == started


def rss(pid: int) -> int:
    """Resident bytes of one process from ``statm`` (the kernel's counters: O(1), where reading
    ``smaps_rollup`` walks every mapping, ~7 ms for a process that has imported torch); 0 if gone."""
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _smaps_rollup(pid: int) -> dict[str, int]:
    """The byte counters of ``/proc/<pid>/smaps_rollup`` (empty if it is gone)."""
    fields = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                    fields[parts[0][:-1]] = int(parts[1]) * 1024
    except OSError:
        pass
    return fields


def huge_page_bytes(pid: int) -> int:
    """Anonymous memory of one process mapped in transparent huge pages (2 MiB on x86-64)."""
    return _smaps_rollup(pid).get("AnonHugePages", 0)


def footprint(pid: int) -> Footprint:
    """RSS, PSS and USS of one process (smaps_rollup); zeros if it is gone."""
    fields = _smaps_rollup(pid)
    if not fields:
        return Footprint()
    uss = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return Footprint(rss=fields.get("Rss", 0), pss=fields.get("Pss", 0), uss=uss)


def tree_footprint(pids: list[int]) -> Footprint:
    total = Footprint()
    for pid in pids:
        total = total + footprint(pid)
    return total


def kill_if_same(pid: int, started: int | None) -> None:
    """SIGKILL ``pid`` unless it is gone or now belongs to another process."""
    if started is None or start_time(pid) != started:
        return
    try:
        os.kill(pid, 9)
    except OSError:
        pass
