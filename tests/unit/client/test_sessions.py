"""Stateful sessions in the client: the container contract over HTTP, and SageMaker's SessionId members."""

from __future__ import annotations

import datetime
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from botocore.stub import Stubber
from llm_byoc.client import EndpointClient, EndpointError, Session
from llm_byoc.client.sessions import parse_new_session

EXPIRES = "2030-01-02T03:04:05Z"


class SessionContainer(BaseHTTPRequestHandler):
    """Opens, checks and closes sessions the way the container's contract says."""

    protocol_version = "HTTP/1.1"
    seen: list[dict] = []
    open_ids: set[str] = set()
    answer_new_session = True  # False: a server that does not know sessions (200, no header)

    def log_message(self, *_):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        session = self.headers.get("X-Amzn-SageMaker-Session-Id")
        SessionContainer.seen.append({"path": self.path, "session": session, "body": body})
        headers = {}
        if body == {"requestType": "NEW_SESSION"}:
            if SessionContainer.answer_new_session:
                new_id = f"s{len(SessionContainer.seen)}"
                SessionContainer.open_ids.add(new_id)
                headers["X-Amzn-SageMaker-New-Session-Id"] = f"{new_id}; Expires={EXPIRES}"
        elif body == {"requestType": "CLOSE"}:
            SessionContainer.open_ids.discard(session)
            headers["X-Amzn-SageMaker-Closed-Session-Id"] = session
        elif session is not None and session not in SessionContainer.open_ids:
            return self._json(400, {"error": f"session {session!r} is not open", "type": "invalid_request"})
        self._json(200, [{"generated_text": "ok"}], headers)

    def _json(self, status: int, obj, headers: dict | None = None) -> None:
        raw = json.dumps(obj).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", "Content-Length": str(len(raw)), **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture(scope="module")
def container_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), SessionContainer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def fresh_container():
    SessionContainer.seen.clear()
    SessionContainer.open_ids.clear()
    SessionContainer.answer_new_session = True


def test_parse_new_session_header():
    session = parse_new_session(f"abc-123; Expires={EXPIRES}")
    assert session == Session("abc-123", datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc))
    assert parse_new_session("abc").expires is None


@pytest.mark.parametrize("value", [None, "", "bad id; Expires=2030-01-01T00:00:00Z", "a; Expires=soon", "a; Max=1"])
def test_unusable_new_session_headers_are_clear_errors(value):
    with pytest.raises(EndpointError, match="(?i)session"):
        parse_new_session(value)


def test_open_use_close_over_http(container_url):
    client = EndpointClient.local(container_url)
    with client.session() as session:
        assert session.id in SessionContainer.open_ids and session.expires.year == 2030
        assert client.invoke({"inputs": "hi"}, session=session) == [{"generated_text": "ok"}]
    assert SessionContainer.open_ids == set()
    opened, used, closed = SessionContainer.seen
    assert (opened["path"], opened["session"], opened["body"]) == ("/invocations", None, {"requestType": "NEW_SESSION"})
    assert (used["session"], used["body"]) == (session.id, {"inputs": "hi"})
    assert (closed["session"], closed["body"]) == (session.id, {"requestType": "CLOSE"})


def test_a_request_without_a_session_sends_no_session_header(container_url):
    EndpointClient.local(container_url).invoke({"inputs": "hi"})
    assert SessionContainer.seen[0]["session"] is None


def test_the_session_closes_when_the_body_fails(container_url):
    client = EndpointClient.local(container_url)
    with pytest.raises(RuntimeError, match="boom"), client.session():
        raise RuntimeError("boom")
    assert SessionContainer.open_ids == set()
    assert SessionContainer.seen[-1]["body"] == {"requestType": "CLOSE"}


def test_a_server_without_sessions_is_a_clear_error(container_url):
    SessionContainer.answer_new_session = False
    with pytest.raises(EndpointError, match="does not support stateful sessions"):
        EndpointClient.local(container_url).open_session()


def test_a_closed_session_is_refused_by_the_container(container_url):
    client = EndpointClient.local(container_url)
    session = client.open_session()
    client.close_session(session)
    with pytest.raises(EndpointError, match="not open") as info:
        client.invoke({"inputs": "hi"}, session=session)
    assert info.value.status_code == 400


def test_a_malformed_session_id_never_leaves_the_client(container_url):
    with pytest.raises(EndpointError, match="session id"):
        EndpointClient.local(container_url).invoke({"inputs": "hi"}, session="a b")
    assert SessionContainer.seen == []


@pytest.fixture
def runtime():
    return boto3.client("sagemaker-runtime", region_name="us-east-1")


def expected(body: dict, **extra) -> dict:
    return {"EndpointName": "ep", "Body": json.dumps(body).encode(), "ContentType": "application/json",
            "Accept": "application/json", **extra}


def test_sagemaker_sessions_use_the_runtime_members(runtime):
    """SessionId in; NewSessionId / ClosedSessionId out: botocore validates the names against its model."""
    with Stubber(runtime) as stub:
        stub.add_response("invoke_endpoint", {"Body": io.BytesIO(b"{}"), "NewSessionId": f"s-1; Expires={EXPIRES}"},
                          expected({"requestType": "NEW_SESSION"}, SessionId="NEW_SESSION"))
        stub.add_response("invoke_endpoint", {"Body": io.BytesIO(b'[{"generated_text": "ok"}]')},
                          expected({"inputs": "hi"}, SessionId="s-1"))
        stub.add_response("invoke_endpoint", {"Body": io.BytesIO(b"{}"), "ClosedSessionId": "s-1"},
                          expected({"requestType": "CLOSE"}, SessionId="s-1"))
        client = EndpointClient.sagemaker("ep", client=runtime)
        with client.session() as session:
            assert session.id == "s-1"
            assert client.invoke({"inputs": "hi"}, session=session) == [{"generated_text": "ok"}]
        stub.assert_no_pending_responses()


def test_sagemaker_close_answering_another_id_is_an_error(runtime):
    with Stubber(runtime) as stub:
        stub.add_response("invoke_endpoint", {"Body": io.BytesIO(b"{}"), "ClosedSessionId": "other"},
                          expected({"requestType": "CLOSE"}, SessionId="s-1"))
        with pytest.raises(EndpointError, match="other"):
            EndpointClient.sagemaker("ep", client=runtime).close_session("s-1")


def test_sagemaker_stream_sends_the_session(runtime):
    from sagemaker_runtime_emulator import install, payload_part

    chunk = {"index": 0, "token": {"id": 1, "text": "네", "logprob": 0.0, "special": False},
             "generated_text": "네", "details": {"finish_reason": "length"}}
    emulator = install(runtime, payload_part(f"data: {json.dumps(chunk)}\n\n".encode()))
    events = list(EndpointClient.sagemaker("ep", client=runtime).stream({"inputs": "hi"}, session="s-1"))
    assert [e.text for e in events] == ["네"]
    assert emulator.requests[0].headers["X-Amzn-SageMaker-Session-Id"] == b"s-1"
