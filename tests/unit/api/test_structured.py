"""Structured output and tools in requests: the grammars they become, the 400s, the answers' shape."""

from __future__ import annotations

import json

import pytest

from fakes.fake_engine import FakeTokenizer
from llm_byoc.schemas import structured
from llm_byoc.schemas.openai import parse_chat
from llm_byoc.schemas.invocation import ResponseContext
from llm_byoc.schemas.tgi import parse as parse_tgi
from llm_byoc.engine.outputs import GenerationResult, TokenEvent
from llm_byoc.errors import InvalidRequest
from llm_byoc.protocol import FinishReason, GrammarSpec

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time"}}
USER = [{"role": "user", "content": "Weather in Paris?"}]


def chat(**fields):
    return parse_chat({"messages": USER, **fields}, FakeTokenizer())


def test_response_format_json_schema_becomes_its_grammar():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    inv = chat(response_format={"type": "json_schema", "json_schema": {"name": "thing", "schema": schema, "strict": True}})
    assert inv.params.grammar.kind == "json_schema" and json.loads(inv.params.grammar.value) == schema
    assert chat(response_format={"type": "json_object"}).params.grammar == GrammarSpec("json_object")
    assert chat(response_format={"type": "text"}).params.grammar is None


def test_tgi_grammar_json_and_regex():
    inv = parse_tgi({"inputs": "x", "parameters": {"grammar": {"type": "json", "value": {"type": "integer"}}}})
    assert inv.params.grammar == GrammarSpec("json_schema", '{"type":"integer"}')
    inv = parse_tgi({"inputs": "x", "parameters": {"grammar": {"type": "regex", "value": "[0-9]{3}"}}})
    assert inv.params.grammar == GrammarSpec("regex", "[0-9]{3}")


@pytest.mark.parametrize("body, reason", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
     "Invalid type"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"if": {}}}}},
     "Unimplemented keys"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string",
                                                                                       "format": "color"}}}},
     "Unknown format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "bad name!", "schema": {}}}}, "name"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
     "'get_time', which is not in tools"),
    ({"tool_choice": "required"}, "tool_choice needs tools"),
    ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice must be"),
    ({"tools": [WEATHER, WEATHER]}, "defined twice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": 3}}}]},
     "tools[0].function.parameters"),
    ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "cannot be combined"),
])
def test_bad_structured_requests_are_refused_with_the_reason(body, reason):
    with pytest.raises(InvalidRequest) as caught:
        chat(**body)
    assert reason in caught.value.message


@pytest.mark.parametrize("grammar, reason", [
    ({"type": "regex", "value": "a(b"}, "unclosed group"),
    ({"type": "json", "value": "{not json"}, "not JSON"),
    ({"type": "lark", "value": "start: x"}, '"json" or "regex"'),
])
def test_bad_tgi_grammars_are_refused(grammar, reason):
    with pytest.raises(InvalidRequest) as caught:
        parse_tgi({"inputs": "x", "parameters": {"grammar": grammar}})
    assert reason in caught.value.message


def test_tool_choice_modes():
    assert chat(tools=[WEATHER], tool_choice="none").params.grammar is None
    auto = chat(tools=[WEATHER])
    assert auto.params.grammar.kind == "lark" and auto.tool_calling.mode == "auto"
    required = chat(tools=[WEATHER, TIME], tool_choice="required")
    assert json.loads(required.params.grammar.value)["anyOf"][1]["properties"]["name"] == {"const": "get_time"}
    named = chat(tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert json.loads(named.params.grammar.value) == WEATHER["function"]["parameters"]
    assert named.tool_calling == structured.ToolCalling("named", "get_weather")


def test_tools_and_tool_messages_reach_the_chat_template():
    messages = USER + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    inv = parse_chat({"messages": messages, "tools": [WEATHER]}, FakeTokenizer())
    prompt = FakeTokenizer().decode(inv.prompts[0])
    assert prompt.startswith("<system>You can call these tools") and '"get_weather"' in prompt
    assert '<assistant>{"name": "get_weather", "arguments": {"city": "Paris"}}<tool>sunny<assistant>' in prompt
    with pytest.raises(InvalidRequest, match="tool_call_id"):
        parse_chat({"messages": [{"role": "tool", "content": "x"}]}, FakeTokenizer())


CTX = ResponseContext(request_id="r1", model_name="m")


def result(text: str, reason: FinishReason = FinishReason.STOP) -> GenerationResult:
    return GenerationResult(0, text, [1] * 3, reason, 5, 3)


def test_a_tool_call_answer_carries_tool_calls():
    inv = chat(tools=[WEATHER], tool_choice="required")
    choice = inv.response([result('{"name":"get_weather","arguments":{"city":"Paris"}}')], CTX)["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    named = chat(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = named.response([result('{"city":"Oslo"}')], CTX)["choices"][0]
    assert choice["message"]["tool_calls"][0]["function"]["arguments"] == '{"city":"Oslo"}'


def test_auto_answers_text_or_a_call_and_a_cut_off_call_keeps_length():
    auto = chat(tools=[WEATHER])
    choice = auto.response([result("It is sunny.")], CTX)["choices"][0]
    assert choice == {"index": 0, "message": {"role": "assistant", "content": "It is sunny."},
                      "logprobs": None, "finish_reason": "stop"}
    cut = auto.response([result('{"name":"get_weather","arguments":{"ci', FinishReason.LENGTH)], CTX)["choices"][0]
    assert cut["finish_reason"] == "length"
    assert cut["message"]["tool_calls"][0]["function"]["arguments"] == '{"ci'


def stream(inv, pieces: list[str], reason=FinishReason.STOP) -> list[dict]:
    writer = inv.stream_writer(CTX)
    chunks = list(writer.start())
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        chunks += writer.on_event(TokenEvent(0, 7, piece, None, reason if last else None, 5, i + 1))
    return [c for c in chunks + list(writer.finish()) if isinstance(c, dict)]


@pytest.mark.parametrize("size", [1, 2, 5, 100])
def test_a_streamed_tool_call_is_openai_deltas(size):
    text = '{"name":"get_weather","arguments":{"city":"Paris"}}'
    chunks = stream(chat(tools=[WEATHER], stream=True), [text[i:i + size] for i in range(0, len(text), size)])
    deltas = [c["choices"][0]["delta"] for c in chunks]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""} and calls[0]["id"].startswith("call_")
    assert all(set(c) == {"index", "function"} and c["index"] == 0 for c in calls[1:])
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"city": "Paris"}
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "tool_calls"
    assert not any(d.get("content") for d in deltas)


def test_a_streamed_auto_answer_in_text_is_content():
    chunks = stream(chat(tools=[WEATHER], stream=True), ["It ", "is ", "sunny"])
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "It is sunny"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_the_app_answers_a_bad_grammar_with_a_json_400(client):
    response = client.post("/invocations", json={"inputs": "x", "parameters": {"grammar": {"type": "regex",
                                                                                          "value": "(("}}})
    assert response.status_code == 400
    body = response.get_json()
    assert body["type"] == "invalid_request" and "regex" in body["error"]
