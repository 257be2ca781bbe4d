"""Stateful sessions: SageMaker routes every request of a session to the same instance.

The container contract (the same locally and behind SageMaker):

    open   POST /invocations  {"requestType": "NEW_SESSION"}
           -> 200, header X-Amzn-SageMaker-New-Session-Id: <id>; Expires=<ISO-8601 UTC>
    use    X-Amzn-SageMaker-Session-Id: <id> on every request of the session
    close  POST /invocations  {"requestType": "CLOSE"}, with that header
           -> header X-Amzn-SageMaker-Closed-Session-Id: <id>

On SageMaker, ``invoke_endpoint`` sends the header from its ``SessionId``
parameter (``"NEW_SESSION"`` to open one) and hands the response headers back
as ``NewSessionId`` / ``ClosedSessionId``; ``invoke_endpoint_with_response_stream``
takes ``SessionId`` but cannot open a session.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from ..contract import CLOSE_SESSION, CLOSED_SESSION_HEADER, NEW_SESSION, NEW_SESSION_HEADER, REQUEST_TYPE, is_session_id
from .errors import EndpointError

OPEN_BODY = {REQUEST_TYPE: NEW_SESSION}
CLOSE_BODY = {REQUEST_TYPE: CLOSE_SESSION}


@dataclass(frozen=True)
class Session:
    id: str
    expires: datetime.datetime | None = None  # UTC, as the container announced it


def check_session_id(value: str) -> str:
    if not isinstance(value, str) or not is_session_id(value):
        raise EndpointError(f"not a session id SageMaker accepts (letters, digits, inner hyphens): {value!r}")
    return value


def session_id_of(session: Session | str | None) -> str | None:
    if session is None:
        return None
    return check_session_id(session.id if isinstance(session, Session) else session)


def parse_new_session(value: str | None) -> Session:
    """``<id>; Expires=<ISO-8601 UTC>`` (the expiry is optional here) -> ``Session``."""
    if not value:
        raise EndpointError(
            f"the endpoint opened no session (its answer has no {NEW_SESSION_HEADER} header): "
            "the model server does not support stateful sessions"
        )
    session_id, _, rest = (part.strip() for part in value.partition(";"))
    expires = None
    if rest:
        key, _, stamp = rest.partition("=")
        if key.strip().lower() != "expires":
            raise EndpointError(f"unexpected {NEW_SESSION_HEADER} value: {value!r}")
        expires = _utc(stamp.strip(), value)
    return Session(check_session_id(session_id), expires)


def _utc(stamp: str, whole: str) -> datetime.datetime:
    try:
        parsed = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        raise EndpointError(f"unreadable session expiry in {NEW_SESSION_HEADER}: {whole!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.astimezone(datetime.timezone.utc)


def check_closed(expected: str, closed: str | None) -> None:
    if closed != expected:
        raise EndpointError(
            f"closing session {expected!r}: the endpoint answered {CLOSED_SESSION_HEADER}={closed!r}"
        )
