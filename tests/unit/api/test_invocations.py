"""POST /invocations: admission before the engine, errors before the first token, input limits."""

from __future__ import annotations

import threading
import time

import pytest

from fixtures.sse_events import parse_sse
from llm_byoc.api import drain
from llm_byoc.api.app import create_app
from llm_byoc.api.http_worker import OVER_CAPACITY
from llm_byoc.config import ServerConfig


def test_a_request_beyond_capacity_is_429_without_asking_the_engine(engine, config):
    client = create_app(engine, config, capacity=2).test_client()
    response = client.post("/invocations", json={"inputs": ["a", "b", "c"]})
    assert response.status_code == 429 and response.headers["Retry-After"] == "1"
    assert response.get_json()["type"] == "queue_full" and "LLM_BYOC_MAX_WAITING" in response.get_json()["error"]
    assert engine.submitted == []
    for _ in range(3):  # room comes back after each request, plain or streamed
        assert client.post("/invocations", json={"inputs": ["a", "b"]}).status_code == 200
        client.post("/invocations", json={"inputs": ["a", "b"], "stream": True}).get_data()


def test_room_is_held_while_a_stream_runs(engine, config):
    engine.token_delay_s = 0.05
    app = create_app(engine, config, capacity=1)
    streaming = app.test_client().post("/invocations", json={"inputs": "abcdef", "stream": True})
    second = app.test_client().post("/invocations", json={"inputs": "x"})
    assert second.status_code == 429
    streaming.get_data()
    streaming.close()
    assert app.test_client().post("/invocations", json={"inputs": "x"}).status_code == 200


def test_a_connection_over_the_limit_gets_429_but_its_ping_is_answered(client):
    over = {OVER_CAPACITY: True}
    response = client.post("/invocations", json={"inputs": "a"}, environ_overrides=over)
    assert response.status_code == 429 and response.get_json()["type"] == "too_many_connections"
    assert response.headers["Retry-After"] == "1"
    assert client.get("/ping", environ_overrides=over).status_code == 200


def test_an_engine_that_dies_before_the_first_token_is_a_503_not_a_broken_stream(client, engine):
    engine.die_after_tokens = 0
    response = client.post("/invocations", json={"inputs": "abc", "stream": True})
    assert response.status_code == 503 and response.get_json()["type"] == "engine_dead"
    assert len(engine.aborted) == 1


def test_a_stream_that_runs_out_of_budget_while_queued_is_a_504(engine):
    engine.hang = True
    client = create_app(engine, ServerConfig(timeout_s=1), health_refresh_s=0).test_client()
    response = client.post("/invocations", json={"inputs": "abc", "stream": True})
    assert response.status_code == 504 and response.get_json()["type"] == "timeout"


@pytest.fixture
def roomy(engine):
    """Bodies up to the default 6 MB (the shared fixture allows 4 KB)."""
    return create_app(engine, ServerConfig(timeout_s=5), health_refresh_s=0).test_client()


@pytest.mark.parametrize(
    "body, limit",
    [
        ({"inputs": ["a"] * 65}, "the limit is 64"),
        ({"prompt": ["a"] * 65}, "the limit is 64"),
        ({"messages": [{"role": "user", "content": "a"}] * 1025}, "the limit is 1024"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}] * 257}]}, "the limit is 256"),
        ({"inputs": "a", "parameters": {"stop": ["x"] * 17}}, "the limit is 16"),
        ({"inputs": "a", "parameters": {"repetition_penalty": 1e-300}}, "repetition_penalty must be from 0.01 to 100"),
    ],
)
def test_lists_and_values_over_their_limits_are_400_naming_the_limit(roomy, engine, body, limit):
    response = roomy.post("/invocations", json=body)
    assert response.status_code == 400 and limit in response.get_json()["error"]
    assert engine.submitted == []


@pytest.mark.parametrize("depth", [33, 1000, 100_000])
def test_deep_nesting_is_400_naming_the_limit(roomy, depth):
    body = b'{"inputs": ' + b"[" * depth + b"]" * depth + b"}"
    response = roomy.post("/invocations", data=body, content_type="application/json")
    assert response.status_code == 400 and "deeper than 32 levels" in response.get_json()["error"]


def test_a_temperature_too_small_to_sample_is_greedy(client, engine):
    client.post("/invocations", json={"inputs": "a", "parameters": {"temperature": 5e-324, "do_sample": True}})
    client.post("/invocations", json={"prompt": "a", "temperature": 1e-30})
    assert [params.temperature for _, params, _ in engine.submitted] == [0.0, 0.0]


def test_concurrent_requests_never_exceed_the_capacity(engine, config):
    engine.token_delay_s = 0.01
    app = create_app(engine, config, capacity=3)
    statuses: list[int] = []

    def one():
        response = app.test_client().post("/invocations", json={"inputs": "abcd"})
        statuses.append(response.status_code)

    threads = [threading.Thread(target=one) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(statuses) <= {200, 429} and statuses.count(200) >= 3



def test_a_drain_ends_what_still_runs_with_a_clean_answer(engine, config):
    engine.token_delay_s = 0.05
    app = create_app(engine, config, health_refresh_s=0)
    answers: dict = {}

    def stream():
        answers["stream"] = parse_sse(app.test_client().post("/invocations", json={"inputs": "abcdefghijklmnop",
                                                                                   "stream": True}).get_data())

    def plain():
        answers["plain"] = app.test_client().post("/invocations", json={"inputs": "abcdefghijklmnop"})

    threads = [threading.Thread(target=stream), threading.Thread(target=plain)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    drain.drain("the server is shutting down")
    for thread in threads:
        thread.join(10)
    assert answers["stream"][-1] == {"error": "the server is shutting down", "type": "shutting_down"}
    assert answers["plain"].status_code == 503 and answers["plain"].get_json()["type"] == "shutting_down"
    assert len(engine.aborted) == 2
