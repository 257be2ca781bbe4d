"""HealthCache: /ping reads a report refreshed in the background and never waits on the engine."""

from __future__ import annotations

import threading
import time

from fixtures.waiting import wait_for
from llm_byoc.api.health import HealthCache
from llm_byoc.protocol import EngineState, HealthReport


def test_reports_come_from_the_cache_and_follow_the_engine():
    state = {"now": EngineState.READY}
    calls = []

    def probe():
        calls.append(1)
        return HealthReport(state["now"], "x")

    cache = HealthCache(probe, refresh_s=0.02, stale_s=1.0)
    assert cache.report().state is EngineState.READY
    state["now"] = EngineState.DEAD
    wait_for(lambda: cache.report().state is EngineState.DEAD)
    assert len(calls) > 1


def test_a_slow_engine_does_not_slow_the_ping_and_reads_dead_once_stale():
    release = threading.Event()
    answers = iter([HealthReport(EngineState.READY, "ok")])

    def probe():
        report = next(answers, None)
        if report is None:
            release.wait(10)  # the engine stops answering
            return HealthReport(EngineState.READY, "late")
        return report

    cache = HealthCache(probe, refresh_s=0.01, stale_s=0.3)
    assert cache.report().state is EngineState.READY
    started = time.monotonic()
    assert cache.report().state is EngineState.READY and time.monotonic() - started < 0.05
    wait_for(lambda: cache.report().state is EngineState.DEAD)
    assert "has not answered" in cache.report().detail
    release.set()


def test_a_probe_that_raises_is_a_dead_engine():
    def probe():
        raise ConnectionError("gone")

    assert HealthCache(probe, refresh_s=0).report().state is EngineState.DEAD
