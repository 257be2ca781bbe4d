"""Tool calls in a model's own format, read back into OpenAI's ``tool_calls``.

A chat template that knows tools teaches the model one way of writing calls;
the format is chosen from the template's source (or ``LLM_BYOC_TOOL_CALL_PARSER``):

  hermes   (Hermes, Qwen 2.5 / 3)  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one
           block per call, text may come before the first
  llama3   (Llama 3.1 / 3.2 / 3.3)  ``{"name": ..., "parameters": {...}}`` as the whole answer,
           several separated by ";" (an optional ``<|python_tag|>`` first)
  mistral  (Mistral v0.3+)  ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``
  json     our own (templates that show no format): one ``{"name": ..., "arguments": ...}``
           object, kept to that by a grammar (``tool_calls.py`` reads it)

Every native reader also takes calls written as bare JSON at the start of the
answer (an object, or an array of objects): what ``tool_choice: "required"``
constrains the output to, and what a template's special marker looks like once
decoding dropped it. A call is an object with a string ``name`` and an object
``arguments`` (or ``parameters``); anything else where a call should be means
the answer is text after all, and it is returned as ``content``.

Streamed, text before the calls goes out as it comes (less a tail that may be
the start of a marker); each call goes out whole once its JSON is complete:
one delta with its index, id, name and arguments.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field

from .reasoning import partial_suffix
from .structured import ToolCalling

FORMATS = ("json", "hermes", "llama3", "mistral")
MARKERS = {"hermes": "<tool_call>", "llama3": "<|python_tag|>", "mistral": "[TOOL_CALLS]"}
SEPARATORS = ("<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "[", "]", ",", ";")
_DECODER = json.JSONDecoder()


def detect_format(template: object) -> str:
    """The tool-call format a chat template teaches (its source names the markers)."""
    source = template if isinstance(template, str) else json.dumps(template)
    if "<tool_call>" in source:
        return "hermes"
    if "[TOOL_CALLS]" in source:
        return "mistral"
    if "<|python_tag|>" in source or ("<|start_header_id|>" in source and '"parameters"' in source):
        return "llama3"
    return "json"


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text


@dataclass
class ToolCallDelta:
    content: str = ""
    name: str = ""  # set once: the call starts
    arguments: str = ""
    index: int = 0  # which call of the answer
    call_id: str = ""


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


@dataclass
class NativeToolCallReader:
    """Reads one answer, fed piece by piece, in a model's own format (``calling.format``)."""

    calling: ToolCalling
    calls: list[ToolCall] = field(default_factory=list)
    _content: list[str] = field(default_factory=list)
    _pending: str = ""
    _in_calls: bool = False
    _started: bool = False  # some non-space text was seen
    _raw_calls: str = ""  # the text of the calls so far: content again if they turn out not to be calls

    def start(self) -> list[ToolCallDelta]:
        return []

    @property
    def content(self) -> str:
        return "".join(self._content)

    def feed(self, text: str) -> list[ToolCallDelta]:
        self._pending += text
        out: list[ToolCallDelta] = []
        if not self._in_calls:
            out += self._read_content()
        if self._in_calls:
            out += self._read_calls(final=False)
        return out

    def finish(self, complete: bool) -> list[ToolCallDelta]:
        out: list[ToolCallDelta] = []
        if not self._in_calls:
            out += self._read_content(final=True)
        if self._in_calls:
            out += self._read_calls(final=True)
        return out

    def _read_content(self, final: bool = False) -> list[ToolCallDelta]:
        """Text up to where the calls start (a marker, or JSON at the very start)."""
        if not self._started:
            head = self._pending.lstrip()
            if not head:
                return []
            self._started = True
            if head[0] in "{[":
                self._in_calls = True
                return []
        marker = MARKERS.get(self.calling.format)
        at = self._pending.find(marker) if marker else -1
        if at >= 0:
            text, self._pending = self._pending[:at], self._pending[at:]
            self._in_calls = True
            return self._emit_content(text)
        keep = 0 if final or not marker else partial_suffix(self._pending, marker)
        text, self._pending = self._pending[:len(self._pending) - keep], self._pending[len(self._pending) - keep:]
        return self._emit_content(text)

    def _read_calls(self, final: bool) -> list[ToolCallDelta]:
        out: list[ToolCallDelta] = []
        while True:
            rest, wait = _skip_separators(self._pending, final)
            self._raw_calls += self._pending[:len(self._pending) - len(rest)]
            self._pending = rest
            if not rest and final and not self.calls:
                return out + self._not_calls()  # markers and nothing more: text after all
            if not rest or wait:
                return out
            try:
                value, end = _DECODER.raw_decode(rest)
            except ValueError:
                if final or not _may_continue(rest):
                    return out + self._not_calls()
                return out
            call = _as_call(value)
            if call is None:
                return out + self._not_calls()
            self._raw_calls = ""
            self._pending = rest[end:]
            if self.calls and not self.calling.parallel:
                continue  # parallel_tool_calls false: the first call only
            name, arguments = call
            self.calls.append(ToolCall(new_call_id(), name, arguments))
            index = len(self.calls) - 1
            out.append(ToolCallDelta(name=name, arguments=arguments, index=index, call_id=self.calls[-1].id))

    def _not_calls(self) -> list[ToolCallDelta]:
        """What looked like a call is text: it (and, before any call, all the text since the calls seemed
        to start) becomes content; calls already read stay."""
        text = self._pending if self.calls else self._raw_calls + self._pending
        self._raw_calls = self._pending = ""
        self._in_calls = False
        return self._emit_content(text)

    def _emit_content(self, text: str) -> list[ToolCallDelta]:
        if not text:
            return []
        self._content.append(text)
        return [ToolCallDelta(content=text)]


def _skip_separators(text: str, final: bool) -> tuple[str, bool]:
    """``text`` past the markers and separators at its start; True when it ends in what may still grow
    into a longer one ("[" of "[TOOL_CALLS]", "<tool" of "<tool_call>"): then wait for more."""
    while True:
        stripped = text.lstrip()
        if not final and stripped and any(sep != stripped and sep.startswith(stripped) for sep in SEPARATORS):
            return stripped, True
        for sep in SEPARATORS:
            if stripped.startswith(sep):
                stripped = stripped[len(sep):]
                break
        else:
            return stripped, False
        text = stripped


def _may_continue(text: str) -> bool:
    """Unparsed text that may still become a call once more comes: a JSON object or a marker under way."""
    if text.startswith("{"):
        return True
    return any(sep.startswith(text) for sep in SEPARATORS)


def _as_call(value: object) -> tuple[str, str] | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return value["name"], json.dumps(arguments, ensure_ascii=False)
