"""How the front end reaches the engine core: in this process, or over a socket.

``LLMEngine`` talks to a ``CoreClient``; ``InProcessCore`` calls the core
directly, ``RemoteCore`` (remote_core.py) sends the same messages to an engine
server process. A refused sequence: ``InProcessCore.add`` raises at once (and
leaves none of the request queued); ``RemoteCore.add`` does not wait, and the
refusal comes back on the sequence's stream, where the request handle raises it
and aborts the request's other sequences.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from ..adapters.messages import AdapterCommand, AdapterReply
from ..config import EngineConfig
from ..errors import RequestTimeout
from ..protocol import AddSequence, EngineOutputs, HealthReport, SessionCommand, SessionReply
from .core import EngineCore


Command = AdapterCommand | SessionCommand  # control messages, answered by call id
Reply = AdapterReply | SessionReply


class CoreClient(Protocol):
    def add(self, adds: list[AddSequence]) -> None: ...

    def control(self, command: Command, timeout_s: float) -> Reply: ...

    def abort(self, seq_ids: list[str]) -> None: ...

    def health(self, timeout_s: float | None = None) -> HealthReport: ...

    def engine_metrics(self, timeout_s: float) -> str: ...

    def wait_ready(self, timeout_s: float | None) -> None: ...

    def shutdown(self) -> None: ...


class InProcessCore:
    def __init__(self, config: EngineConfig, on_outputs: Callable[[EngineOutputs], None], worker_target=None):
        self.core = EngineCore(config, on_outputs, worker_target)

    def start(self) -> None:
        self.core.start()

    def add(self, adds: list[AddSequence]) -> None:
        added: list[str] = []
        try:
            for add in adds:
                self.core.add(add)
                added.append(add.seq_id)
        except BaseException:
            self.abort(added)
            raise

    def abort(self, seq_ids: list[str]) -> None:
        for seq_id in seq_ids:
            self.core.abort(seq_id)

    def control(self, command: Command, timeout_s: float) -> Reply:
        done = threading.Event()
        replies: list[Reply] = []

        def reply(message: Reply) -> None:
            replies.append(message)
            done.set()

        self.core.control(command, reply)
        if not done.wait(timeout_s):
            raise RequestTimeout(f"the {type(command).__name__} did not finish within {timeout_s:g} s")
        return replies[0]

    def health(self, timeout_s: float | None = None) -> HealthReport:
        return self.core.health()  # in this process: never waits

    def engine_metrics(self, timeout_s: float) -> str:
        return self.core.metrics_text()

    def wait_ready(self, timeout_s: float | None) -> None:
        self.core.wait_ready(timeout_s)

    def shutdown(self) -> None:
        self.core.shutdown()
