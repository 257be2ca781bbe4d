"""RemoteCore when the engine server's socket breaks under a sender."""

import threading

from fixtures.waiting import wait_for
from llm_byoc import protocol
from llm_byoc.engine.remote_core import RemoteCore
from llm_byoc.errors import EngineDead
from llm_byoc.process.channel import Channel
from llm_byoc.protocol import AddSequence, EngineState, SamplingParams


class BrokenConnection:
    """Sends fail; reads wait (the engine said nothing yet)."""

    def __init__(self):
        self._never = threading.Event()

    def send_bytes(self, data: bytes) -> None:
        raise BrokenPipeError("engine gone")

    def recv_bytes(self, maxlength=None) -> bytes:
        self._never.wait()
        raise EOFError

    def fileno(self) -> int:
        raise OSError("no socket")

    def close(self) -> None:
        pass


def client_with(conn) -> tuple[RemoteCore, list]:
    lost: list = []
    client = RemoteCore("/fake/engine.sock", on_outputs=lambda outputs: None, on_lost=lost.append,
                        open_channel=lambda where: Channel(conn, protocol))
    wait_for(lambda: client._channel is not None)
    return client, lost


def in_thread(fn, timeout_s: float = 5.0):
    result: dict = {}

    def run():
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), "the call hung (send lock never released)"
    return result


def test_a_failed_send_reports_dead_and_never_holds_the_lock():
    client, lost = client_with(BrokenConnection())
    first = in_thread(client.health)["value"]
    assert first.state is EngineState.DEAD and "engine gone" in first.detail
    second = in_thread(client.health)["value"]  # used to deadlock: _fail re-took the held lock
    assert second.state is EngineState.DEAD
    assert len(lost) == 1 and "engine gone" in lost[0]  # the front end is told once


def test_a_failed_add_raises_engine_dead():
    client, _ = client_with(BrokenConnection())
    add = AddSequence("r-0", [1, 2], SamplingParams())
    result = in_thread(lambda: client.add([add]))
    assert isinstance(result["error"], EngineDead)


def test_health_does_not_queue_forever_behind_a_stuck_sender():
    client, _ = client_with(BrokenConnection())
    client._channel._send_lock.acquire()  # another thread stuck mid-send
    try:
        report = in_thread(client.health)["value"]
    finally:
        client._channel._send_lock.release()
    assert report.state is EngineState.DEAD and "not answering" in report.detail
