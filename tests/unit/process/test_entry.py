"""The child's answer loop: ids echoed, errors as data, Shutdown and EOF end it."""

from __future__ import annotations

import multiprocessing
import threading

from llm_byoc import protocol
from llm_byoc.process import Channel, serve_calls
from llm_byoc.protocol import Shutdown, StepBatch, StepOutput, WorkerFailure


def _start(answer, concurrency: int = 1):
    parent, child = multiprocessing.Pipe()
    thread = threading.Thread(target=serve_calls, args=(Channel(child, protocol), answer, concurrency), daemon=True)
    thread.start()
    return Channel(parent, protocol), thread


def test_each_call_is_answered_with_its_id():
    channel, thread = _start(lambda message, payload: (StepOutput(message.step_id, []), payload[::-1]))
    channel.send(11, StepBatch(1), b"abc")
    channel.send(12, StepBatch(2))
    assert channel.receive() == (11, StepOutput(1, []), b"cba")
    assert channel.receive() == (12, StepOutput(2, []), b"")
    channel.send(0, Shutdown())
    thread.join(5)
    assert not thread.is_alive()


def test_an_escaping_exception_is_an_internal_failure_and_the_loop_goes_on():
    def answer(message, payload):
        if message.step_id == 1:
            raise KeyError("boom")
        return StepOutput(message.step_id, []), b""

    channel, thread = _start(answer)
    channel.send(1, StepBatch(1))
    call_id, failure, _ = channel.receive()
    assert call_id == 1 and isinstance(failure, WorkerFailure) and failure.error_type == "internal_error"
    assert "KeyError" in failure.message and not failure.fatal
    channel.send(2, StepBatch(2))
    assert channel.receive()[1] == StepOutput(2, [])
    channel.conn.close()  # the parent goes away: the loop ends
    thread.join(5)
    assert not thread.is_alive()


def test_a_pool_answers_calls_concurrently():
    gate = threading.Barrier(2, timeout=5)

    def answer(message, payload):
        gate.wait()  # both calls must be in flight at once
        return StepOutput(message.step_id, []), b""

    channel, _ = _start(answer, concurrency=2)
    channel.send(1, StepBatch(1))
    channel.send(2, StepBatch(2))
    assert {channel.receive()[0], channel.receive()[0]} == {1, 2}
    channel.send(0, Shutdown())
