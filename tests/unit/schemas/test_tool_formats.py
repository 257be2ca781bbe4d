"""A model's own tool-call format read back into OpenAI tool calls: Hermes/Qwen, Llama 3, Mistral; plain and
streamed (every way of cutting the text into pieces gives the same calls), several calls, parallel_tool_calls."""

from __future__ import annotations

import json

import pytest

from llm_byoc.schemas.structured import ToolCalling
from llm_byoc.schemas.tool_formats import NativeToolCallReader, detect_format

HERMES = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
          '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>')
LLAMA3 = '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {"zone": "CET"}}'
MISTRAL = ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
           '{"name": "get_time", "arguments": {"zone": "CET"}}]')
CALLS = [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]


def read(fmt: str, pieces: list[str], parallel: bool = True) -> tuple[NativeToolCallReader, list]:
    reader = NativeToolCallReader(ToolCalling("auto", "", fmt, parallel))
    deltas = []
    for piece in pieces:
        deltas += reader.feed(piece)
    deltas += reader.finish(True)
    return reader, deltas


def cuts(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
@pytest.mark.parametrize("fmt, text, content", [("hermes", HERMES, "Let me check.\n"), ("llama3", LLAMA3, ""),
                                                ("mistral", MISTRAL, ""),
                                                ("llama3", "<|python_tag|>" + LLAMA3, "")])
def test_each_format_gives_every_call_however_the_text_is_cut(fmt, text, content, size):
    reader, deltas = read(fmt, cuts(text, size))
    assert [(c.name, json.loads(c.arguments)) for c in reader.calls] == CALLS
    assert reader.content == content
    assert len({c.id for c in reader.calls}) == 2 and all(c.id.startswith("call_") for c in reader.calls)
    streamed = [(d.index, d.call_id, d.name, json.loads(d.arguments)) for d in deltas if d.name]
    assert streamed == [(i, c.id, c.name, json.loads(c.arguments)) for i, c in enumerate(reader.calls)]
    assert "".join(d.content for d in deltas) == content


def test_parallel_tool_calls_false_keeps_the_first_call_only():
    for fmt, text in (("hermes", HERMES), ("llama3", LLAMA3), ("mistral", MISTRAL)):
        reader, deltas = read(fmt, [text], parallel=False)
        assert [c.name for c in reader.calls] == ["get_weather"], fmt
        assert [d.index for d in deltas if d.name] == [0]


@pytest.mark.parametrize("fmt, text", [
    ("hermes", "It is sunny in Paris."),
    ("hermes", "Use <tool_ and see."),  # half a marker, then not one
    ("llama3", '{"answer": 42}'),  # JSON, but not a call
    ("mistral", "[1, 2, 3]"),
    ("llama3", "The weather is fine"),
    ("mistral", "["),
    ("hermes", "<tool_call>"),
])
def test_text_that_is_no_call_is_content(fmt, text):
    for size in (1, 4, 100):
        reader, deltas = read(fmt, cuts(text, size))
        assert reader.calls == [] and reader.content == text
        assert "".join(d.content for d in deltas) == text


def test_the_markers_dropped_by_decoding_or_bare_json_still_read():
    """Special tokens (Mistral's [TOOL_CALLS], Llama's <|python_tag|>) may be skipped when decoding; and
    tool_choice "required" makes every format a JSON array of calls."""
    bare = '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    for fmt in ("hermes", "llama3", "mistral"):
        reader, _ = read(fmt, cuts(bare, 5))
        assert [(c.name, json.loads(c.arguments)) for c in reader.calls] == CALLS[:1], fmt


def test_a_call_cut_off_is_content_and_text_after_calls_stays():
    reader, _ = read("hermes", ['<tool_call>{"name": "get_weather", "argu'])
    assert reader.calls == [] and reader.content == '<tool_call>{"name": "get_weather", "argu'
    reader, _ = read("hermes", ['<tool_call>{"name": "f", "arguments": {}}</tool_call>\nDone.'])
    assert [c.name for c in reader.calls] == ["f"] and reader.content == "Done."


def test_arguments_as_a_json_string_are_read_too():
    reader, _ = read("hermes", ['<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>'])
    assert json.loads(reader.calls[0].arguments) == {"a": 1}


@pytest.mark.parametrize("template, fmt", [
    ("{% for tool in tools %}{{ tool }}{% endfor %}<tool_call>{{ x }}</tool_call>", "hermes"),
    ("{% if tools %}[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]", "mistral"),
    ('<|start_header_id|>user<|end_header_id|>{"name": function name, "parameters": dict}{{ tools }}', "llama3"),
    ("{{ tools }}<|python_tag|>", "llama3"),
    ("{% for m in messages %}{{ m.content }}{% endfor %}", "json"),
])
def test_the_format_is_read_from_the_chat_template(template, fmt):
    assert detect_format(template) == fmt
