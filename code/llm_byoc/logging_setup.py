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

No secret is logged, whichever setting carries it. The one place that decides what is a secret:

    redact_value("hf_token", "hf_abc123")                   -> "***"
    redact_value("model", "https://me:hf_abc123@host/m")     -> "https://***@host/m"
    format_args({"model": "m", "hf_token": "hf_abc123"})    -> "hf_token=***, model=m"
    scrub("vLLM refused hf_abc123", {"hf_abc123"})          -> "vLLM refused ***"

A setting or argument is secret when a word of its name (split at ``_``, ``-``, ``.`` and case
changes) is one of ``SECRET_WORDS`` or ends in token, secret or password: ``HF_TOKEN``,
``HUGGING_FACE_HUB_TOKEN``, ``hf_token``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``api_key``, ``X-Amz-Signature``; ``max_num_batched_tokens`` and ``tokenizer`` are not. Values under
such a name, at any depth of a dict, are masked whole; other text has the credentials of its URLs
masked: the userinfo (``https://user:token@host``) and the query parameters with a secret name (a
presigned URL's ``X-Amz-Credential``, ``X-Amz-Signature``, ...). Settings and engine arguments are
redacted where they are formatted (``config_aliases``' notes and errors, vLLM's arguments);
``scrub`` is for text we did not write (a client's error), and every line ``JsonFormatter``
writes has its URL credentials masked too.
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
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

from .contract import INFERENCE_ID_HEADER, REQUEST_ID_HEADER

_MAX_ID_LEN = 128
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:\-]+$")
# LogRecord attributes that are not "extra" fields.
_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}

MASK = "***"
SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "key", "apikey", "credential", "credentials",
                          "auth", "authorization", "signature", "sig", "cookie"})
_SECRET_SUFFIXES = ("token", "secret", "password")
_MIN_HARVESTED = 6  # a shorter value under a secret name ("on", "1") is not hunted for in free text
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s?#@]*(?:@[^/\s?#@]*)*@")
_QUERY_PARAM = re.compile(r"(?P<lead>[?&;](?P<name>[^=&#;\s?]+)=)(?P<value>[^&#;\s]*)")


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
    """time (UTC, ISO 8601), level, logger, message, request ids, extras, exception; URL credentials masked."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact_url(record.getMessage()),
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
            entry["exception"] = redact_url(self.formatException(record.exc_info))
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


# --- secrets: never in a log line or an error ------------------------------------------------


def looks_secret(name: str) -> bool:
    """Whether a setting, argument or query parameter of this name carries a secret."""
    return any(w in SECRET_WORDS or w.endswith(_SECRET_SUFFIXES) for w in map(str.lower, _WORDS.findall(name)))


def redact_url(text: str) -> str:
    """``text`` with the credentials of every URL in it masked (userinfo, secret query parameters)."""
    if "://" in text:
        text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    if "=" in text:
        text = _QUERY_PARAM.sub(lambda m: m.group("lead") + MASK if m.group("value") and looks_secret(m.group("name"))
                                else m.group(0), text)
    return text


def redact_value(name: str, value):
    """``value`` as it may be shown under ``name``: masked whole where the name is secret, else with the
    secret keys of a dict masked and the credentials of the URLs in its text."""
    if looks_secret(name) and not (value is None or value == "" or isinstance(value, bool)):
        return MASK  # a flag (use_auth_token=true) says nothing secret
    if isinstance(value, Mapping):
        return {key: redact_value(str(key), item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_value("", item) for item in value)
    if isinstance(value, str):
        return redact_url(value)
    return value


def format_args(args: Mapping[str, object]) -> str:
    """``name=value, ...`` sorted by name, secrets masked: a log line of settings or engine arguments."""
    return ", ".join(f"{name}={redact_value(name, value)}" for name, value in sorted(args.items()))


def secret_values(mapping: Mapping[str, object]) -> set[str]:
    """The values under secret names in ``mapping`` (an environment, engine arguments), at any depth, a
    JSON object held as text included (``LLM_BYOC_VLLM_ENGINE_ARGS``): what ``scrub`` hunts for."""
    found: set[str] = set()
    for name, value in mapping.items():
        if isinstance(value, str) and value.lstrip().startswith("{"):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        if isinstance(value, Mapping):
            found |= secret_values(value)
        elif looks_secret(str(name)) and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            if len(text := str(value).strip()) >= _MIN_HARVESTED:
                found.add(text)
    return found


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Text we did not write (a client's error) with each of ``secrets`` and URL credentials masked."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return redact_url(text)
