"""OpenAI style chat completions and completions."""

from __future__ import annotations

import pytest
from fakes.fake_engine import FakeTokenizer
from llm_byoc.schemas import openai
from llm_byoc.errors import InvalidRequest
from fixtures.sse_events import parse_sse


def invoke(client, body, **kwargs):
    return client.post("/invocations", json=body, **kwargs)


def test_chat_completion(client, engine):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50, "temperature": 0}
    response = invoke(client, body, headers={"X-Request-Id": "r7"})
    out = response.get_json()
    assert response.status_code == 200
    assert out["object"] == "chat.completion" and out["id"] == "chatcmpl-r7" and out["model"] == "fake-model"
    expected = "".join(reversed("<user>hi<assistant>"))
    assert out["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": expected}, "finish_reason": "stop", "logprobs": None}
    ]
    n_prompt = len("<user>hi<assistant>")
    assert out["usage"] == {"prompt_tokens": n_prompt, "completion_tokens": n_prompt + 1, "total_tokens": 2 * n_prompt + 1,
                            "prompt_tokens_details": {"cached_tokens": 0}}
    prompts, params, _ = engine.submitted[0]
    # rendered with the chat template and tokenized without adding a second BOS
    assert prompts == [[ord(c) for c in "<user>hi<assistant>"]]
    assert params.max_new_tokens == 50 and params.temperature == 0.0


def test_chat_defaults_follow_openai(client, engine):
    invoke(client, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}], "model": "fake-model"})
    params = engine.submitted[0][1]
    assert params.temperature == 1.0 and params.top_p == 1.0


def test_max_completion_tokens_wins(client, engine):
    body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 9, "max_completion_tokens": 2}
    out = invoke(client, body).get_json()
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"]["completion_tokens"] == 2


def test_completion_with_several_prompts(client):
    body = {"prompt": ["ab", "cde"], "max_tokens": 10, "stop": "c", "model": "/opt/ml/model/fake-model"}
    out = invoke(client, body).get_json()
    assert out["object"] == "text_completion" and out["model"] == "/opt/ml/model/fake-model"
    assert [(c["index"], c["text"], c["finish_reason"]) for c in out["choices"]] == [(0, "ba", "stop"), (1, "ed", "stop")]


def test_chat_stream(client):
    body = {"messages": [{"role": "user", "content": "ab"}], "stream": True, "max_tokens": 3}
    events = parse_sse(invoke(client, body).get_data())
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == ">tn"
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "length"]


def test_completion_stream_with_usage(client):
    body = {"prompt": "abc", "stream": True, "stream_options": {"include_usage": True}}
    events = parse_sse(invoke(client, body).get_data())
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"] == {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8,
                                                                  "prompt_tokens_details": {"cached_tokens": 0}}
    text_chunks = events[:-2]
    assert all(c["object"] == "text_completion" for c in text_chunks)
    assert "".join(c["choices"][0]["text"] for c in text_chunks) == "cba"
    assert text_chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    "body, needle",
    [
        ({"prompt": ["a", "b"], "n": 33}, "66 choices; the limit is 64"),
        ({"prompt": "a", "n": 0}, "n must be >= 1"),
        ({"prompt": "a", "logprobs": 21}, "logprobs must be from 0 to 20"),
        ({"prompt": "a", "logprobs": True}, "logprobs must be an integer"),
        ({"prompt": "a", "logit_bias": {"x": 1}}, "logit_bias keys must be token ids"),
        ({"prompt": "a", "logit_bias": {"5": 101}}, "from -100 to 100"),
        ({"prompt": "a", "best_of": 1, "n": 2}, "best_of must be >= n"),
        ({"prompt": "a", "best_of": 3, "stream": True}, "best_of greater than n cannot be streamed"),
        ({"prompt": "a", "echo": True, "logprobs": 1, "stream": True}, "echo with logprobs cannot be streamed"),
        ({"prompt": "a", "min_p": 1.5}, "min_p must be from 0 to 1"),
        ({"prompt": "a", "top_k": -2}, "top_k must be >= -1"),
        ({"prompt": "a", "stop_token_ids": [1, -1]}, "stop_token_ids"),
        ({"prompt": "a", "repetition_penalty": 0}, "repetition_penalty must be from"),
        ({"prompt": "a", "max_tokens": 0}, "max_tokens must be >= 1"),
        ({"prompt": "a", "stream_options": {"x": 1}}, "stream_options"),
        ({"prompt": "a", "model": 3}, "model must be a string"),
        ({"prompt": [[1, 2], "b"]}, "not a mix"),
        ({"prompt": [[1, 2], []]}, "prompt\\[1\\] must be a non-empty array of token ids"),
        ({"prompt": []}, "not empty"),
        ({"prompt": "a", "temperature": None, "top_p": "x"}, "top_p must be a number"),
    ],
)
def test_bad_completion_requests(body, needle):
    with pytest.raises(InvalidRequest, match=needle):
        openai.parse_completion(body)


@pytest.mark.parametrize(
    "messages, needle",
    [
        ([], "non-empty array"),
        ("hi", "non-empty array"),
        ([{"role": "robot", "content": "x"}], "role must be one of"),
        ([{"role": "user", "content": 5}], "content must be a string"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "text parts"),
        ([{"role": "user", "content": "x", "tool_calls": []}], "tool_calls"),
        ([{"role": "assistant", "content": "x"}], "chat template refused"),
    ],
)
def test_bad_messages(messages, needle):
    with pytest.raises(InvalidRequest, match=needle):
        openai.parse_chat({"messages": messages}, FakeTokenizer())


def test_model_without_chat_template_is_400(client, engine):
    engine.tokenizer.chat_template = None
    response = invoke(client, {"messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 400
    assert "no chat template" in response.get_json()["error"]
