"""Token events decoded from either streaming schema the container speaks.

TGI style:    {"index", "token": {"id", "text", "logprob", "special"},
               "generated_text": null | str, "details": null | {"finish_reason", ...}}
OpenAI style: {"object": "chat.completion.chunk" | "text_completion",
               "choices": [{"index", "delta": {"content"}, "finish_reason"}
                           | {"index", "text", "finish_reason"}]}
              and, with ``stream_options.include_usage``, a last chunk {"choices": [], "usage": {...}}:
              an event with no text, no finish reason and the usage in ``raw["usage"]``.
An ``{"error", "type"}`` object (or an ``event: error``) in the stream is a
failure after the response started, raised as ``StreamError``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator

from .errors import StreamError
from .sse import SSEMessage

DONE = "[DONE]"


@dataclass(frozen=True)
class StreamEvent:
    text: str  # the new text this event adds (may be "" on the final event)
    index: int  # which prompt / choice it belongs to
    token_id: int | None  # TGI style only
    finish_reason: str | None  # set on the last event of its index
    raw: dict = field(repr=False, compare=False)


def events_from_message(message: SSEMessage) -> Iterator[StreamEvent]:
    """The token events one SSE message carries (none for role-only chunks)."""
    try:
        obj = json.loads(message.data)
    except ValueError:
        raise StreamError(f"undecodable stream event: {message.data[:200]!r}") from None
    if not isinstance(obj, dict):
        raise StreamError(f"unexpected stream event: {message.data[:200]!r}")
    if message.event == "error" or "error" in obj:
        raise _stream_error(obj)
    if "choices" in obj:
        yield from _openai_events(obj)
    elif "token" in obj:
        yield _tgi_event(obj)
    else:
        raise StreamError(f"unknown stream event schema: {message.data[:200]!r}")


def _stream_error(obj: dict) -> StreamError:
    error = obj.get("error")
    if isinstance(error, dict):  # OpenAI shape
        return StreamError(str(error.get("message", error)), None, error.get("type"))
    return StreamError(str(error or obj), None, obj.get("type"))


def _tgi_event(obj: dict) -> StreamEvent:
    token = obj.get("token") or {}
    details = obj.get("details") or {}
    return StreamEvent(
        text=str(token.get("text") or ""),
        index=int(obj.get("index") or 0),
        token_id=token.get("id"),
        finish_reason=details.get("finish_reason"),
        raw=obj,
    )


def _openai_events(obj: dict) -> Iterator[StreamEvent]:
    if not obj.get("choices") and isinstance(obj.get("usage"), dict):
        yield StreamEvent(text="", index=0, token_id=None, finish_reason=None, raw=obj)  # the closing usage chunk
        return
    for choice in obj.get("choices") or []:
        delta: Any = choice.get("delta")
        text = (delta or {}).get("content") if delta is not None else choice.get("text")
        finish = choice.get("finish_reason")
        if not text and finish is None:
            continue  # the opening {"role": "assistant"} chunk carries no token
        yield StreamEvent(
            text=str(text or ""),
            index=int(choice.get("index") or 0),
            token_id=None,
            finish_reason=finish,
            raw=obj,
        )
