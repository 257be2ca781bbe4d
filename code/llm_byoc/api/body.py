"""Reading the request body: content type, size limit, then JSON.

Only ``application/json`` is accepted (any ``charset`` must be UTF-8): every
schema this server speaks is JSON, and a clear 415 beats guessing what a text
or binary body meant. The size limit is checked on the declared
Content-Length first and then on the bytes actually read (a chunked body
declares none), so an oversized body is refused without being held in memory.
JSON nested deeper than ``MAX_JSON_DEPTH`` is refused with a 400 naming the
limit (no schema here nests past 5; a very deep body would otherwise exhaust
the parser's recursion).
"""

from __future__ import annotations

import json
from typing import Any

from flask import Request
from werkzeug.exceptions import ClientDisconnected, HTTPException

from ..errors import ClientTimeout, InvalidRequest, PayloadTooLarge, UnsupportedMediaType

JSON_MIMETYPE = "application/json"
MAX_JSON_DEPTH = 32


def check_content_type(request: Request) -> None:
    if request.mimetype != JSON_MIMETYPE:
        shown = request.content_type or "none"
        raise UnsupportedMediaType(f"Content-Type must be {JSON_MIMETYPE}, got {shown}")
    charset = request.mimetype_params.get("charset", "utf-8").lower()
    if charset not in ("utf-8", "utf8"):
        raise UnsupportedMediaType(f"charset must be utf-8, got {charset}")


def read_body(request: Request, max_bytes: int) -> bytes:
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise PayloadTooLarge(_too_large(declared, max_bytes))
    chunks, total = [], 0
    while True:  # to the end: a short read is not the end of a chunked body
        chunk = read_some(request, min(64 * 1024, max_bytes + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > max_bytes:
            raise PayloadTooLarge(_too_large(None, max_bytes))
        chunks.append(chunk)


def read_some(request: Request, size: int) -> bytes:
    """Up to ``size`` bytes of the body; what goes wrong reading the client's bytes is the client's."""
    try:
        return request.stream.read(size)
    except (ClientDisconnected, OSError) as exc:  # the socket's receive timeout, or the client gone mid-body
        raise ClientTimeout(f"the request body stopped arriving ({type(exc).__name__})") from None
    except HTTPException:
        raise  # over MAX_CONTENT_LENGTH: 413
    except Exception as exc:  # the server's framing refused it (a bad chunk size, ...)
        raise InvalidRequest(f"the request body is malformed: {exc}") from None


def read_all(request: Request) -> bytes:
    """The whole body (Flask's MAX_CONTENT_LENGTH applies), read as ``read_some`` does."""
    chunks = []
    while chunk := read_some(request, 64 * 1024):
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(data: bytes) -> Any:
    if not data:
        raise InvalidRequest("the request body is empty; send a JSON object")
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise InvalidRequest("the request body is not valid UTF-8") from None
    except ValueError as exc:
        raise InvalidRequest(f"malformed JSON: {exc}") from None
    except RecursionError:
        raise InvalidRequest(_too_deep()) from None
    if not within_depth(value, MAX_JSON_DEPTH):
        raise InvalidRequest(_too_deep())
    return value


def within_depth(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest at most ``limit`` deep (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return True


def _too_deep() -> str:
    return f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels (the limit)"


def read_json(request: Request, max_bytes: int) -> Any:
    check_content_type(request)
    return parse_json(read_body(request, max_bytes))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _too_large(declared: int | None, max_bytes: int) -> str:
    size = f"{declared} bytes" if declared is not None else "more"
    return f"request body is {size}; the limit is {max_bytes} bytes (SAGEMAKER_MAX_PAYLOAD_IN_MB)"
