"""ClientWatch: a client's hang-up aborts its request at once; an open or reused socket never does."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from fixtures import machine
from llm_byoc.api.client_watch import ClientWatch

pytestmark = pytest.mark.skipif(not ClientWatch().supported, reason=machine.lacks("epoll (Linux only)"))


@pytest.fixture
def pair():
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    yield client, server
    client.close()
    server.close()


def test_a_client_that_closes_fires_within_a_moment(pair):
    client, server = pair
    watch, gone = ClientWatch(), threading.Event()
    watch.watch(server, gone.set)
    started = time.monotonic()
    client.close()
    assert gone.wait(1.0) and time.monotonic() - started < 0.5
    assert len(watch) == 0


def test_a_reset_fires_too(pair):
    client, server = pair
    watch, gone = ClientWatch(), threading.Event()
    watch.watch(server, gone.set)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    client.close()  # linger 0: RST
    assert gone.wait(1.0)


def test_data_from_the_client_does_not_fire_and_unwatch_stops_it(pair):
    client, server = pair
    watch, gone = ClientWatch(), threading.Event()
    unwatch = watch.watch(server, gone.set)
    client.sendall(b"GET /next HTTP/1.1\r\n\r\n")  # a pipelined request is not a hang-up
    assert not gone.wait(0.3)
    unwatch()
    unwatch()  # idempotent
    client.close()
    assert not gone.wait(0.3)


def test_none_and_unsupported_sockets_are_ignored():
    ClientWatch().watch(None, lambda: None)()
