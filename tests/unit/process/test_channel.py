"""Frames on a worker pipe: call ids, typed messages, raw payloads, foreign bytes refused."""

from __future__ import annotations

import multiprocessing

import pytest
from llm_byoc import protocol
from llm_byoc.process import BadFrame, Channel
from llm_byoc.protocol import Shutdown, StepBatch, WorkerFailure


@pytest.fixture()
def ends():
    left, right = multiprocessing.Pipe()
    yield Channel(left, protocol), Channel(right, protocol)
    left.close()
    right.close()


def test_messages_keep_their_call_id_and_payload(ends):
    left, right = ends
    left.send(3, StepBatch(step_id=9))
    left.send(2**40, WorkerFailure("invalid_request", "no"), payload=b"\x00\xff" * 1000)
    assert right.receive() == (3, StepBatch(step_id=9), b"")
    assert right.receive() == (2**40, WorkerFailure("invalid_request", "no"), b"\x00\xff" * 1000)


@pytest.mark.parametrize("frame", [b"", b"short", b"\x00" * 8 + b"\x07{}", b"\x00" * 8 + b"\x00[1]"])
def test_foreign_frames_are_bad_frames_and_the_channel_goes_on(ends, frame):
    left, right = ends
    left.conn.send_bytes(frame)
    left.send(5, Shutdown())
    with pytest.raises(BadFrame):
        right.receive()
    assert right.receive() == (5, Shutdown(), b"")


def test_a_message_of_another_codec_is_refused_on_both_sides(ends):
    from llm_byoc.multimodel import messages

    left, right = ends
    with pytest.raises(protocol.ProtocolError):
        left.send(1, messages.InvokeRequest())
    Channel(left.conn, messages).send(4, messages.InvokeRequest())
    with pytest.raises(BadFrame) as refused:
        right.receive()
    assert refused.value.call_id == 4


def test_a_busy_send_lock_gives_up_after_its_timeout(ends):
    left, _ = ends
    left._send_lock.acquire()
    try:
        assert left.send(1, Shutdown(), lock_timeout_s=0.05) is False
    finally:
        left._send_lock.release()
