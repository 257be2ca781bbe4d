"""The handler seam: what a worker process calls for each invoke.

A handler owns one loaded model. ``invoke`` takes the raw request body and
answers the raw response body; it raises ServingError subclasses for bad
input (InvalidRequest 400, UnsupportedMediaType 415), which the worker sends
back as plain (type, message) data.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from ...errors import InvalidRequest, UnsupportedMediaType
from ..messages import InvokeReply, InvokeRequest

JSON = "application/json"


class ModelHandler(Protocol):
    # How many invokes the worker runs at once: 1 for a plain forward pass,
    # more for an engine that batches concurrent requests itself.
    max_concurrency: int

    def invoke(self, invocation: InvokeRequest, body: bytes) -> tuple[InvokeReply, bytes]: ...

    def close(self) -> None: ...


def media_type(content_type: str) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def parse_json_body(invocation: InvokeRequest, body: bytes) -> Any:
    """The JSON request body; 415 for another media type, 400 for bad JSON."""
    kind = media_type(invocation.content_type)
    if kind not in (JSON, "", "application/x-json", "text/json"):
        raise UnsupportedMediaType(f"this model takes application/json, not {kind!r}")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None


def json_reply(value: Any) -> tuple[InvokeReply, bytes]:
    return InvokeReply(content_type=JSON), json.dumps(value, separators=(",", ":")).encode()


def int_option(name: str, raw: Any, default: int, low: int, high: int) -> int:
    """An integer request option from JSON or the query string, validated."""
    if raw is None or raw == "":
        return default
    try:
        value = int(raw) if not isinstance(raw, bool) else None
    except (TypeError, ValueError):
        value = None
    if value is None or isinstance(raw, float) or not low <= value <= high:
        raise InvalidRequest(f"{name} must be an integer from {low} to {high}, got {raw!r}")
    return value


def text_inputs(payload: Any, limit: int) -> tuple[list[str], bool]:
    """``{"inputs": str | [str]}`` -> (texts, was_single)."""
    if not isinstance(payload, dict) or "inputs" not in payload:
        raise InvalidRequest('request body must be a JSON object with "inputs"')
    inputs = payload["inputs"]
    single = isinstance(inputs, str)
    texts = [inputs] if single else inputs
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise InvalidRequest('"inputs" must be a string or a non-empty list of strings')
    if len(texts) > limit:
        raise InvalidRequest(f'"inputs" holds {len(texts)} texts; at most {limit} per request')
    return texts, single
