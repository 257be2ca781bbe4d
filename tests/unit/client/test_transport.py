"""The local-container path: a tiny HTTP server on 127.0.0.1 started by the test."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from llm_byoc.client import EndpointClient, EndpointError, StreamError

SSE = (
    'data: {"index": 0, "token": {"id": 7, "text": "안녕", "logprob": -0.1, "special": false}, "generated_text": null, "details": null}\n\n'
    'data: {"index": 0, "token": {"id": 8, "text": "🙂", "logprob": -0.2, "special": false}, "generated_text": "안녕🙂", "details": {"finish_reason": "length"}}\n\n'
).encode()


class FakeContainer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked responses, like gunicorn's
    seen: list[dict] = []
    release = threading.Event()  # "slow" streams hold their second event until the test sets this

    def log_message(self, *_):  # keep pytest output clean
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeContainer.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
        if body.get("inputs") == "overload":
            return self._json(429, {"error": "too many waiting sequences", "type": "queue_full"})
        if body.get("inputs") == "crash":
            first_event = SSE[: SSE.index(b"\n\n") + 2]
            return self._chunks([first_event + b'data: {"error": "engine', b' died", "type": "engine_dead"}\n\n'])
        if body.get("inputs") == "slow":
            return self._slow(chunked=body.get("chunked", True))
        if body.get("stream"):
            # cut inside the Korean and inside the emoji, and mid-event
            cuts = [SSE[:62], SSE[62:63], SSE[63:180], SSE[180:]]
            return self._chunks(cuts)
        return self._json(200, [{"generated_text": "안녕🙂"}])

    def _json(self, status: int, obj) -> None:
        raw = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _slow(self, chunked: bool) -> None:
        first, second = SSE[: SSE.index(b"\n\n") + 2], SSE[SSE.index(b"\n\n") + 2 :]
        if chunked:
            return self._chunks([first, b"WAIT", second])
        self.send_response(200)  # no length, no chunking: the body ends when the connection closes
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(first)
        self.wfile.flush()
        FakeContainer.release.wait(5)
        self.wfile.write(second)
        self.close_connection = True

    def _chunks(self, parts: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for part in parts:
            if part == b"WAIT":
                FakeContainer.release.wait(5)
                continue
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.flush()
            time.sleep(0.01)
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def container_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeContainer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def clear_seen():
    FakeContainer.seen.clear()
    FakeContainer.release.clear()


def test_invoke(container_url):
    client = EndpointClient.local(container_url)
    assert client.invoke({"inputs": "hi"}) == [{"generated_text": "안녕🙂"}]
    (request,) = FakeContainer.seen
    assert request["path"] == "/invocations"
    assert request["headers"]["Content-Type"] == "application/json"


def test_stream_decodes_chunks_cut_mid_character(container_url):
    events = list(EndpointClient.local(container_url).stream({"inputs": "hi"}))
    assert [(e.text, e.token_id) for e in events] == [("안녕", 7), ("🙂", 8)]
    assert events[-1].finish_reason == "length"
    (request,) = FakeContainer.seen
    assert request["body"] == {"inputs": "hi", "stream": True}
    assert request["headers"]["Accept"] == "text/event-stream"


def test_target_model_uses_the_multi_model_route(container_url):
    EndpointClient.local(container_url).invoke({"inputs": "hi"}, target_model="team a/m.tar.gz")
    (request,) = FakeContainer.seen
    assert request["path"] == "/models/team%20a%2Fm.tar.gz/invoke"
    assert request["headers"]["X-Amzn-SageMaker-Target-Model"] == "team a/m.tar.gz"


@pytest.mark.parametrize("streamed", [False, True])
def test_an_adapter_is_named_in_the_header_sagemaker_sends(container_url, streamed):
    client = EndpointClient.local(container_url)
    if streamed:
        assert [e.text for e in client.stream({"inputs": "hi"}, adapter="support")] == ["안녕", "🙂"]
    else:
        client.invoke({"inputs": "hi"}, adapter="support")
    (request,) = FakeContainer.seen
    assert request["path"] == "/invocations"
    assert request["headers"]["X-Amzn-SageMaker-Adapter-Identifier"] == "support"
    assert "X-Amzn-SageMaker-Target-Model" not in request["headers"]


def test_no_adapter_no_header(container_url):
    EndpointClient.local(container_url).invoke({"inputs": "hi"})
    assert "X-Amzn-SageMaker-Adapter-Identifier" not in FakeContainer.seen[0]["headers"]


def test_http_error_keeps_status_and_type(container_url):
    with pytest.raises(EndpointError) as info:
        EndpointClient.local(container_url).invoke({"inputs": "overload"})
    assert (info.value.status_code, info.value.error_type) == (429, "queue_full")
    assert str(info.value) == "HTTP 429 queue_full: too many waiting sequences"


def test_error_event_mid_stream(container_url):
    stream = EndpointClient.local(container_url).stream({"inputs": "crash"})
    assert next(stream).text == "안녕"
    with pytest.raises(StreamError, match="engine died") as info:
        next(stream)
    assert info.value.error_type == "engine_dead"


def test_unreachable_container_is_a_clear_error():
    with pytest.raises(EndpointError, match="cannot reach http://127.0.0.1:9/invocations"):
        EndpointClient.local("http://127.0.0.1:9", timeout_s=2).invoke({"inputs": "hi"})


@pytest.mark.parametrize("chunked", [True, False])
def test_tokens_arrive_before_the_response_ends(container_url, chunked):
    stream = EndpointClient.local(container_url).stream({"inputs": "slow", "chunked": chunked})
    started = time.monotonic()
    first = next(stream)  # the server holds the rest until we release it
    assert first.text == "안녕" and time.monotonic() - started < 3
    FakeContainer.release.set()
    assert [e.text for e in stream] == ["🙂"]
