"""Stateful sessions over HTTP (SageMaker's contract for a model container).

    open   POST /invocations  {"requestType": "NEW_SESSION"}
           -> 200 {"session_id", "expires"}, header X-Amzn-SageMaker-New-Session-Id: <id>; Expires=<ISO-8601 UTC>
    use    X-Amzn-SageMaker-Session-Id: <id> on each generation request of the session
    close  POST /invocations  {"requestType": "CLOSE"} with that header
           -> 200 {"session_id", "closed": true}, header X-Amzn-SageMaker-Closed-Session-Id: <id>

SageMaker sends every request of a session to the instance that opened it; the
engine keeps the session's latest prompt blocks cached (``engine/session_pins``)
so the next call's shared prefix is not computed again. A session closes by
itself after ``LLM_BYOC_SESSION_TTL`` seconds idle; ``Expires`` is that time
as of the answer. An id that is not open here is a 404 ``session_not_found``.
"""

from __future__ import annotations

import datetime
from typing import Any

from flask import Response, jsonify

from ..contract import (
    CLOSE_SESSION,
    CLOSED_SESSION_HEADER,
    NEW_SESSION,
    NEW_SESSION_HEADER,
    REQUEST_TYPE,
    SESSION_HEADER,
    is_session_id,
)
from ..engine.seam import ServingEngine
from ..errors import InvalidRequest


def session_request(body: Any) -> str | None:
    """NEW_SESSION or CLOSE when the body is a session request (nothing else in it), else None."""
    if not isinstance(body, dict) or REQUEST_TYPE not in body:
        return None
    kind = body[REQUEST_TYPE]
    if kind not in (NEW_SESSION, CLOSE_SESSION):
        raise InvalidRequest(f'"{REQUEST_TYPE}" must be "{NEW_SESSION}" or "{CLOSE_SESSION}", got {kind!r}')
    extra = sorted(set(body) - {REQUEST_TYPE})
    if extra:
        raise InvalidRequest(f"a {kind} request has no other fields; got {', '.join(extra)}")
    return kind


def session_of(headers: Any) -> str | None:
    """The session a generation request belongs to (its header), checked for shape."""
    value = headers.get(SESSION_HEADER)
    if value is None:
        return None
    value = value.strip()
    if not is_session_id(value) or value == NEW_SESSION:
        raise InvalidRequest(f"{SESSION_HEADER} is not a session id (letters, digits, inner hyphens): {value[:64]!r}; "
                             f'open a session with a {{"{REQUEST_TYPE}": "{NEW_SESSION}"}} request')
    return value


def answer_session_request(engine: ServingEngine, kind: str, headers: Any) -> Response:
    if kind == NEW_SESSION:
        session_id, ttl_s = engine.open_session()
        expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=ttl_s)
        stamp = expires.isoformat(timespec="seconds").replace("+00:00", "Z")
        response = jsonify(session_id=session_id, expires=stamp)
        response.headers[NEW_SESSION_HEADER] = f"{session_id}; Expires={stamp}"
        return response
    session_id = session_of(headers)
    if session_id is None:
        raise InvalidRequest(f"a {CLOSE_SESSION} request names its session in the {SESSION_HEADER} header")
    engine.close_session(session_id)
    response = jsonify(session_id=session_id, closed=True)
    response.headers[CLOSED_SESSION_HEADER] = session_id
    return response
