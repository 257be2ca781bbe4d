"""The engine server over its socket, with the fake model worker."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fakes.fake_worker import FakeModel, expected_tokens, fake_target
from fakes.tokenizers import byte_level_bpe
from llm_byoc.config import EngineConfig
from llm_byoc.engine import engine_socket
from llm_byoc.engine.llm_engine import LLMEngine
from llm_byoc.engine.server import EngineServer
from llm_byoc.errors import EngineDead, InvalidRequest, QueueFull
from llm_byoc.protocol import EngineState, FinishReason, SamplingParams

TESTS_DIR = Path(__file__).resolve().parents[1]
FAKE = FakeModel(vocab_size=300, step_delay_s=0.005)


@pytest.fixture
def socket_path(tmp_path):
    return str(tmp_path / "engine.sock")


@pytest.fixture
def server(socket_path):
    srv = EngineServer(EngineConfig(model="/fake-model", max_num_seqs=4, max_waiting=2), socket_path, fake_target(FAKE))
    srv.start()
    exit_codes = []
    runner = threading.Thread(target=lambda: exit_codes.append(srv.run()))
    runner.start()
    yield srv
    srv.stop()
    runner.join(20)
    assert exit_codes == [0]


def connect(socket_path: str) -> LLMEngine:
    engine = LLMEngine.connect(socket_path, timeout_s=10, tokenizer=byte_level_bpe())
    engine.wait_ready(timeout_s=20)
    return engine


def test_two_front_ends_share_one_engine(server, socket_path):
    a, b = connect(socket_path), connect(socket_path)
    assert oct(stat.S_IMODE(os.stat(engine_socket.key_path(socket_path)).st_mode)) == "0o600"
    try:
        handles = [a.submit([[5, 6], [7]], SamplingParams(max_new_tokens=5)), b.submit([[9, 9, 9]], SamplingParams(max_new_tokens=4))]
        ra, rb = (h.result(timeout_s=10) for h in handles)
        assert [r.token_ids for r in ra] == [expected_tokens([5, 6], 5, FAKE), expected_tokens([7], 5, FAKE)]
        assert rb[0].token_ids == expected_tokens([9, 9, 9], 4, FAKE)
        health = a.health()
        assert health.state is EngineState.READY and health.info.model_path == "/fake-model"
        assert a.engine_metrics() == ""  # our engine's figures travel in health; vLLM's own series here
    finally:
        a.shutdown()
        b.shutdown()


def test_refusals_come_back_as_typed_errors(server, socket_path):
    """A submit does not wait for the engine: its refusal is the first thing its stream says."""
    engine = connect(socket_path)
    try:
        with pytest.raises(InvalidRequest, match="max_new_tokens"):
            engine.submit([[5]], SamplingParams(max_new_tokens=100_000)).result(timeout_s=10)
        long = engine.submit([[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12]], SamplingParams(max_new_tokens=1000))
        with pytest.raises(QueueFull):
            engine.submit([[5]], SamplingParams(max_new_tokens=3)).result(timeout_s=10)
        long.abort()
        results = engine.generate([[5]], SamplingParams(max_new_tokens=3), timeout_s=10)
        assert results[0].finish_reason is FinishReason.LENGTH
    finally:
        engine.shutdown()


def test_a_dropped_front_end_has_its_sequences_aborted(server, socket_path):
    quitter, stayer = connect(socket_path), connect(socket_path)
    try:
        handle = quitter.submit([[5, 6]], SamplingParams(max_new_tokens=2000))
        events = handle.events(timeout_s=5)
        next(events)
        quitter.shutdown()
        with pytest.raises(EngineDead):
            list(events)
        deadline = time.monotonic() + 5
        while stayer.health().num_running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stayer.health().num_running == 0
    finally:
        stayer.shutdown()


def run_server_process(socket_path: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-m", "fakes.fake_engine_server", socket_path, *args], env=env)


def test_sigterm_stops_the_server_with_exit_code_0(socket_path):
    process = run_server_process(socket_path)
    try:
        engine = connect(socket_path)
        assert engine.generate([[5]], SamplingParams(max_new_tokens=2), timeout_s=10)[0].completion_tokens == 2
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        assert engine.health().state is EngineState.DEAD
        assert not os.path.exists(socket_path)
    finally:
        process.kill()


def test_worker_death_fails_everything_and_the_server_exits_nonzero(socket_path):
    process = run_server_process(socket_path, "--crash-after-steps", "5", "--step-delay", "0.01")
    try:
        engine = connect(socket_path)
        handle = engine.submit([[5], [6]], SamplingParams(max_new_tokens=100))
        with pytest.raises(EngineDead):
            handle.result(timeout_s=10)
        assert process.wait(timeout=20) != 0
    finally:
        process.kill()
