"""The streaming response: token events -> SSE frames, written as they are made.

The generator owns the request handle. Whatever ends it — the last token, an
engine error, the request budget running out, or the client going away (the
WSGI server closes the generator: GeneratorExit at the current ``yield``; or,
between tokens, the client watch aborts the handle) — the sequences are
aborted if they had not finished, so their batch slots and KV cache are freed
at the next engine step. Once the 200 and the first bytes
are out, an error can only be reported in-band, as a last event
``{"error": ..., "type": ...}``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from ..engine.outputs import TokenEvent
from ..errors import ServingError
from ..protocol import FinishReason
from ..schemas.invocation import StreamWriter
from ..schemas.sse import sse_event
from .admission import Deadline
from .errors import error_body
from .request_log import RequestLog

log = logging.getLogger(__name__)


def stream_frames(
    events: Iterator[TokenEvent], flight: Any, writer: StreamWriter, deadline: Deadline, request_log: RequestLog
) -> Iterator[bytes]:
    """SSE frames of ``events`` (``flight.handle.events()``, bounded by the same ``deadline``)."""
    handle = flight.handle
    finished = False
    status = "ok"
    try:
        yield from _frames(writer.start())
        for event in events:
            request_log.on_token(event)
            if event.finish_reason is FinishReason.ABORT:
                flight.raise_if_stopped()  # the server is shutting down: say so
                status = "aborted"  # the client left (the watch aborted it)
            yield from _frames(writer.on_event(event))
            if event.finish_reason is None:
                deadline.remaining()  # RequestTimeout once the budget is spent
        flight.raise_if_stopped()
        finished = True
        yield from _frames(writer.finish())
    except GeneratorExit:
        status = "client_disconnected"
        raise
    except ServingError as exc:
        status = exc.error_type
        log.warning("stream %s ended by %s: %s", request_log.request_id, exc.error_type, exc.message)
        yield sse_event(error_body(exc.status_code, exc.message, exc.error_type))
    except Exception:
        status = "internal_error"
        log.exception("stream %s failed", request_log.request_id)
        yield sse_event(error_body(500, "internal server error", "internal_error"))
    finally:
        if not finished:
            _abort(handle, request_log.request_id)
        request_log.finish(200, stream_status=status)


def _abort(handle: Any, request_id: str) -> None:
    try:
        handle.abort()
    except Exception:  # the engine may already be gone; the stream is over either way
        log.warning("aborting %s failed", request_id, exc_info=True)


def _frames(payloads: Iterator[Any]) -> Iterator[bytes]:
    for payload in payloads:
        yield payload if isinstance(payload, bytes) else sse_event(payload)
