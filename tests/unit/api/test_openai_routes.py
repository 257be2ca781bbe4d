"""The OpenAI routes on the app: /v1/chat/completions, /v1/completions, /v1/models, /health (fake engine)."""

from __future__ import annotations

import pytest
from fixtures.openapi_contract import check_answer
from fixtures.sse_events import parse_sse
from llm_byoc.schemas import openai
from llm_byoc.errors import InvalidRequest
from llm_byoc.protocol import EngineState, TopLogprobs
from fakes.fake_engine import FakeTokenizer

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def post(client, path, body):
    response = client.post(path, json=body)
    check_answer("POST", path, response.status_code, response.content_type, response.get_data())
    return response


def test_chat_and_completions_routes_answer_their_own_schema_only(client):
    assert post(client, "/v1/chat/completions", CHAT).get_json()["object"] == "chat.completion"
    assert post(client, "/v1/completions", {"prompt": "ab", "max_tokens": 2}).get_json()["object"] == "text_completion"
    wrong = post(client, "/v1/completions", CHAT)
    assert wrong.status_code == 400 and "'prompt'" in wrong.get_json()["error"]["message"]
    wrong = post(client, "/v1/chat/completions", {"inputs": "x"})
    assert wrong.status_code == 400 and "'messages'" in wrong.get_json()["error"]["message"]


def test_errors_under_v1_are_openai_shaped_and_keep_our_type(client):
    body = post(client, "/v1/chat/completions", {**CHAT, "best_of": 2}).get_json()
    assert body["type"] == "invalid_request" and body["error"]["type"] == "invalid_request"
    assert "best_of" in body["error"]["message"] and body["error"]["code"] == 400 and body["error"]["param"] is None
    assert set(client.post("/invocations", json={**CHAT, "best_of": 2}).get_json()) == {"error", "type"}  # unchanged


def test_an_adapter_that_is_not_registered_is_a_404(client):
    response = post(client, "/v1/completions", {"prompt": "a", "model": "nope"})
    assert response.status_code == 404 and response.get_json()["type"] == "adapter_not_found"


