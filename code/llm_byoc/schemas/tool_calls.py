"""Reading tool calls out of a chat answer as it is generated, for plain and streamed answers.

``answer_reader`` picks the reader: this module's for our own JSON format and
named calls, ``tool_formats.py``'s for a model's own format.

The grammar (``structured.py``) makes the output one of: the arguments of the
named function ("named"); a call object ``{"name": ..., "arguments": {...}}``
("required", and "auto" when it starts with "{"); text ("auto" otherwise).
``ToolCallReader`` turns the text, fed piece by piece, into deltas: text
content, the call's name (as soon as it is known), and pieces of its
``arguments`` JSON (the call object's closing brace is held back: it is not part
of the arguments). A streamed answer sends these deltas as OpenAI does; a plain
one joins them. A call whose generation ended (``finish_reason`` "stop") is
reported with ``finish_reason: "tool_calls"``; one cut off by ``max_tokens``
keeps "length", with the arguments as far as they got.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .structured import ToolCalling
from .tool_formats import NativeToolCallReader, ToolCall, ToolCallDelta, new_call_id

CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"([A-Za-z0-9_-]*)"\s*,\s*"arguments"\s*:\s*')


@dataclass
class ToolCallReader:
    calling: ToolCalling
    call_id: str = field(default_factory=new_call_id)
    name: str = ""
    is_call: bool | None = None  # None: not known yet (auto, nothing but whitespace so far)
    _pending: str = ""  # text not yet turned into deltas
    _arguments: list[str] = field(default_factory=list)
    _content: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.calling.mode == "named":
            self.is_call, self.name = True, self.calling.name

    def start(self) -> list[ToolCallDelta]:
        return [ToolCallDelta(name=self.name)] if self.calling.mode == "named" else []

    def feed(self, text: str) -> list[ToolCallDelta]:
        self._pending += text
        if self.calling.mode == "named":
            return self._emit_arguments(self._take(len(self._pending)))
        if self.is_call is None:
            head = self._pending.lstrip()
            if not head:
                return []
            self.is_call = head.startswith("{")
        if not self.is_call:
            return self._emit_content(self._take(len(self._pending)))
        if not self.name:
            match = CALL_HEAD.match(self._pending)
            if match is None:
                return []
            self.name = match.group(1)
            self._take(match.end())
            return [ToolCallDelta(name=self.name)] + self._emit_arguments(self._take(self._held_back()))
        return self._emit_arguments(self._take(self._held_back()))

    def finish(self, complete: bool) -> list[ToolCallDelta]:
        """The rest; ``complete``: the output ended where the grammar accepts (not cut off)."""
        rest = self._take(len(self._pending))
        if not self.is_call:
            return self._emit_content(rest)
        if self.calling.mode != "named" and complete:
            rest = rest.rstrip()
            rest = rest[:-1].rstrip() if rest.endswith("}") else rest  # the call object's own brace
        if not self.name:  # cut off before the name was complete
            self._content.append(rest)
            return [ToolCallDelta(content=rest)] if rest else []
        return self._emit_arguments(rest)

    @property
    def content(self) -> str:
        return "".join(self._content)

    @property
    def calls(self) -> list[ToolCall]:
        """The answer's call (at most one in this format), once its name is known."""
        return [ToolCall(self.call_id, self.name, self.arguments)] if self.is_call and self.name else []

    @property
    def arguments(self) -> str:
        return "".join(self._arguments)

    def _held_back(self) -> int:
        """How much of the pending text can go out: all but trailing space and a last "}"."""
        text = self._pending.rstrip()
        if text.endswith("}"):
            text = text[:-1]
        return len(text)

    def _take(self, n: int) -> str:
        taken, self._pending = self._pending[:n], self._pending[n:]
        return taken

    def _emit_arguments(self, text: str) -> list[ToolCallDelta]:
        if not text:
            return []
        self._arguments.append(text)
        return [ToolCallDelta(arguments=text)]

    def _emit_content(self, text: str) -> list[ToolCallDelta]:
        if not text:
            return []
        self._content.append(text)
        return [ToolCallDelta(content=text)]


AnswerReader = ToolCallReader | NativeToolCallReader


def answer_reader(calling: ToolCalling) -> AnswerReader:
    """The reader of one answer: a model's own format, or ours (and every named call: its arguments only)."""
    if calling.mode == "named" or calling.format == "json":
        return ToolCallReader(calling)
    return NativeToolCallReader(calling)


def read_answer(calling: ToolCalling, text: str, complete: bool) -> AnswerReader:
    """A whole (plain) answer, read."""
    reader = answer_reader(calling)
    reader.feed(text)
    reader.finish(complete)
    return reader


def tool_call_json(call: ToolCall) -> dict:
    """OpenAI's ``message.tool_calls[i]``."""
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def delta_json(reader: AnswerReader, delta: ToolCallDelta) -> dict:
    """OpenAI's streamed ``choices[i].delta`` for one ``ToolCallDelta``: a call's first delta carries its
    index, id and name (and, from a model's own format, its whole arguments); later ones more arguments."""
    if delta.content:
        return {"content": delta.content}
    if delta.name:
        call_id = delta.call_id or getattr(reader, "call_id", "")
        return {"tool_calls": [{"index": delta.index, "id": call_id, "type": "function",
                                "function": {"name": delta.name, "arguments": delta.arguments}}]}
    return {"tool_calls": [{"index": delta.index, "function": {"arguments": delta.arguments}}]}
