"""The overload benchmark's burst client against a small stdlib server: streams counted to their
last event, 429s and hung requests told apart, each timed from its own write."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from benchmarks.burst import Burst, BurstRequest


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = body["inputs"]
        if mode == "full":
            data = json.dumps({"error": "full", "type": "queue_full"}).encode()
            self.send_response(429)
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", "1")
            self.end_headers()
            self.wfile.write(data)
        elif mode == "stall":
            time.sleep(3)
        elif mode == "plain":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(json.dumps([{"generated_text": "x"}]).encode())
        else:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            tokens = int(mode)
            for i in range(tokens):
                last = i == tokens - 1
                event = {"index": 0, "token": {"id": i, "text": f" t{i}", "logprob": 0.0, "special": False},
                         "generated_text": "..." if last else None,
                         "details": {"finish_reason": "length"} if last else None}
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()


@pytest.fixture
def port():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _request(inputs: str, stream: bool = True) -> BurstRequest:
    return BurstRequest("/invocations", json.dumps({"inputs": inputs}).encode(), stream)


def test_outcomes_of_one_burst(port):
    requests = [_request("4"), _request("2"), _request("full"), _request("stall"), _request("plain", stream=False)]
    burst = Burst(port, requests, timeout_s=1.5, want_tokens=4)
    burst.wait_sent()
    results = burst.results()
    assert [r.outcome for r in results] == ["served", "truncated", "http_429", "hung", "served"]
    assert [r.tokens for r in results[:2]] == [4, 2]
    assert results[2].seconds < 1.0 and 1.4 < results[3].seconds < 3.0


def test_a_closed_port_is_a_connection_error():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]  # nothing listens here once closed
    burst = Burst(free, [_request("4")], timeout_s=2, want_tokens=4)
    burst.wait_sent()
    (result,) = burst.results()
    assert result.outcome.startswith("connection_")
