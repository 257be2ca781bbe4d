"""Structured logs: one JSON object per line, carrying the request id.

    configure_logging("info")              # once, at start-up
    register_request_context(app)          # Flask: every request gets an id
    log.info("generation done", extra={"output_tokens": 42})
    -> {"time": "...", "level": "INFO", "logger": "llm_byoc.api", "message": "generation done",
        "request_id": "7f0c...", "inference_id": "7f0c...", "output_tokens": 42}

The id is SageMaker's ``X-Amzn-SageMaker-Inference-Id`` when the request
has one (so our lines join CloudWatch's), else the caller's ``X-Request-Id``,
else a new UUID. It lives in a contextvar, so any log line written while
the request is served carries it, including lines from a streaming
generator, without passing it around.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

from .contract import INFERENCE_ID_HEADER, REQUEST_ID_HEADER

_MAX_ID_LEN = 128
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:\-]+$")
# LogRecord attributes that are not "extra" fields.
_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


@dataclass(frozen=True)
class RequestContext:
    request_id: str
    inference_id: str | None = None  # set when SageMaker gave the id


_current: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar("llm_byoc_request", default=None)


def current_request() -> RequestContext | None:
    return _current.get()


def _clean(value: str | None) -> str | None:
    """A header value usable as an id: bounded and free of control characters."""
    if not value:
        return None
    value = value.strip()
    if not value or len(value) > _MAX_ID_LEN or not _SAFE_ID.match(value):
        return None
    return value


def context_from_headers(headers: Mapping[str, str]) -> RequestContext:
    """SageMaker inference id if given, else X-Request-Id, else a new id."""
    inference_id = _clean(headers.get(INFERENCE_ID_HEADER))
    if inference_id:
        return RequestContext(inference_id, inference_id)
    return RequestContext(_clean(headers.get(REQUEST_ID_HEADER)) or uuid.uuid4().hex)


def set_request_context(context: RequestContext) -> contextvars.Token:
    return _current.set(context)


def reset_request_context(token: contextvars.Token) -> None:
    try:
        _current.reset(token)
    except ValueError:  # set in another context (another thread): just clear ours
        _current.set(None)


@contextmanager
def request_context(headers: Mapping[str, str] | None = None, request_id: str | None = None) -> Iterator[RequestContext]:
    """Everything logged inside carries the request's id."""
    context = RequestContext(request_id) if request_id else context_from_headers(headers or {})
    token = set_request_context(context)
    try:
        yield context
    finally:
        reset_request_context(token)


class JsonFormatter(logging.Formatter):
    """time (UTC, ISO 8601), level, logger, message, request ids, extras, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = _current.get()
        if context is not None:
            entry["request_id"] = context.request_id
            if context.inference_id:
                entry["inference_id"] = context.inference_id
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_") and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(level: str | int = "info", stream: IO[str] | None = None) -> logging.Handler:
    """Send every log record to ``stream`` (stderr) as JSON lines; idempotent."""
    if isinstance(level, str):
        numeric = logging.getLevelName(level.upper())
        if not isinstance(numeric, int):
            raise ValueError(f"unknown log level {level!r}")
        level = numeric
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_llm_byoc", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler._llm_byoc = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def register_request_context(app, access_log: bool = True) -> None:
    """Flask: give each request its id (echoed as ``X-Request-Id``) and, with
    ``access_log``, log one line when its body is done (streams included)."""
    from flask import g, request

    access = logging.getLogger("llm_byoc.access")

    @app.before_request
    def _enter() -> None:
        g.llm_byoc_log_token = set_request_context(context_from_headers(request.headers))
        g.llm_byoc_log_start = time.perf_counter()

    @app.after_request
    def _leave(response):
        context, token = _current.get(), g.pop("llm_byoc_log_token", None)
        if context is None or token is None:
            return response
        response.headers.setdefault(REQUEST_ID_HEADER, context.request_id)
        method, path, status, start = request.method, request.path, response.status_code, g.llm_byoc_log_start

        def done() -> None:
            if access_log:
                fields = {"method": method, "path": path, "status": status,
                          "duration_s": round(time.perf_counter() - start, 6)}
                access.info("%s %s %s", method, path, status, extra=fields)
            reset_request_context(token)

        response.call_on_close(done)  # after the last byte of a stream, still in the request's context
        return response
