from __future__ import annotations

import json

import pytest
from llm_byoc.client.errors import StreamError
from llm_byoc.client.events import StreamEvent, events_from_message
from llm_byoc.client.sse import SSEMessage


def events(obj, event: str = "message") -> list[StreamEvent]:
    return list(events_from_message(SSEMessage(event, json.dumps(obj))))


def test_tgi_token_event():
    obj = {
        "index": 1,
        "token": {"id": 42, "text": "안", "logprob": -0.5, "special": False},
        "generated_text": None,
        "details": None,
    }
    (event,) = events(obj)
    assert (event.text, event.index, event.token_id, event.finish_reason) == ("안", 1, 42, None)
    assert event.raw == obj


def test_tgi_final_event_carries_finish_reason():
    obj = {
        "index": 0,
        "token": {"id": 2, "text": "", "special": True},
        "generated_text": "hi",
        "details": {"finish_reason": "eos_token", "generated_tokens": 3},
    }
    (event,) = events(obj)
    assert event.finish_reason == "eos_token" and event.text == ""


def test_openai_chat_chunks_skip_the_role_only_opening():
    opening = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}],
    }
    assert events(opening) == []
    chunk = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "🙂"}, "finish_reason": None}],
    }
    (event,) = events(chunk)
    assert (event.text, event.index, event.token_id, event.finish_reason) == ("🙂", 0, None, None)
    last = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    assert [e.finish_reason for e in events(last)] == ["length"]


def test_openai_closing_usage_chunk_is_an_empty_event_with_the_usage():
    usage = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
    (event,) = events({"object": "text_completion", "choices": [], "usage": usage})
    assert (event.text, event.finish_reason, event.token_id) == ("", None, None) and event.raw["usage"] == usage
    assert events({"object": "text_completion", "choices": [], "usage": None}) == []


def test_openai_text_completion_with_several_choices():
    chunk = {
        "object": "text_completion",
        "choices": [{"index": 0, "text": "a"}, {"index": 1, "text": "b", "finish_reason": "stop"}],
    }
    assert [(e.index, e.text, e.finish_reason) for e in events(chunk)] == [(0, "a", None), (1, "b", "stop")]


@pytest.mark.parametrize(
    "obj, event, error_type",
    [
        ({"error": "engine died", "type": "engine_dead"}, "message", "engine_dead"),
        ({"error": {"message": "engine died", "type": "engine_dead"}}, "message", "engine_dead"),
        ({"error": "engine died"}, "error", None),
    ],
)
def test_error_events_raise(obj, event, error_type):
    with pytest.raises(StreamError, match="engine died") as info:
        events(obj, event)
    assert info.value.error_type == error_type


@pytest.mark.parametrize("data", ["not json", "[1, 2]", '{"something": "else"}'])
def test_malformed_events_raise(data):
    with pytest.raises(StreamError):
        list(events_from_message(SSEMessage("message", data)))
