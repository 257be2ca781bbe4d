"""The real `serve` as a subprocess, without Docker: engine process + gunicorn."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from fixtures.sse_events import iter_sse_payloads, sse_payloads
from serve_helpers import STARTUP_S, Server, children_of, started, wait_for_ping

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tiny_llama_dir, tmp_path_factory):
    server = started(Server(
        tiny_llama_dir,
        tmp_path_factory.mktemp("serve") / "serve.log",
        LLM_BYOC_GRACEFUL_TIMEOUT="30",
        SAGEMAKER_MODEL_SERVER_WORKERS="2",  # two HTTP workers share the one engine
    ), consecutive=10)  # each HTTP worker connects to the engine on its own
    yield server
    server.stop()


def post(server, body, stream=False, **kwargs):
    return requests.post(f"{server.url}/invocations", json=body, stream=stream, timeout=120, **kwargs)


def test_ping_and_execution_parameters(server):
    assert requests.get(f"{server.url}/ping", timeout=2).status_code == 200
    params = requests.get(f"{server.url}/execution-parameters", timeout=2).json()
    assert params["BatchStrategy"] == "SINGLE_RECORD" and params["MaxPayloadInMB"] == 6


def test_one_engine_behind_two_http_workers(server):
    children = children_of(server.proc.pid)
    engines = [pid for pid, cmd in children.items() if "llm_byoc.engine.server" in cmd]
    masters = [pid for pid, cmd in children.items() if "gunicorn" in cmd]
    assert len(engines) == 1 and len(masters) == 1
    assert len(children_of(masters[0])) == 2
    # whichever worker takes a connection, it is connected to the engine (each warms its tokenizer on its
    # own: a worker that took no connection yet may still say 503 for a moment, so: 20 in a row, soon)
    wait_for_ping(server.url, 60, server.proc, consecutive=20)


def test_tgi_plain_and_streamed(server):
    body = {"inputs": ["Hello", "The weather"], "parameters": {"max_new_tokens": 8}}
    plain = post(server, body)
    assert plain.status_code == 200
    texts = [o["generated_text"] for o in plain.json()]
    with post(server, {**body, "stream": True}, stream=True) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers.get("Transfer-Encoding") == "chunked"
        events = sse_payloads(response)
    finals = {e["index"]: e["generated_text"] for e in events if e["generated_text"] is not None}
    assert [finals[0], finals[1]] == texts


def test_openai_plain_and_streamed(server):
    chat = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "temperature": 0}
    plain = post(server, chat).json()
    assert plain["object"] == "chat.completion" and plain["usage"]["completion_tokens"] <= 6
    with post(server, {**chat, "stream": True}, stream=True) as response:
        events = sse_payloads(response)
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]) == plain["choices"][0]["message"]["content"]
    completion = post(server, {"prompt": "Hello", "max_tokens": 4, "temperature": 0}).json()
    assert completion["object"] == "text_completion"


def test_bad_requests(server):
    response = post(server, {"inputs": "x", "parameters": {"max_new_tokens": "many"}})
    assert response.status_code == 400 and response.json()["type"] == "invalid_request"
    response = requests.post(f"{server.url}/invocations", data="hello", headers={"Content-Type": "text/plain"}, timeout=10)
    assert response.status_code == 415
    response = requests.post(
        f"{server.url}/invocations", data=b"x" * (7 * 1024 * 1024), headers={"Content-Type": "application/json"}, timeout=30
    )
    assert response.status_code == 413
    assert requests.get(f"{server.url}/ping", timeout=2).status_code == 200


def test_64_concurrent_streams_all_complete(server):
    def one(i: int) -> tuple[int, str]:
        body = {"inputs": f"Stream number {i}", "stream": True, "parameters": {"max_new_tokens": 12, "ignore_eos": True}}
        with post(server, body, stream=True) as response:
            events = sse_payloads(response)
        final = events[-1]
        return final["details"]["generated_tokens"], final["generated_text"]

    started = time.monotonic()
    with ThreadPoolExecutor(64) as pool:
        futures = [pool.submit(one, i) for i in range(64)]
        ping_started = time.monotonic()  # /ping stays fast while every thread streams
        assert requests.get(f"{server.url}/ping", timeout=2).status_code == 200
        assert time.monotonic() - ping_started < 2
        results = [f.result() for f in futures]
    assert [tokens for tokens, _ in results] == [12] * 64
    print(f"64 streams x 12 tokens in {time.monotonic() - started:.1f} s")


def test_sigterm_lets_the_inflight_stream_finish_then_exits_0(server):
    body = {"inputs": "A long story", "stream": True, "parameters": {"max_new_tokens": 150, "ignore_eos": True}}
    events: list = []

    def read():  # event by event, so SIGTERM below lands while the stream is still going
        with post(server, body, stream=True) as response:
            for event in iter_sse_payloads(response.iter_content(chunk_size=None)):
                events.append(event)

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 30
    while not events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert events, "the stream never started"
    assert len(events) < 150, "the stream ended before SIGTERM: nothing drained"
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(90) == 0, server.log()
    reader.join(10)
    assert events[-1]["details"]["generated_tokens"] == 150, events[-1]


def _ping_until_exit(server, timeout_s: float, interval_s: float) -> set:
    """The /ping statuses ("refused" for no connection) seen until serve exits or ``timeout_s`` passes."""
    statuses = set()
    deadline = time.monotonic() + timeout_s
    while server.proc.poll() is None and time.monotonic() < deadline:
        try:
            statuses.add(requests.get(f"{server.url}/ping", timeout=2).status_code)
        except requests.ConnectionError:
            statuses.add("refused")
        time.sleep(interval_s)
    return statuses


def test_engine_death_fails_ping_and_serve_exits_non_zero(tiny_llama_dir, tmp_path):
    server = Server(tiny_llama_dir, tmp_path / "serve.log")
    try:
        wait_for_ping(server.url, STARTUP_S, server.proc)
        os.kill(server.engine_pid(), signal.SIGKILL)
        statuses = _ping_until_exit(server, 30, 0.05)
        assert server.proc.wait(60) != 0, server.log()
        assert statuses and statuses <= {503, "refused", 200}
        assert statuses - {200}, "ping kept saying 200"
        assert "engine exited unexpectedly" in server.log()
    finally:
        server.stop()


def test_a_start_up_adapter_that_cannot_be_registered_fails_serve_with_the_reason(tiny_llama_dir, tmp_path):
    broken = tmp_path / "adapters" / "broken"
    broken.mkdir(parents=True)
    (broken / "adapter_config.json").write_text('{"peft_type": "PREFIX_TUNING"}')
    server = Server(tiny_llama_dir, tmp_path / "serve.log", LLM_BYOC_ADAPTERS_DIR=str(broken.parent))
    try:
        statuses = _ping_until_exit(server, STARTUP_S, 0.2)
        assert server.proc.wait(60) == 1, server.log()
        assert 200 not in statuses
        log = server.log()
        assert "broken" in log and "peft_type must be LORA" in log and "LLM_BYOC_ADAPTERS_OPTIONAL=true" in log, log
    finally:
        server.stop()


def test_multi_model_mode_runs_without_an_engine(tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    server = Server(root, tmp_path / "serve.log", SAGEMAKER_MULTI_MODEL="true", LLM_BYOC_MODEL_ROOT=str(root))
    try:
        wait_for_ping(server.url, STARTUP_S, server.proc)
        assert not [cmd for cmd in children_of(server.proc.pid).values() if "llm_byoc.engine.server" in cmd]
        assert requests.get(f"{server.url}/models", timeout=10).status_code == 200
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(60) == 0, server.log()
    finally:
        server.stop()
