"""How many torch threads the next step may use: the configured count, less the cores others keep busy.

A step's OpenMP threads meet at a barrier after every operator. When another
process keeps one of the cores busy, the thread that shares that core gets a
slice of it (a tenth at the model worker's nice 10) and the other waits for it
at every barrier: measured on the 2-core dev VM with one busy loop beside the
server (SmolLM2-135M, fp32, one client), inter-token latency went from 42 ms
to 465 ms at 2 threads, while llama-server beside the same loop kept 47 ms.
One thread on the core that is free does not wait for anyone.

So before each step the worker looks at the CPUs it may run on: over the last
``window_s``, how many core-seconds did they spend busy (``/proc/stat``) that
were not this process's own (``time.process_time``, every thread)? Others
busy for ``b`` cores leave ``free = cpus - b`` for us; the budget is
``round(free)``, between 1 and the configured count, changed only when
``free`` is more than ``HYSTERESIS`` past the half-way point (no flapping
on noise). Reading both costs ~30 us; it is read at
most once a window. ``LLM_BYOC_THREADS_ADAPT=0`` keeps the configured count.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from ..cpu import affinity

log = logging.getLogger(__name__)

WINDOW_S = 0.5
HYSTERESIS = 0.15  # cores


def _clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        return 100


def read_busy_seconds(cpus: frozenset[int], stat: Path = Path("/proc/stat"), ticks: int = 0) -> float | None:
    """Seconds ``cpus`` have spent busy since boot (user, nice, system, irq, softirq, steal), or None
    where there is no /proc/stat. Idle and iowait are not busy."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    ticks = ticks or _clock_ticks()
    busy = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        fields = [int(v) for v in rest.split()]
        busy += sum(fields[:8]) - fields[3] - fields[4]  # all of the first eight, less idle and iowait
    return busy / ticks


class ThreadBudget:
    """``threads()`` before each step: the count to use now (and ``torch.set_num_threads`` it)."""

    def __init__(self, configured: int, cpus: frozenset[int] | None = None, window_s: float = WINDOW_S,
                 read_busy: Callable[[], float | None] | None = None,
                 own_seconds: Callable[[], float] = time.process_time, clock: Callable[[], float] = time.monotonic,
                 apply: Callable[[int], None] | None = None):
        self.configured = max(1, configured)
        self.cpus = cpus if cpus is not None else affinity()
        self.window_s = window_s
        self._read_busy = read_busy or (lambda: read_busy_seconds(self.cpus))
        self._own, self._clock, self._apply = own_seconds, clock, apply
        self.current = self.configured
        self._mark = self._sample()

    def _sample(self) -> tuple[float, float | None, float]:
        return self._clock(), self._read_busy(), self._own()

    def others_busy(self, now: tuple[float, float | None, float]) -> float | None:
        """Cores others kept busy since the last mark (None: unknown)."""
        (t0, busy0, own0), (t1, busy1, own1) = self._mark, now
        if busy0 is None or busy1 is None or t1 <= t0:
            return None
        return max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)

    def threads(self) -> int:
        if self.configured == 1:
            return 1
        if self._clock() - self._mark[0] < self.window_s:
            return self.current
        now = self._sample()
        others = self.others_busy(now)
        self._mark = now
        if others is None:
            return self.current
        free = len(self.cpus) - others
        wanted = min(self.configured, max(1, round(free)))
        if wanted != self.current and abs(free - self.current) > 0.5 + HYSTERESIS:
            log.debug("others keep %.2f of %d cores busy: %d torch threads (was %d)",
                      others, len(self.cpus), wanted, self.current)
            self.current = wanted
            if self._apply is not None:
                self._apply(wanted)
        return self.current
