"""Admission in the HTTP worker's event loop: which request lines it admits, and the 429 it writes."""

from __future__ import annotations

import json
import socket
import time

import pytest

from llm_byoc.api import loop_admission
from llm_byoc.api.admission import ONE_KEY, model_gate, sequence_gate
from llm_byoc.api.app import create_app
from llm_byoc.api.invocations import InvocationRoute
from llm_byoc.api.routes import GENERATION_ROUTES
from llm_byoc.api.loop_admission import (
    Draining, LoopAdmission, generation_key, generation_route, invoked_model, peek_route, refusal, send_refusal,
)
from llm_byoc.errors import QueueFull


@pytest.mark.parametrize("head, route", [
    (b"POST /invocations HTTP/1.1\r\nHost: x\r\n", "/invocations"),
    (b"POST /invocations?x=1 HTTP/1.0\r\n", "/invocations"),
    (b"POST /v1/chat/completions HTTP/1.1\r\n", "/v1/chat/completions"),
    (b"POST /v1/completions HTTP/1.1\r\n\r\n", "/v1/completions"),
    (b"GET /invocations HTTP/1.1\r\n", None),  # not a generation
    (b"POST /ping HTTP/1.1\r\n", None),
    (b"POST /models/m/invoke HTTP/1.1\r\n", "/models/m/invoke"),  # multi-model: per model
    (b"POST /models/m/invoke/x HTTP/1.1\r\n", None),
    (b"POST /models//invoke HTTP/1.1\r\n", None),
    (b"POST /invocations HTTP/1.1", None),  # the request line has not fully arrived
    (b"POST /invocations HTTP/2.0\r\n", None),
    (b"POST  /invocations HTTP/1.1\r\n", None),  # malformed: gunicorn answers it
    (b"\xff\xfe\r\n", None),
    (b"", None),
])
def test_generation_route(head, route):
    assert generation_route(head) == route


@pytest.mark.parametrize("route", GENERATION_ROUTES, ids=lambda route: route.path)
def test_every_generation_route_takes_room_in_the_event_loop(route):
    # TGI's /, /generate and /generate_stream were once missing here: in a burst their 429s came late
    assert generation_route(f"POST {route.path} HTTP/1.1\r\n".encode()) == route.path
    assert generation_key(route.path) == ONE_KEY


def test_the_app_serves_generation_exactly_on_the_routes_the_event_loop_admits(engine, config):
    app = create_app(engine, config, capacity=4, health_refresh_s=0)
    served = {rule.rule for rule in app.url_map.iter_rules() if isinstance(app.view_functions[rule.endpoint],
                                                                           InvocationRoute)}
    assert served == {route.path for route in GENERATION_ROUTES}
    assert all(generation_route(f"POST {path} HTTP/1.1\r\n".encode()) == path for path in served)


def test_a_tgi_route_is_refused_in_tgi_s_shape():
    head, _, body = refusal("/generate_stream", QueueFull("the server is at capacity")).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 429 Too Many Requests\r\n") and b"Retry-After: 1" in head
    assert json.loads(body) == {"error": "the server is at capacity", "error_type": "overloaded"}


def test_refusal_is_the_app_s_429_in_each_shape():
    exc = QueueFull("the server is at capacity")
    for path, payload in (("/invocations", {"error": "the server is at capacity", "type": "queue_full"}),
                          ("/v1/completions", {"error": {"message": "the server is at capacity", "type": "queue_full",
                                                         "param": None, "code": 429}, "type": "queue_full"})):
        head, _, body = refusal(path, exc).partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        assert lines[0] == "HTTP/1.1 429 Too Many Requests"
        assert headers["Retry-After"] == "1" and headers["Connection"] == "close"
        assert headers["Content-Type"] == "application/json" and int(headers["Content-Length"]) == len(body)
        assert json.loads(body) == payload


def test_peek_leaves_the_bytes_and_a_refused_client_reads_the_whole_answer():
    server, client = socket.socketpair()
    with server, client:
        assert peek_route(server) is None  # nothing yet, and no blocking
        client.sendall(b"POST /invocations HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        time.sleep(0.05)
        assert peek_route(server) == "/invocations"
        assert server.recv(100).startswith(b"POST /invocations")  # still there for the thread
        answer = refusal("/invocations", QueueFull("full"))
        assert send_refusal(server, answer)
        received = b""
        while chunk := client.recv(65536):  # the half-close ends the answer
            received += chunk
        assert received == answer


class _Conn:
    def __init__(self, sock):
        self.sock = sock


def test_draining_reads_until_the_client_closes_or_time_is_up(monkeypatch):
    monkeypatch.setattr(loop_admission, "DRAIN_S", 0.2)
    draining = Draining()
    server, client = socket.socketpair()
    with server, client:
        conn = _Conn(server)
        draining.add(conn)
        client.sendall(b"the rest of a body")
        assert draining.readable(conn) is False  # read and dropped; the client is still there
        assert draining.expired() == []
        time.sleep(0.25)
        assert draining.expired() == [conn] and len(draining) == 0
        draining.add(conn)
        client.close()
        assert draining.readable(conn) is True
        draining.remove(conn)
        assert len(draining) == 0


def test_single_model_admission_takes_room_in_the_gate_for_generation_routes_only():
    gate = sequence_gate(2)
    admission = LoopAdmission(gate, generation_key)
    assert admission.reserve("/models/m/invoke") is None
    first, second = admission.reserve("/invocations"), admission.reserve("/v1/completions")
    with pytest.raises(QueueFull):
        admission.reserve("/v1/chat/completions")
    first.release()
    first.release()  # idempotent
    assert gate.in_flight() == 1
    second.release()
    assert gate.in_flight() == 0


def test_multi_model_admission_counts_each_model_apart():
    gate = model_gate(capacity=2)
    admission = LoopAdmission(gate, invoked_model)
    assert admission.reserve("/invocations") is None  # routed by header: the app admits it
    a1, a2 = admission.reserve("/models/a/invoke"), admission.reserve("/models/a/invoke")
    with pytest.raises(QueueFull, match="'a' has 2 requests in flight"):
        admission.reserve("/models/a/invoke")
    b1 = admission.reserve("/models/b/invoke")  # another model has its own room
    a1.release()
    a1.release()  # idempotent
    assert gate.in_flight("a") == 1 and gate.in_flight("b") == 1
    a2.release()
    b1.release()
    assert gate.in_flight("a") == 0 and gate.busy_keys() == set()  # nothing kept for idle models
