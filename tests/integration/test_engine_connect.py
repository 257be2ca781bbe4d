"""LLMEngine.connect: LOADING (and 503s) until the engine process answers, then the engine itself."""

from __future__ import annotations

import threading
import time

import pytest
from fakes.fake_worker import FakeModel, expected_tokens, fake_target
from fakes.tokenizers import byte_level_bpe
from fixtures.waiting import wait_for
from llm_byoc.api.app import create_app
from llm_byoc.config import EngineConfig, ServerConfig
from llm_byoc.engine.llm_engine import LLMEngine
from llm_byoc.engine.remote_core import RemoteCore
from llm_byoc.engine.server import EngineServer
from llm_byoc.errors import EngineNotReady
from llm_byoc.protocol import EngineState, HealthReport, SamplingParams

FAKE = FakeModel(vocab_size=300, step_delay_s=0.005)


def start_server(socket_path: str) -> tuple[EngineServer, threading.Thread]:
    server = EngineServer(EngineConfig(model="/fake-model", max_num_seqs=4), socket_path, fake_target(FAKE))
    server.start()
    runner = threading.Thread(target=server.run)
    runner.start()
    return server, runner


def test_retries_until_the_engine_answers_then_serves(tmp_path):
    socket_path = str(tmp_path / "engine.sock")
    engine = LLMEngine.connect(socket_path, timeout_s=None, tokenizer=byte_level_bpe())  # nothing listens yet
    assert engine.health().state is EngineState.LOADING
    assert "connecting" in engine.health().detail
    with pytest.raises(EngineNotReady):
        engine.submit([[5]], SamplingParams())
    time.sleep(0.3)  # a few failed attempts
    server, runner = start_server(socket_path)
    try:
        wait_for(lambda: engine.health().state is EngineState.READY, timeout_s=20)
        assert engine.generate([[5, 6]], SamplingParams(max_new_tokens=3), timeout_s=10)[0].token_ids == \
            expected_tokens([5, 6], 3, FAKE)
        engine.shutdown()
    finally:
        server.stop()
        runner.join(20)


def test_app_answers_503_fast_while_the_engine_is_unreachable(tmp_path):
    engine = LLMEngine.connect(str(tmp_path / "none.sock"), timeout_s=None)
    client = create_app(engine, ServerConfig()).test_client()
    started = time.monotonic()
    response = client.get("/ping")
    assert response.status_code == 503 and response.get_json()["type"] == "engine_not_ready"
    assert time.monotonic() - started < 0.5
    assert client.post("/invocations", json={"inputs": "a"}).status_code == 503
    assert client.post("/invocations", json={"messages": [{"role": "user", "content": "a"}]}).status_code == 503
    engine.shutdown()


def test_an_engine_that_never_comes_is_dead_after_the_connect_timeout(tmp_path):
    engine = LLMEngine.connect(str(tmp_path / "none.sock"), timeout_s=0.3)
    wait_for(lambda: engine.health().state is EngineState.DEAD, timeout_s=5)
    assert "no engine server" in engine.health().detail
    engine.shutdown()


def test_health_checks_give_a_busy_engine_the_configured_time(tmp_path, monkeypatch):
    asked = []

    def call(self, message, timeout_s, lock_timeout_s=None):
        asked.append(timeout_s)
        return HealthReport(EngineState.LOADING, "busy")

    socket_path = str(tmp_path / "engine.sock")
    server, runner = start_server(socket_path)
    try:
        engine = LLMEngine.connect(socket_path, health_timeout_s=5.0)
        wait_for(lambda: engine._core._channel is not None)
        monkeypatch.setattr(RemoteCore, "_call", call)
        engine.health()
        assert asked == [5.0]
        engine.shutdown()
    finally:
        server.stop()
        runner.join(20)
