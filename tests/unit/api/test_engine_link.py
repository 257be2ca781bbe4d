"""EngineLink: LOADING (and 503s) until the engine answers, then delegation."""

from __future__ import annotations

import time

import pytest
from fakes.fake_engine import FakeEngine
from fixtures.waiting import wait_for
from llm_byoc.api.app import create_app
from llm_byoc.api.engine_link import EngineLink
from llm_byoc.config import ServerConfig
from llm_byoc.errors import EngineNotReady
from llm_byoc.protocol import EngineState, SamplingParams


def test_retries_until_the_engine_answers_then_delegates():
    engine = FakeEngine()
    attempts = []

    def connect():
        attempts.append(1)
        if len(attempts) < 3:
            raise FileNotFoundError("no socket yet")
        return engine

    link = EngineLink(connect, "/tmp/x.sock", retry_interval_s=0.01)
    assert link.health().state is EngineState.LOADING
    with pytest.raises(EngineNotReady):
        link.submit(["a"], SamplingParams())
    engine.state = EngineState.LOADING
    link.start()
    wait_for(lambda: link.connected)
    assert len(attempts) == 3
    assert link.health().state is EngineState.LOADING
    engine.state = EngineState.READY
    wait_for(lambda: link.health().state is EngineState.READY)
    assert link.tokenizer is engine.tokenizer
    assert link.submit(["ab"], SamplingParams()).result()[0].text == "ba"
    link.shutdown()
    assert engine.shut_down


def test_app_answers_503_fast_while_the_engine_is_unreachable():
    def never():
        raise ConnectionRefusedError("refused")

    link = EngineLink(never, "/tmp/none.sock", retry_interval_s=0.05).start()
    client = create_app(link, ServerConfig()).test_client()
    started = time.monotonic()
    response = client.get("/ping")
    assert response.status_code == 503 and response.get_json()["type"] == "engine_not_ready"
    assert time.monotonic() - started < 0.5
    assert client.post("/invocations", json={"inputs": "a"}).status_code == 503
    assert client.post("/invocations", json={"messages": [{"role": "user", "content": "a"}]}).status_code == 503
    link.shutdown()


def test_health_checks_give_a_busy_engine_the_configured_time():
    asked = []

    class Engine(FakeEngine):
        def health(self, timeout_s=None):
            asked.append(timeout_s)
            return super().health()

    link = EngineLink(lambda: Engine(), "/tmp/x.sock", retry_interval_s=0.01, health_timeout_s=5.0).start()
    wait_for(lambda: link.health().state is EngineState.READY)
    assert set(asked) == {5.0}
    link.shutdown()
