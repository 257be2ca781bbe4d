"""Streams that end early: client gone, engine dead, budget spent."""

from __future__ import annotations

import time

from llm_byoc.api.app import create_app
from llm_byoc.config import ServerConfig
from fixtures.sse_events import parse_sse
from werkzeug.test import EnvironBuilder


def test_client_disconnect_aborts_the_request(client, engine):
    engine.token_delay_s = 0.01
    response = client.post("/invocations", json={"inputs": "abcdefghij", "stream": True})
    chunks = response.response  # the WSGI body iterator, as a server would consume it
    first = next(iter(chunks))
    assert first.startswith(b"data: ")
    assert engine.aborted == []
    response.close()  # what the server does when the client goes away: GeneratorExit in the stream
    assert len(engine.aborted) == 1


def test_a_stream_closed_before_its_first_chunk_still_aborts(engine, config):
    app = create_app(engine, config)
    environ = EnvironBuilder(method="POST", path="/invocations", json={"inputs": "abc", "stream": True}).get_environ()
    body = app(environ, lambda status, headers, exc_info=None: None)
    body.close()  # a server that gives up before reading the body
    assert len(engine.aborted) == 1


def test_a_finished_stream_does_not_abort(client, engine):
    client.post("/invocations", json={"inputs": "abc", "stream": True}).get_data()
    assert engine.aborted == []


def test_engine_death_mid_stream_ends_with_an_error_event(client, engine):
    engine.die_after_tokens = 2
    events = parse_sse(client.post("/invocations", json={"inputs": "abcdef", "stream": True}).get_data())
    assert [e["token"]["text"] for e in events[:2]] == ["f", "e"]
    assert events[-1] == {"error": "the model worker died", "type": "engine_dead"}
    assert len(engine.aborted) == 1


def test_openai_stream_error_is_the_last_event(client, engine):
    engine.die_after_tokens = 1
    events = parse_sse(client.post("/invocations", json={"prompt": "abcdef", "stream": True}).get_data())
    assert events[-1]["type"] == "engine_dead"
    assert "[DONE]" not in events


def test_stream_past_its_budget_ends_with_a_timeout_event(engine):
    engine.token_delay_s = 0.4
    client = create_app(engine, ServerConfig(timeout_s=1)).test_client()
    started = time.monotonic()
    events = parse_sse(client.post("/invocations", json={"inputs": "abcdefghijkl", "stream": True}).get_data())
    assert time.monotonic() - started < 3
    assert events[-1]["type"] == "timeout"
    assert len(engine.aborted) == 1


def test_errors_before_the_stream_starts_keep_their_status(client, engine):
    engine.queue_full = True
    response = client.post("/invocations", json={"inputs": "abc", "stream": True})
    assert response.status_code == 429
    assert response.mimetype == "application/json"


def test_stream_responses_carry_the_request_headers(client):
    headers = {"X-Amzn-SageMaker-Custom-Attributes": "a=b", "X-Request-Id": "s-1"}
    response = client.post("/invocations", json={"prompt": "ab", "stream": True}, headers=headers)
    assert response.headers["X-Amzn-SageMaker-Custom-Attributes"] == "a=b"
    assert response.headers["X-Request-Id"] == "s-1"
    assert parse_sse(response.get_data())[-1] == "[DONE]"
