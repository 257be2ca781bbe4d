"""The container's gunicorn worker (ThreadPerConnectionWorker) with the real Flask app
over the fake engine: no hidden queue, 429 beyond the connection limit with /ping
still answered, gunicorn's own errors as JSON, a stalled reader cut off, and
raw-socket fuzzing of request lines and headers.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st
from fixtures.sse_events import sse_payloads
from serve_helpers import free_port, stop_process, wait_for_ping

from llm_byoc.api.errors import TGI_PATHS
from llm_byoc.api.serve import OVERFLOW_CONNECTIONS, WORKER_CLASS

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parents[1]
MAX_CONNECTIONS = 24
TIMEOUT_S = 3  # SAGEMAKER_MODEL_SERVER_TIMEOUT: also how long a stalled reader is given


class Gunicorn:
    def __init__(self, log_path: Path, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable, "-m", "gunicorn", "--worker-class", WORKER_CLASS, "--workers", "1",
            "--threads", str(MAX_CONNECTIONS), "--worker-connections", str(MAX_CONNECTIONS + OVERFLOW_CONNECTIONS),
            "--bind", f"127.0.0.1:{self.port}", "--timeout", "30", "--keep-alive", "5",
            "--log-level", "warning", "fakes.fake_wsgi:create()",
        ]
        full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(TESTS)]),
                        SAGEMAKER_MODEL_SERVER_TIMEOUT=str(TIMEOUT_S),
                        LLM_BYOC_MAX_CONNECTIONS=str(MAX_CONNECTIONS), **env)
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(command, env=full_env, stdout=self._log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        stop_process(self.proc, 30)
        self._log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = Gunicorn(tmp_path_factory.mktemp("gunicorn") / "gunicorn.log", FAKE_TOKEN_DELAY_S="0.02")
    try:
        wait_for_ping(server.url, 60, server.proc)
        yield server
    finally:
        server.stop()


def raw(port: int, data: bytes, timeout: float = 5.0) -> tuple[int, dict, bytes]:
    """Send raw bytes; (status, headers, body) of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
                if _complete(received):
                    break
        except (ConnectionResetError, TimeoutError):
            pass
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if "content-length" in headers:
        body = body[: int(headers["content-length"])]  # the first answer only (a pipelined one may follow)
    return int(lines[0].split(" ")[1]), headers, body


def _complete(data: bytes) -> bool:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def assert_json_error(status: int, headers: dict, body: bytes, tgi: bool = False) -> dict:
    """``tgi``: the request named one of TGI's routes: the app answers it in TGI's shape (``error_type``), but
    what gunicorn refuses before the app sees it (a bad HTTP version, say) keeps ours."""
    assert headers.get("content-type", "").startswith("application/json"), (status, headers, body[:200])
    payload = json.loads(body)
    assert set(payload) in ([{"error", "type"}, {"error", "error_type"}] if tgi else [{"error", "type"}]), payload
    return payload


