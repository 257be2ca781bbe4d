"""Worker pipe messages: typed JSON headers, raw payloads, nothing else accepted."""

from __future__ import annotations

import multiprocessing

import pytest
from llm_byoc.multimodel import messages as wire


@pytest.mark.parametrize(
    "message",
    [
        wire.InvokeRequest(7, wire.Invocation("image/png", "application/json", {"top_k": "3"})),
        wire.InvokeResult(7, wire.Reply("application/json")),
        wire.InvokeFailed(7, "invalid_request", "bad"),
        wire.WorkerReady(123, 1.5),
        wire.LoadFailed("model_load_error", "corrupt"),
        wire.Stop(),
    ],
)
def test_headers_round_trip(message):
    assert wire.decode_header(wire.encode_header(message)) == message


@pytest.mark.parametrize(
    "data",
    [b"not json", b"[1]", b'{"__t": "os.system"}', b'{"__t": "Stop", "extra": 1}', b"{}", b"\xff"],
)
def test_foreign_frames_are_refused(data):
    with pytest.raises(wire.WireError):
        wire.decode_header(data)


def test_only_known_messages_encode():
    with pytest.raises(wire.WireError):
        wire.encode_header({"__t": "Stop"})


def test_send_and_receive_carry_raw_bytes():
    left, right = multiprocessing.Pipe()
    payload = bytes(range(256)) * 10
    wire.send(left, wire.InvokeRequest(1, wire.Invocation()), payload)
    header, body = wire.receive(right)
    assert header == wire.InvokeRequest(1, wire.Invocation()) and body == payload
