"""SocketCoreClient when the engine server's socket breaks under a sender."""

import threading
from collections import deque


from llm_byoc.engine.client import SocketCoreClient
from llm_byoc.errors import EngineDead
from llm_byoc.protocol import AddSequence, EngineState, SamplingParams


class BrokenConnection:
    def send_bytes(self, data: bytes) -> None:
        raise BrokenPipeError("engine gone")


def client_with(conn) -> tuple[SocketCoreClient, list]:
    outputs: list = []
    client = object.__new__(SocketCoreClient)  # no socket: the connection is the fake above
    client._on_outputs = outputs.append
    client._send_lock = threading.Lock()
    client._replies = deque()
    client._live = set()
    client._calls = {}
    client._dead = None
    client._conn = conn
    return client, outputs


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
    client, _ = client_with(BrokenConnection())
    first = in_thread(client.health)["value"]
    assert first.state is EngineState.DEAD and "engine gone" in first.detail
    second = in_thread(client.health)["value"]  # used to deadlock: _fail re-took the held lock
    assert second.state is EngineState.DEAD


def test_a_failed_add_raises_engine_dead():
    client, _ = client_with(BrokenConnection())
    add = AddSequence("r-0", [1, 2], SamplingParams())
    result = in_thread(lambda: client.add([add]))
    assert isinstance(result["error"], EngineDead)


def test_health_does_not_queue_forever_behind_a_stuck_sender():
    client, _ = client_with(BrokenConnection())
    client._send_lock.acquire()  # another thread stuck mid-send
    try:
        report = in_thread(client.health)["value"]
    finally:
        client._send_lock.release()
    assert report.state is EngineState.DEAD and "not answering" in report.detail
