"""The real app in-process (Flask test client) over a real engine on tiny models."""

from __future__ import annotations

import time

import pytest
import torch
from llm_byoc.api.app import create_app
from llm_byoc.config import EngineConfig, ServerConfig
from llm_byoc.engine.llm_engine import LLMEngine
from fixtures.sse_events import parse_sse

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def opt_engine(tiny_opt_dir):
    torch.set_num_threads(1)
    engine = LLMEngine.start(EngineConfig(model=str(tiny_opt_dir), num_threads=1, max_num_seqs=4, max_waiting=2))
    engine.wait_ready(120)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def client(opt_engine):
    # /ping asks the engine each time: the KV cache figures it reports are checked after each request
    return create_app(opt_engine, ServerConfig(timeout_s=60), health_refresh_s=0).test_client()


def test_ping(client):
    response = client.get("/ping")
    assert response.status_code == 200 and response.get_json()["status"] == "ready"


def test_tgi_plain_and_streamed_agree(client):
    body = {"inputs": ["Hello world", "The quick brown fox"], "parameters": {"max_new_tokens": 12, "details": True}}
    plain = client.post("/invocations", json=body).get_json()
    assert len(plain) == 2
    for out in plain:
        assert out["details"]["generated_tokens"] == 12 and out["details"]["finish_reason"] == "length"
        assert len(out["details"]["tokens"]) == 12
    events = parse_sse(client.post("/invocations", json={**body, "stream": True}).get_data())
    finals = {e["index"]: e["generated_text"] for e in events if e["generated_text"] is not None}
    assert finals == {0: plain[0]["generated_text"], 1: plain[1]["generated_text"]}
    for i in (0, 1):  # the streamed pieces add up to the final text
        assert "".join(e["token"]["text"] for e in events if e["index"] == i) == finals[i]


def test_completion_plain_and_streamed(client):
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}
    plain = client.post("/invocations", json=body).get_json()
    assert plain["object"] == "text_completion" and plain["usage"]["completion_tokens"] == 8
    events = parse_sse(client.post("/invocations", json={**body, "stream": True}).get_data())
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == plain["choices"][0]["text"]


def test_stop_string(client):
    text = client.post("/invocations", json={"inputs": "Hello", "parameters": {"max_new_tokens": 30}}).get_json()[0][
        "generated_text"
    ]
    stop = text.strip()[:2] if len(text.strip()) >= 2 else None
    if stop is None:
        pytest.skip("the random model produced no usable stop string")
    body = {"inputs": "Hello", "parameters": {"max_new_tokens": 30, "stop": [stop], "details": True}}
    out = client.post("/invocations", json=body).get_json()[0]
    assert stop not in out["generated_text"]
    assert out["details"]["finish_reason"] == "stop_sequence"


def test_prompt_longer_than_the_context_is_400(client, opt_engine):
    long_prompt = "word " * (opt_engine.max_model_len * 2)
    response = client.post("/invocations", json={"inputs": long_prompt})
    assert response.status_code == 400
    assert "context" in response.get_json()["error"]


def test_disconnect_frees_the_slot(client, opt_engine):
    response = client.post("/invocations", json={"inputs": "Hello", "stream": True, "parameters": {"max_new_tokens": 200, "ignore_eos": True}})
    body = iter(response.response)
    next(body)
    assert opt_engine.health().num_running == 1
    response.close()  # as the WSGI server does when the client goes away
    deadline = time.monotonic() + 10
    while opt_engine.health().num_running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert opt_engine.health().num_running == 0


def test_queue_full_is_429(client, opt_engine):
    # 4 running slots + 2 waiting places: a request of 8 prompts cannot be queued.
    response = client.post("/invocations", json={"inputs": ["a"] * 8, "parameters": {"max_new_tokens": 2}})
    assert response.status_code == 429
    assert response.get_json()["type"] == "queue_full"
    assert client.get("/ping").status_code == 200


@pytest.fixture(scope="module")
def chat_client(tiny_llama_dir):
    engine = LLMEngine.start(EngineConfig(model=str(tiny_llama_dir), num_threads=1, max_num_seqs=4))
    engine.wait_ready(120)
    yield create_app(engine, ServerConfig(timeout_s=60)).test_client()
    engine.shutdown()


def test_chat_plain_and_streamed(chat_client):
    body = {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 10, "temperature": 0}
    plain = chat_client.post("/invocations", json=body).get_json()
    assert plain["object"] == "chat.completion"
    assert plain["choices"][0]["message"]["role"] == "assistant"
    events = parse_sse(chat_client.post("/invocations", json={**body, "stream": True}).get_data())
    assert events[-1] == "[DONE]"
    streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert streamed == plain["choices"][0]["message"]["content"]
    assert events[-2]["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]


def test_a_repeated_document_is_served_from_the_prefix_cache(client):
    """The second request with the same long prefix reports its cached prompt tokens in TGI details
    and OpenAI usage; /ping and /metrics count them."""
    document = "The archive holds letters, maps and ledgers from the old harbour office. " * 3
    first = client.post("/invocations", json={"inputs": document + "Question one?",
                                              "parameters": {"max_new_tokens": 2, "details": True}}).get_json()
    second = client.post("/invocations", json={"inputs": document + "Question two?",
                                               "parameters": {"max_new_tokens": 2, "details": True}}).get_json()
    assert first[0]["details"]["cached_tokens"] == 0
    cached = second[0]["details"]["cached_tokens"]
    assert cached >= 32 and cached % 16 == 0 and cached < second[0]["details"]["input_length"]
    chat = client.post("/invocations", json={"prompt": document + "Question three?", "max_tokens": 2}).get_json()
    assert chat["usage"]["prompt_tokens_details"]["cached_tokens"] >= 32
    kv = client.get("/ping").get_json()["kv_cache"]
    assert kv["prefix_hit_tokens"] >= 64 and kv["blocks_cached"] >= 2 and kv["blocks_total"] > kv["blocks_used"]
    metrics = client.get("/metrics").get_data(as_text=True)
    hits = next(line for line in metrics.splitlines() if line.startswith("llm_byoc_prefix_cache_hit_tokens "))
    assert float(hits.split()[1]) >= 64


def test_a_stateful_session_over_http(client):
    """NEW_SESSION, two calls in the session (the second served from the cache), CLOSE, then 404."""
    opened = client.post("/invocations", json={"requestType": "NEW_SESSION"})
    assert opened.status_code == 200
    session_id = opened.get_json()["session_id"]
    assert opened.headers["X-Amzn-SageMaker-New-Session-Id"].startswith(f"{session_id}; Expires=")
    headers = {"X-Amzn-SageMaker-Session-Id": session_id}
    document = "Minutes of the river board: the weir was rebuilt, the locks were painted. " * 3
    answers = [client.post("/invocations", headers=headers, json={
        "inputs": document + question, "parameters": {"max_new_tokens": 2, "details": True}}).get_json()
        for question in ("Who rebuilt it?", "When were they painted?")]
    assert answers[1][0]["details"]["cached_tokens"] >= 32
    closed = client.post("/invocations", headers=headers, json={"requestType": "CLOSE"})
    assert closed.status_code == 200 and closed.headers["X-Amzn-SageMaker-Closed-Session-Id"] == session_id
    again = client.post("/invocations", headers=headers, json={"inputs": "x", "parameters": {"max_new_tokens": 1}})
    assert again.status_code == 404 and again.get_json()["type"] == "session_not_found"
