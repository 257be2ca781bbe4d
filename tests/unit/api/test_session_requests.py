"""Stateful sessions on /invocations: open, use, close, and what is refused."""

from __future__ import annotations

import datetime

import pytest

from llm_byoc.contract import CLOSED_SESSION_HEADER, NEW_SESSION_HEADER, SESSION_HEADER

TGI = {"inputs": "hello", "parameters": {"max_new_tokens": 2}}


def open_session(client) -> str:
    response = client.post("/invocations", json={"requestType": "NEW_SESSION"})
    assert response.status_code == 200, response.get_json()
    session_id, _, expires = response.headers[NEW_SESSION_HEADER].partition("; Expires=")
    body = response.get_json()
    assert body == {"session_id": session_id, "expires": expires}
    stamp = datetime.datetime.fromisoformat(expires.replace("Z", "+00:00"))
    assert stamp > datetime.datetime.now(datetime.timezone.utc)  # the fake's TTL is 1200 s
    return session_id


def test_open_use_close(client, engine):
    session_id = open_session(client)
    assert session_id in engine.sessions
    response = client.post("/invocations", json=TGI, headers={SESSION_HEADER: session_id})
    assert response.status_code == 200
    assert engine.sessions_used[-1] == session_id
    closed = client.post("/invocations", json={"requestType": "CLOSE"}, headers={SESSION_HEADER: session_id})
    assert closed.status_code == 200 and closed.headers[CLOSED_SESSION_HEADER] == session_id
    assert closed.get_json() == {"session_id": session_id, "closed": True}
    assert session_id not in engine.sessions


def test_a_request_without_the_header_is_in_no_session(client, engine):
    open_session(client)
    assert client.post("/invocations", json=TGI).status_code == 200
    assert engine.sessions_used[-1] is None


def test_a_closed_or_unknown_session_is_a_404(client):
    session_id = open_session(client)
    client.post("/invocations", json={"requestType": "CLOSE"}, headers={SESSION_HEADER: session_id})
    for body in (TGI, {"requestType": "CLOSE"}):
        response = client.post("/invocations", json=body, headers={SESSION_HEADER: session_id})
        assert response.status_code == 404 and response.get_json()["type"] == "session_not_found"


@pytest.mark.parametrize("body, headers, reason", [
    ({"requestType": "OPEN"}, {}, "must be"),
    ({"requestType": "NEW_SESSION", "inputs": "x"}, {}, "no other fields"),
    ({"requestType": "CLOSE"}, {}, "names its session"),
    (TGI, {SESSION_HEADER: "bad id!"}, "not a session id"),
    (TGI, {SESSION_HEADER: "NEW_SESSION"}, "not a session id"),
    (TGI, {SESSION_HEADER: "a" * 300}, "not a session id"),
])
def test_bad_session_requests_are_400(client, body, headers, reason):
    response = client.post("/invocations", json=body, headers=headers)
    assert response.status_code == 400 and reason in response.get_json()["error"]