@pytest.mark.parametrize(
    "request_bytes, status, error_type",
    [
        (b"GARBAGE\r\n\r\n", 400, "invalid_request"),
        (b"GET /ping HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431, "header_too_large"),
        (b"GET /ping HTTP/1.1\r\nBad Header: x\r\n\r\n", 400, "invalid_request"),
        (b"GET /ping HTTP/1.1\r\nX: a\x01b\r\n\r\n", 400, "invalid_request"),
        (b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n\r\n", 414, "uri_too_long"),
        (b"POST /invocations HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400, "invalid_request"),
    ],
)
def test_gunicorn_s_own_errors_are_our_json(server, request_bytes, status, error_type):
    got, headers, body = raw(server.port, request_bytes)
    assert got == status
    assert assert_json_error(got, headers, body)["type"] == error_type


def test_a_malformed_chunked_body_is_400_and_a_body_that_stops_is_408(server):
    head = b"POST /invocations HTTP/1.1\r\nContent-Type: application/json\r\n"
    status, headers, body = raw(server.port, head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
    assert status == 400 and "malformed" in assert_json_error(status, headers, body)["error"]
    started = time.monotonic()
    status, headers, body = raw(server.port, head + b"Content-Length: 100\r\n\r\n{\"inputs\"", timeout=TIMEOUT_S + 5)
    assert status == 408 and assert_json_error(status, headers, body)["type"] == "client_timeout"
    assert TIMEOUT_S - 0.5 < time.monotonic() - started < TIMEOUT_S + 3


def test_ping_is_answered_at_once_while_every_thread_streams(server):
    """Streams fill all but one of the connections; /ping on the last one is not queued behind them."""
    body = {"inputs": "x" * 100, "stream": True, "parameters": {"max_new_tokens": 100}}  # 2 s each

    def stream(_):
        with requests.post(f"{server.url}/invocations", json=body, stream=True, timeout=30) as response:
            return response.status_code, len(sse_payloads(response))

    with ThreadPoolExecutor(MAX_CONNECTIONS - 2) as pool:
        futures = [pool.submit(stream, i) for i in range(MAX_CONNECTIONS - 2)]
        time.sleep(0.5)
        latencies = []
        for _ in range(10):
            started = time.monotonic()
            assert requests.get(f"{server.url}/ping", timeout=5, headers={"Connection": "close"}).status_code == 200
            latencies.append(time.monotonic() - started)
        results = [f.result() for f in futures]
    assert all(status == 200 and events == 100 for status, events in results), results
    assert max(latencies) < 2.0, latencies  # the SageMaker bound; typically a few ms


def test_beyond_the_connection_limit_a_fast_429_and_ping_still_answers(server):
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.3)
        started = time.monotonic()
        body = b'{"inputs": "x"}'
        status, headers, payload = raw(server.port, b"POST /invocations HTTP/1.1\r\nContent-Type: application/json\r\n"
                                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        elapsed = time.monotonic() - started
        assert status == 429 and headers["retry-after"] == "1" and headers["connection"] == "close"
        assert assert_json_error(status, headers, payload)["type"] == "too_many_connections"
        assert elapsed < 1.0, elapsed
        status, _, payload = raw(server.port, b"GET /ping HTTP/1.1\r\n\r\n")
        assert status == 200 and json.loads(payload)["status"] == "ready"
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.3)
    assert requests.post(f"{server.url}/invocations", json={"inputs": "ab"}, timeout=10).status_code == 200


def test_a_client_that_stops_reading_is_cut_off_after_the_budget(server):
    """~5 MB of events to a client that reads nothing: the server's send times out and it hangs up."""
    body = json.dumps({"inputs": "y" * 50_000, "stream": True, "parameters": {"max_new_tokens": 50_000}}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(b"POST /invocations HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))
    time.sleep(TIMEOUT_S + 4)  # the buffers fill, the server's send blocks, then times out
    received, closed = 0, False
    sock.settimeout(5)
    try:
        while chunk := sock.recv(1 << 20):
            received += len(chunk)
        closed = True
    except ConnectionResetError:
        closed = True
    except TimeoutError:
        pass
    finally:
        sock.close()
    assert closed, "the server kept the stalled connection open"
    assert received < 50_000 * 100, "the whole stream arrived: the client never stalled the server"
    assert requests.get(f"{server.url}/ping", timeout=5).status_code == 200


request_lines = st.binary(max_size=120) | st.builds(
    lambda method, path, version: f"{method} {path} {version}".encode("latin-1", "replace"),
    st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "FOO", "G\x00T", ""]),
    st.text(max_size=60).map(lambda s: "/" + s),
    st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", "http/1.1", ""]),
)
header_lines = st.lists(st.binary(max_size=80) | st.builds(
    lambda k, v: k + b": " + v,
    st.sampled_from([b"Content-Length", b"Content-Type", b"Transfer-Encoding", b"X-Request-Id", b"Host",
                     b"X-Amzn-SageMaker-Target-Model", b"Expect", b"Connection"]),
    st.binary(max_size=60)), max_size=6)
def _path(line: bytes) -> str:
    """The path of a request line as the server routes it: no query or fragment, percent-decoded ("" if none)."""
    parts = line.split(b" ")
    return unquote(re.split(rb"[?#]", parts[1], maxsplit=1)[0].decode("latin-1")) if len(parts) > 1 else ""


FUZZ = {"requests": 0, "5xx": 0, "non_json_errors": 0, "no_answer": 0}


@given(line=request_lines, headers=header_lines, body=st.binary(max_size=200))
def test_raw_request_fuzz_is_never_a_5xx_and_always_json(server, line, headers, body):
    data = line + b"\r\n" + b"".join(h.replace(b"\r", b"").replace(b"\n", b"") + b"\r\n" for h in headers) + b"\r\n" + body
    FUZZ["requests"] += 1
    try:
        status, response_headers, payload = raw(server.port, data, timeout=TIMEOUT_S + 5)
    except (IndexError, ValueError):
        FUZZ["no_answer"] += 1  # gunicorn hangs up on what it cannot frame, or waits for a promised body
        return
    if status >= 500:
        FUZZ["5xx"] += 1
    assert status < 500, (status, payload[:200])
    if data.startswith(b"HEAD "):
        return  # an answer to HEAD has no body: what follows its head is the next (pipelined) answer
    if status >= 400 and status != 405 and not (status == 404 and not payload):
        try:
            assert_json_error(status, response_headers, payload, tgi=_path(line) in TGI_PATHS)
        except (AssertionError, ValueError):
            FUZZ["non_json_errors"] += 1
            raise


def test_the_server_still_serves_after_the_fuzz(server):
    assert requests.get(f"{server.url}/ping", timeout=5).status_code == 200
    print(f"\nraw fuzz: {FUZZ}")


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    """Room for 4 sequences; each stream takes a second."""
    server = Gunicorn(tmp_path_factory.mktemp("gunicorn-small") / "gunicorn.log", FAKE_TOKEN_DELAY_S="0.05",
                      FAKE_CAPACITY="4")
    try:
        wait_for_ping(server.url, 60, server.proc)
        yield server
    finally:
        server.stop()


def _invocation(body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (b"POST /invocations HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(data), data))


def test_in_a_burst_the_event_loop_refuses_beyond_capacity_before_any_thread(small_server):
    """12 requests written at once on open connections, room for 4: the 8 others get the 429 from
    the event loop (no X-Request-Id: the app never saw them) at once, while the 4 stream."""
    stream = _invocation({"inputs": "abcd", "stream": True, "parameters": {"max_new_tokens": 20}})
    socks = [socket.create_connection(("127.0.0.1", small_server.port), timeout=10) for _ in range(12)]
    try:
        time.sleep(0.3)  # every connection accepted and waiting in the poller
        started = time.monotonic()
        for sock in socks:
            sock.sendall(stream)
        answers = []
        for sock in socks:
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(65536)
            answers.append((time.monotonic() - started, head))
        refused = [(t, h) for t, h in answers if h.startswith(b"HTTP/1.1 429")]
        served = [(t, h) for t, h in answers if h.startswith(b"HTTP/1.1 200")]
        assert len(refused) == 8 and len(served) == 4, [h[:40] for _, h in answers]
        assert max(t for t, _ in refused) < 0.5, refused
        for _, head in refused:
            status, headers, body = _parse_head_and_body(head)
            assert headers["retry-after"] == "1" and headers["connection"] == "close"
            assert "x-request-id" not in headers  # answered by the event loop, not the app
            assert assert_json_error(status, headers, body)["type"] == "queue_full"
    finally:
        for sock in socks:
            sock.close()
    time.sleep(1.5)  # the four streams end (or are aborted): their room is free again
    for _ in range(2):
        status, _, _ = raw(small_server.port, _invocation({"inputs": "ab"}))
        assert status == 200


def _parse_head_and_body(data: bytes) -> tuple[int, dict, bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body[: int(headers.get("content-length", len(body)))]


def test_room_the_event_loop_took_comes_back_when_the_app_refuses_the_request(small_server):
    """Bad bodies (400 in the app) and other answers before generation give their room back."""
    bad = b"POST /invocations HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n{nope"
    for _ in range(6):  # more than the capacity of 4
        status, headers, body = raw(small_server.port, bad)
        assert status == 400, body
    for _ in range(6):
        status, _, _ = raw(small_server.port, _invocation({"inputs": "ab", "parameters": {"max_new_tokens": 1}}))
        assert status == 200
