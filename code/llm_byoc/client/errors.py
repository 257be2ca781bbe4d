"""Errors a caller of an endpoint can see, with what the server said.

The container answers a refused request with ``{"error": message, "type": name}``
and an HTTP status (see ``llm_byoc.errors``); SageMaker wraps that as a
``ModelError`` carrying the original status and body. Both become an
``EndpointError`` here, so a load generator can count 429s and 503s apart.
"""

from __future__ import annotations

import json


class EndpointError(Exception):
    """An invocation that failed before or instead of producing a result."""

    def __init__(self, message: str, status_code: int | None = None, error_type: str | None = None):
        super().__init__(message)
        self.message = message
        self.status_code = status_code  # the container's HTTP status, when known
        self.error_type = error_type  # e.g. "queue_full", "model_not_found"

    def __str__(self) -> str:
        labels = [f"HTTP {self.status_code}"] if self.status_code else []
        labels += [self.error_type] if self.error_type else []
        return f"{' '.join(labels)}: {self.message}" if labels else self.message


class StreamError(EndpointError):
    """A failure reported in the middle of a response stream."""


def error_from_body(status_code: int | None, body: bytes | str, fallback: str) -> EndpointError:
    """Rebuild the container's ``{"error", "type"}`` body, or keep the raw text."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return EndpointError(data["error"], status_code, data.get("type"))
    if isinstance(data, dict) and isinstance(data.get("error"), dict):  # OpenAI shape
        inner = data["error"]
        return EndpointError(str(inner.get("message", fallback)), status_code, inner.get("type"))
    return EndpointError(text.strip()[:500] or fallback, status_code)
