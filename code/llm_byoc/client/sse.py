"""Incremental server-sent-events decoder over arbitrary byte chunks.

Chunks arrive as the network (or SageMaker's PayloadPart events) cuts them:
an event, a line, even one UTF-8 character can be split across two chunks.
An incremental UTF-8 decoder holds back half a character, and a line buffer
holds back half a line, so ``feed`` only ever returns complete events.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from .errors import StreamError


@dataclass(frozen=True)
class SSEMessage:
    """One dispatched event: its ``event:`` name ("message" if none) and data."""

    event: str
    data: str


class SSEDecoder:
    """Feed bytes, get the complete events they finish (WHATWG SSE rules)."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self._pending = ""  # text after the last complete line
        self._data: list[str] = []
        self._event = ""

    def feed(self, chunk: bytes) -> list[SSEMessage]:
        try:
            text = self._utf8.decode(chunk, final=False)
        except UnicodeDecodeError as exc:
            raise StreamError(f"the stream is not valid UTF-8: {exc.reason}") from None
        self._pending += text
        return self._drain_lines(final=False)

    def close(self) -> list[SSEMessage]:
        """End of stream: flush what is left; a cut character is an error."""
        try:
            self._pending += self._utf8.decode(b"", final=True)
        except UnicodeDecodeError:
            raise StreamError("the stream ended in the middle of a UTF-8 character") from None
        messages = self._drain_lines(final=True)
        if self._pending:
            self._take_line(self._pending)
            self._pending = ""
        # Lenient: data without the closing blank line still counts as an event.
        message = self._dispatch()
        return messages + ([message] if message else [])

    def _drain_lines(self, final: bool) -> list[SSEMessage]:
        messages: list[SSEMessage] = []
        while True:
            end = _line_end(self._pending, final)
            if end is None:
                return messages
            line, self._pending = self._pending[: end[0]], self._pending[end[1] :]
            if line == "":
                message = self._dispatch()
                if message:
                    messages.append(message)
            else:
                self._take_line(line)

    def _take_line(self, line: str) -> None:
        if line.startswith(":"):
            return  # a comment (keep-alive)
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        # "id" and "retry" mean nothing to a one-shot invocation stream.

    def _dispatch(self) -> SSEMessage | None:
        if not self._data:
            self._event = ""
            return None
        message = SSEMessage(event=self._event or "message", data="\n".join(self._data))
        self._data, self._event = [], ""
        return message


def _line_end(text: str, final: bool) -> tuple[int, int] | None:
    """(end of line, start of the next) for the first complete line, or None.

    A CR at the very end may be the first half of CRLF, so it waits for the
    next chunk unless the stream is over.
    """
    lf, cr = text.find("\n"), text.find("\r")
    if cr == -1 or (lf != -1 and lf < cr):
        return None if lf == -1 else (lf, lf + 1)
    if cr + 1 < len(text):
        return cr, cr + 2 if text[cr + 1] == "\n" else cr + 1
    return (cr, cr + 1) if final else None