def test_n_choices_are_sequences_and_a_seed_moves_per_choice(client, engine):
    out = post(client, "/v1/completions", {"prompt": ["ab", "cd"], "n": 2, "max_tokens": 3, "seed": 5}).get_json()
    assert [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    assert [c["text"] for c in out["choices"]] == ["ba", "ba", "dc", "dc"]
    prompts, params, _ = engine.submitted[0]
    assert prompts == ["ab", "ab", "cd", "cd"] and [p.seed for p in params] == [5, 6, 5, 6]
    assert out["usage"]["completion_tokens"] == 4 * 3
    assert out["usage"]["prompt_tokens"] == 3 + 3  # BOS + 2 characters, each prompt once (as OpenAI bills n > 1)


def test_chat_stream_with_n_opens_every_choice_and_counts_usage(client):
    response = post(client, "/v1/chat/completions", {**CHAT, "n": 2, "stream": True,
                                                     "stream_options": {"include_usage": True}})
    events = parse_sse(response.get_data())
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [{"role": "assistant", "content": ""}] * 2
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 8
    assert chunks[-1]["usage"]["prompt_tokens"] == len("<user>hi<assistant>")
    assert {c["choices"][0]["finish_reason"] for c in chunks[:-1] if c["choices"][0]["finish_reason"]} == {"length"}


def test_continuous_usage_puts_the_usage_so_far_on_every_chunk(client):
    response = post(client, "/v1/completions", {"prompt": "abc", "max_tokens": 3, "stream": True, "stream_options":
                                                {"include_usage": True, "continuous_usage_stats": True}})
    chunks = [e for e in parse_sse(response.get_data()) if e != "[DONE]"]
    assert [c["usage"]["completion_tokens"] for c in chunks] == [1, 2, 3, 3]


def test_logprobs_reach_both_shapes_plain_and_streamed(client, engine):
    chat = post(client, "/v1/chat/completions", {**CHAT, "logprobs": True, "top_logprobs": 2}).get_json()
    content = chat["choices"][0]["logprobs"]["content"]
    assert [e["logprob"] for e in content] == [-0.5] * 4 and content[0]["token"] == ">"
    assert content[0]["bytes"] == [ord(">")]
    assert engine.submitted[0][1].logprobs and engine.submitted[0][1].top_logprobs == 2
    text = post(client, "/v1/completions", {"prompt": "abc", "max_tokens": 3, "logprobs": 1}).get_json()
    logprobs = text["choices"][0]["logprobs"]
    assert logprobs["tokens"] == ["c", "b", "a"] and logprobs["text_offset"] == [0, 1, 2]
    assert logprobs["top_logprobs"] == [{"c": -0.5}, {"b": -0.5}, {"a": -0.5}]  # the chosen token is always there
    stream = post(client, "/v1/completions", {"prompt": "abc", "max_tokens": 3, "logprobs": 0, "stream": True})
    chunks = [e for e in parse_sse(stream.get_data()) if e != "[DONE]"]
    assert [t for c in chunks for t in c["choices"][0]["logprobs"]["tokens"]] == ["c", "b", "a"]
    assert [o for c in chunks for o in c["choices"][0]["logprobs"]["text_offset"]] == [0, 1, 2]
    plain = post(client, "/v1/completions", {"prompt": "abc", "max_tokens": 3}).get_json()
    assert plain["choices"][0]["logprobs"] is None and not engine.submitted[-1][1].logprobs


def test_sampling_fields_reach_the_engine(client, engine):
    post(client, "/v1/completions", {"prompt": "a", "ignore_eos": True, "min_tokens": 2, "presence_penalty": 0.5,
                                     "frequency_penalty": -1, "stop": "x", "max_tokens": 2, "speculative": False})
    params = engine.submitted[0][1]
    assert (params.ignore_eos, params.min_tokens, params.presence_penalty, params.frequency_penalty, params.stop,
            params.speculative) == (True, 2, 0.5, -1.0, ("x",), False)
    bad = post(client, "/v1/completions", {"prompt": "a", "presence_penalty": 3})
    assert bad.status_code == 400 and "presence_penalty must be a number from -2 to 2" in bad.get_json()["error"]["message"]
    bad = post(client, "/v1/completions", {"prompt": "a", "min_tokens": 9, "max_tokens": 5})
    assert bad.status_code == 400 and "min_tokens" in bad.get_json()["error"]["message"]


def test_models_lists_the_model_then_its_adapters(client, engine):
    engine.register_adapter("sql", "/opt/ml/adapters/sql")
    response = client.get("/v1/models")
    check_answer("GET", "/v1/models", 200, response.content_type, response.get_data())
    data = response.get_json()["data"]
    assert [(m["id"], m["parent"]) for m in data] == [("fake-model", None), ("sql", "fake-model")]
    assert data[0]["max_model_len"] == 512


def test_health_says_what_ping_says(client, engine):
    assert client.get("/health").status_code == client.get("/ping").status_code == 200
    engine.state = EngineState.DEAD
    response = client.get("/health")
    assert response.status_code == client.get("/ping").status_code == 503
    check_answer("GET", "/health", 503, response.content_type, response.get_data())


@pytest.mark.parametrize("body, needle", [
    ({"logprobs": False, "top_logprobs": 2}, "top_logprobs needs logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs must be from 0 to 20"),
    ({"logprobs": 3}, "logprobs must be true or false"),
    ({"n": 65}, "65 choices; the limit is 64"),
    ({"min_tokens": -1}, "min_tokens must be >= 0"),
    ({"ignore_eos": "yes"}, "ignore_eos must be true or false"),
])
def test_bad_chat_fields_are_named(body, needle):
    with pytest.raises(InvalidRequest, match=needle):
        openai.parse_chat({**CHAT, **body}, FakeTokenizer())


def test_chat_logprobs_render_the_engine_alternatives():
    from llm_byoc.schemas.openai_logprobs import result_logprobs

    out = result_logprobs(True, FakeTokenizer(), [ord("a")], [-0.1], [TopLogprobs([ord("a"), ord("b")], [-0.1, -2.5])])
    assert out == {"content": [{"token": "a", "logprob": -0.1, "bytes": [97], "top_logprobs": [
        {"token": "a", "logprob": -0.1, "bytes": [97]}, {"token": "b", "logprob": -2.5, "bytes": [98]}]}]}
