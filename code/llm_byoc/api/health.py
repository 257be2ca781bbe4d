"""The engine's health as ``/ping`` reads it: refreshed in the background.

Asking the engine process on every ping puts the ping behind the engine's own
work: its connection handles messages in order, and on a busy 2-core machine
each of the hops (HTTP thread, socket reader, engine reader, engine sender)
waits for a CPU. ``HealthCache`` asks every ``refresh_s`` on a thread of its
own; ``/ping`` answers the latest report without waiting on anything (the
very first ping waits for the first report, at most ``stale_s``).

A gone engine or model worker reads as DEAD at the next refresh (the engine
says so, or its connection is closed), so /ping is a 503 within half a
second. An engine that is merely slow to answer (a CPU starved by other work)
is given ``PROBE_TIMEOUT_S`` before it counts as not answering, and a report
older than ``stale_s`` reads as DEAD: a wedged engine is a 503 within seconds,
a busy one is not reported dead at the moment it is busiest. With
``refresh_s=0`` every call asks the engine (tests).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..protocol import EngineState, HealthReport

log = logging.getLogger(__name__)

REFRESH_S = 0.25
PROBE_TIMEOUT_S = 5.0  # what a health check in the background may wait for the engine
STALE_S = PROBE_TIMEOUT_S + 1.0


class HealthCache:
    def __init__(self, probe: Callable[[], HealthReport], refresh_s: float = REFRESH_S, stale_s: float = STALE_S):
        self._probe = probe
        self._refresh_s = refresh_s
        self._stale_s = stale_s
        self._cond = threading.Condition()
        self._latest: tuple[float, HealthReport] | None = None
        self._thread: threading.Thread | None = None

    def report(self) -> HealthReport:
        if self._refresh_s <= 0:
            return self._ask()
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="health-refresh", daemon=True)
                self._thread.start()
            self._cond.wait_for(lambda: self._latest is not None, self._stale_s)  # the first ping only
            latest = self._latest
        if latest is None:
            return HealthReport(EngineState.DEAD, f"the engine did not answer a health check within {self._stale_s} s")
        at, report = latest
        age = time.monotonic() - at
        if age > self._stale_s:
            return HealthReport(EngineState.DEAD, f"the engine has not answered a health check for {age:.1f} s")
        return report

    def _run(self) -> None:
        while True:
            report = self._ask()
            with self._cond:
                self._latest = (time.monotonic(), report)
                self._cond.notify_all()
            time.sleep(self._refresh_s)

    def _ask(self) -> HealthReport:
        try:
            return self._probe()
        except Exception as exc:  # an engine we cannot even ask is as good as dead
            return HealthReport(EngineState.DEAD, f"engine health check failed: {exc}")
