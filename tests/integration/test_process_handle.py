"""WorkerHandle against a small real worker: handshake, one future per call, death, timeout, stop."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from llm_byoc.errors import EngineDead
from llm_byoc.multimodel import messages
from llm_byoc.process import CallTimeout, Channel, WorkerHandle, WorkerStartFailed, get_context, serve_calls
from llm_byoc.protocol import EngineState, Shutdown, WorkerFailure


def sleepy_worker(conn, fail_load: bool = False) -> None:
    """Answers InvokeRequest(params={"sleep": s}) after s seconds, echoing the payload; 4 at once."""
    channel = Channel(conn, messages)
    if fail_load:
        channel.send(0, WorkerFailure("model_load_error", "weights are corrupt", fatal=True))
        return
    channel.send(0, messages.ModelLoaded(os.getpid(), 0.0))

    def answer(request, body):
        time.sleep(float(request.params.get("sleep", "0")))
        return messages.InvokeReply(), body

    serve_calls(channel, answer, concurrency=4)


def start(**kwargs) -> WorkerHandle:
    handle = WorkerHandle("test worker", messages, messages.ModelLoaded, get_context("spawn"), **kwargs)
    handle.start(sleepy_worker)
    return handle


def call(handle, sleep: float, body: bytes, timeout_s: float | None = 30):
    return handle.call(messages.InvokeRequest(params={"sleep": str(sleep)}), body, timeout_s)


def test_replies_reach_their_own_callers_out_of_order():
    handle = start()
    try:
        assert isinstance(handle.wait_ready(30), messages.ModelLoaded) and handle.alive
        with ThreadPoolExecutor(4) as pool:
            slow = pool.submit(call, handle, 0.5, b"slow")
            fast = [pool.submit(call, handle, 0, f"fast{i}".encode()) for i in range(3)]
            assert [f.result()[1] for f in fast] == [b"fast0", b"fast1", b"fast2"]
            assert not slow.done()
            assert slow.result()[1] == b"slow"
    finally:
        handle.stop(Shutdown())
    assert handle.state is EngineState.DEAD and not handle.alive


def test_a_failed_handshake_is_dead_with_the_workers_words():
    handle = WorkerHandle("test worker", messages, messages.ModelLoaded, get_context("spawn"))
    handle.start(sleepy_worker, True)
    with pytest.raises(WorkerStartFailed) as failed:
        handle.wait_ready(30)
    assert failed.value.failure.message == "weights are corrupt" and "weights are corrupt" in failed.value.message
    handle.stop(Shutdown())


def test_death_fails_every_pending_call_and_fires_on_dead_once():
    deaths = []
    handle = start(on_dead=deaths.append)
    handle.wait_ready(30)
    with ThreadPoolExecutor(3) as pool:
        pending = [pool.submit(call, handle, 30, b"x") for _ in range(3)]
        time.sleep(0.3)
        os.kill(handle.pid, signal.SIGKILL)
        for future in pending:
            with pytest.raises(EngineDead):
                future.result(10)
    deadline = time.monotonic() + 5
    while not deaths and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(deaths) == 1 and not handle.alive
    with pytest.raises(EngineDead):
        call(handle, 0, b"after")
    handle.stop(Shutdown())
    assert len(deaths) == 1


def test_a_late_call_times_out_and_the_worker_lives_on():
    handle = start()
    try:
        handle.wait_ready(30)
        with pytest.raises(CallTimeout):
            call(handle, 1.0, b"late", timeout_s=0.1)
        assert call(handle, 0, b"next")[1] == b"next"  # the late reply, when it comes, is dropped
        with ThreadPoolExecutor(2) as pool:
            busy = [pool.submit(call, handle, 0.5, b"busy") for _ in range(2)]
            assert [f.result()[1] for f in busy] == [b"busy", b"busy"]
    finally:
        handle.stop(Shutdown())


def test_stop_kills_a_worker_that_does_not_exit():
    handle = start()
    handle.wait_ready(30)
    os.kill(handle.pid, signal.SIGSTOP)
    started = time.monotonic()
    handle.stop(Shutdown(), timeout_s=0.5)
    assert time.monotonic() - started < 10 and handle.has_exited()
