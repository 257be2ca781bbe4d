"""Model process messages: typed JSON headers, raw payloads, nothing else accepted."""

from __future__ import annotations

import multiprocessing

import pytest
from llm_byoc.multimodel import messages
from llm_byoc.process import BadFrame, Channel
from llm_byoc.protocol import Shutdown, WorkerFailure


@pytest.mark.parametrize(
    "message",
    [
        messages.InvokeRequest("image/png", "application/json", {"top_k": "3"}),
        messages.InvokeReply("application/json"),
        messages.ModelLoaded(123, 1.5),
        WorkerFailure("model_load_error", "corrupt", fatal=True),
        Shutdown(),
    ],
)
def test_headers_round_trip(message):
    assert messages.decode(messages.encode(message)) == message


@pytest.mark.parametrize(
    "data",
    [b"not json", b"[1]", b'{"__t": "os.system"}', b'{"__t": "Shutdown", "extra": 1}', b"{}", b"\xff",
     b'{"__t": "StepBatch", "step_id": 1}'],
)
def test_foreign_frames_are_refused(data):
    with pytest.raises(messages.WireError):
        messages.decode(data)


def test_only_known_messages_encode():
    with pytest.raises(messages.WireError):
        messages.encode({"__t": "Shutdown"})


def test_the_channel_carries_call_ids_and_raw_bytes():
    left, right = multiprocessing.Pipe()
    payload = bytes(range(256)) * 10
    Channel(left, messages).send(7, messages.InvokeRequest(), payload)
    Channel(left, messages).send(8, Shutdown())
    assert Channel(right, messages).receive() == (7, messages.InvokeRequest(), payload)
    assert Channel(right, messages).receive() == (8, Shutdown(), b"")


def test_the_channel_refuses_a_foreign_frame_with_its_call_id():
    left, right = multiprocessing.Pipe()
    left.send_bytes((9).to_bytes(8, "big") + b"\x00" + b'{"__t": "os.system"}')
    with pytest.raises(BadFrame) as refused:
        Channel(right, messages).receive()
    assert refused.value.call_id == 9
