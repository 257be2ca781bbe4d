"""Reading a tool call out of a chat answer as it is generated, for plain and streamed answers.

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
import secrets
from dataclasses import dataclass, field

from .structured import ToolCalling

CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"([A-Za-z0-9_-]*)"\s*,\s*"arguments"\s*:\s*')


@dataclass
class ToolCallDelta:
    content: str = ""
    name: str = ""  # set once: the call starts
    arguments: str = ""


@dataclass
class ToolCallReader:
    calling: ToolCalling
    call_id: str = field(default_factory=lambda: "call_" + secrets.token_hex(12))
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


def read_answer(calling: ToolCalling, text: str, complete: bool) -> ToolCallReader:
    """A whole (plain) answer, read."""
    reader = ToolCallReader(calling)
    reader.feed(text)
    reader.finish(complete)
    return reader


def tool_call_json(reader: ToolCallReader) -> dict:
    """OpenAI's ``message.tool_calls[i]``."""
    return {"id": reader.call_id, "type": "function",
            "function": {"name": reader.name, "arguments": reader.arguments}}


def delta_json(reader: ToolCallReader, delta: ToolCallDelta) -> dict:
    """OpenAI's streamed ``choices[i].delta`` for one ``ToolCallDelta``."""
    if delta.content:
        return {"content": delta.content}
    if delta.name:
        return {"tool_calls": [{"index": 0, "id": reader.call_id, "type": "function",
                                "function": {"name": delta.name, "arguments": ""}}]}
    return {"tool_calls": [{"index": 0, "function": {"arguments": delta.arguments}}]}
